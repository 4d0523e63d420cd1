"""Nothing a client sends produces a 5xx (PROTOCOL §2, §7 "Errors").

Every malformed body, envelope field, header, path or query parameter is answered
with a 4xx carrying a PROTOCOL error code, in the JSON error envelope, and the
Group's log does not move. The cases go through the whole HTTP stack (Django's
test client: URLs, middleware, DRF, the append pipeline) against PostgreSQL.
"""

import json
import uuid
from datetime import timedelta

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from apps.ledger.models import CommandRecord
from mission_weave.protocol.canonical import sign, without
from mission_weave.protocol.errors import HTTP_STATUS
from mission_weave.protocol.timefmt import format_time
from tests.support import Scenario, contract, now

PROTOCOL_CODES = frozenset(HTTP_STATUS) - {"INTERNAL_ERROR"}
FAKE_SIGNATURE = {"alg": "Ed25519", "keyId": "nobody#1", "sig": "A" * 86}


@pytest.fixture
def s(db):
    scenario = Scenario()
    scenario.item_id = scenario.authorize()
    return scenario


def assert_rejected(response) -> dict:
    """A 4xx in the PROTOCOL error envelope whose HTTP status matches its code."""
    assert 400 <= response.status_code < 500, (response.status_code, response.content[:300])
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"code", "message", "details"}, error
    assert error["code"] in PROTOCOL_CODES, error
    assert isinstance(error["message"], str) and error["message"], error
    assert isinstance(error["details"], dict), error
    if response.status_code not in (405, 415):  # HTTP says more than the code there
        assert response.status_code == HTTP_STATUS[error["code"]], (response.status_code, error)
    return error


def post_raw(actor, data, content_type="application/json", group_id=None, **headers):
    if actor.token:
        headers.setdefault("HTTP_AUTHORIZATION", f"Bearer {actor.token}")
    group_id = actor.world.group.id if group_id is None else group_id
    return actor.client.post(f"/api/v1/groups/{group_id}/commands", data,
                             content_type=content_type, **headers)


def signed(actor, envelope: dict) -> dict:
    """Sign when RFC 8785 can encode the envelope; otherwise keep a plausible signature."""
    try:
        return sign(envelope, actor.key, actor.key_id)
    except ValueError:
        return {**without(envelope, "signature"), "signature": FAKE_SIGNATURE}


def command(actor, type_: str, body, **fields) -> dict:
    """Actor.envelope for content RFC 8785 may not encode: signed when it can be."""
    envelope = {"id": f"cmd-{uuid.uuid4().hex}", "type": type_, "groupId": actor.world.group.id,
                "actor": actor.principal, "issuedAt": format_time(now()),
                "sessionEpoch": actor.session_epoch, "membershipEpoch": actor.membership_epoch,
                "body": body, **fields}
    return signed(actor, envelope)


def base_envelope(s) -> dict:
    """A command the coordinator could send successfully: cancel the open item, with
    every optional envelope member present. Each case below breaks one thing."""
    item = s.item(s.item_id)
    return without(s.c.envelope(
        "work.cancel", {"reason": "not needed"}, workItemId=s.item_id,
        expectedRevision=item["revision"], ownershipEpoch=item["ownershipEpoch"],
        leaseId="lease_none", extensions={"urn:example:hint": {"critical": False}}), "signature")


def test_the_base_envelope_is_accepted(s):
    """Guard for the cases below: the unbroken envelope goes through."""
    head = s.world.head
    response = post_raw(s.c, json.dumps(signed(s.c, base_envelope(s))))
    assert response.status_code == 200, response.json()
    assert s.world.head == head + 1


# --- bodies that are not a JSON object ----------------------------------------------------

RAW_BODIES = {
    "empty": b"",
    "not json": b"hello, server",
    "truncated": b'{"id": "cmd-1", "type": ',
    "trailing garbage": b"{} {}",
    "single quotes": b"{'id': 'cmd-1'}",
    "array": b"[]",
    "array of object": b'[{"id": "cmd-1"}]',
    "string": b'"a command"',
    "number": b"42",
    "null": b"null",
    "true": b"true",
    "NaN": b'{"id": NaN}',
    "Infinity": b'{"expectedRevision": Infinity}',
    "-Infinity": b"[-Infinity]",
    "float overflow to inf": b'{"expectedRevision": 1e400}',
    "float overflow top level": b"1e999",
    "integer with 5000 digits": b'{"expectedRevision": 1' + b"0" * 5000 + b"}",
    "invalid utf-8": b'{"id": "\xff\xfe\xfd"}',
    "utf-16": '{"id": "cmd-1"}'.encode("utf-16"),
    "utf-8 BOM": b'\xef\xbb\xbf{"id": "cmd-1"}',
    "lone surrogate": b'{"id": "\\ud800"}',
    "lone surrogate key": b'{"\\udfff": 1}',
    "NUL escape": b'{"id": "\\u0000"}',
    "NUL key": b'{"\\u0000": 1}',
    "raw control character": b'{"id": "a\x01b"}',
    "deep arrays": b"[" * 100_000 + b"]" * 100_000,
    "deep objects": b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
    "moderately deep object": b'{"a":' * 900 + b"1" + b"}" * 900,
}


@pytest.mark.parametrize("raw", RAW_BODIES.values(), ids=RAW_BODIES.keys())
def test_a_body_that_is_not_an_envelope_is_refused(s, raw):
    head = s.world.head
    error = assert_rejected(post_raw(s.c, raw))
    assert error["code"] == "VALIDATION_ERROR"
    assert s.world.head == head


@pytest.mark.parametrize("raw", RAW_BODIES.values(), ids=RAW_BODIES.keys())
def test_a_session_request_that_is_not_json_is_refused(s, raw):
    response = s.c.client.post("/api/v1/sessions", raw, content_type="application/json")
    assert assert_rejected(response)["code"] == "VALIDATION_ERROR"


# --- one envelope member broken -----------------------------------------------------------

HUGE = 2**80
NOT_A_STRING = [None, True, 7, HUGE, -HUGE, 1.5, [], ["x"], {}, {"a": 1}]
ODD_STRINGS = ["", "\x00", "a\x00b", "\ud800", "x\udfffy", "x" * 5000, "\U0001F600" * 300]
NOT_AN_INTEGER = [None, True, False, "1", 1.5, -1, [], [1], {}, {"a": 1}, 2**53, HUGE, -HUGE,
                  10**400]
BAD_TIMES = ["", "yesterday", "2026-13-45T99:99:99Z", "2026-01-01T00:00:00", "2026-01-01",
             "9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+14:00", "+002026-01-01T00:00:00Z",
             "2026-01-01T00:00:00Z\x00", "\u0662\u0660\u0662\u0666-01-01T00:00:00Z"]

FIELD_CASES = (
    [(f, v) for f in ("id", "type", "groupId", "actor", "workItemId", "leaseId")
     for v in NOT_A_STRING + ODD_STRINGS]
    + [("issuedAt", v) for v in NOT_A_STRING + ODD_STRINGS + BAD_TIMES]
    + [(f, v) for f in ("sessionEpoch", "membershipEpoch") for v in [*NOT_AN_INTEGER, 0]]
    + [(f, v) for f in ("expectedRevision", "ownershipEpoch") for v in NOT_AN_INTEGER]
    + [("body", v) for v in [None, [], "body", 1, True, HUGE, {"reason": "\x00"},
                             {"reason": HUGE}, {"reason": "\ud800"}, {"reason": 1e308},
                             {"reason": "ok", "extra": 1}, {"reason": {"a": {"b": [1]}}}]]
    + [("extensions", v) for v in [None, [], "ext", 1, {"urn:a": True}, {"urn:a": {}},
                                   {"urn:a": {"critical": "yes"}}, {"urn:a": {"critical": HUGE}},
                                   {"urn:a": {"critical": True}},
                                   {"\x00": {"critical": False}},
                                   {"urn:a": {"critical": False, "n": HUGE}}]]
    + [("id", "has space"), ("id", "caf\u00e9"), ("type", "work.nonsense"),
       ("type", "WORK.CANCEL"), ("groupId", "grp_someone-else"), ("actor", "agent:someone"),
       ("actor", "system"), ("workItemId", "wi_does-not-exist"), ("unknownMember", 1),
       ("Id", "cmd-upper")]
)


def _case_id(case) -> str:
    field, value = case
    text = repr(value)
    return f"{field}={text[:40]}"


@pytest.mark.parametrize("case", FIELD_CASES, ids=[_case_id(c) for c in FIELD_CASES])
def test_a_broken_envelope_member_is_refused(s, case):
    field, value = case
    envelope = {**base_envelope(s), field: value}
    head = s.world.head
    assert_rejected(post_raw(s.c, json.dumps(envelope_with_signature(s, envelope))))
    assert s.world.head == head


def envelope_with_signature(s, envelope):
    return signed(s.c, envelope)


REQUIRED = ["id", "type", "groupId", "actor", "issuedAt", "sessionEpoch", "membershipEpoch",
            "body", "workItemId"]


@pytest.mark.parametrize("field", [*REQUIRED, "signature"])
def test_a_missing_envelope_member_is_refused(s, field):
    envelope = signed(s.c, base_envelope(s))
    del envelope[field]
    if field != "signature":
        envelope = signed(s.c, without(envelope, "signature"))
    head = s.world.head
    error = assert_rejected(post_raw(s.c, json.dumps(envelope)))
    assert error["code"] in {"VALIDATION_ERROR", "INVALID_SIGNATURE", "STALE_SESSION"}
    assert s.world.head == head


def _signature_cases(s) -> dict:
    envelope = signed(s.c, base_envelope(s))
    good = envelope["signature"]
    other_key = Ed25519PrivateKey.generate()
    return {
        "null": None, "string": "signed", "array": [good], "empty object": {},
        "only alg": {"alg": "Ed25519"},
        "other alg": {**good, "alg": "RS256"},
        "alg wrong case": {**good, "alg": "ed25519"},
        "keyId not a string": {**good, "keyId": 5},
        "keyId huge int": {**good, "keyId": HUGE},
        "unknown keyId": {**good, "keyId": "nobody#1"},
        "keyId of another agent": {**good, "keyId": s.w1.key_id},
        "keyId with NUL": {**good, "keyId": s.c.key_id + "\x00"},
        "sig not base64": {**good, "sig": "!!!!****"},
        "sig empty": {**good, "sig": ""},
        "sig non-ascii": {**good, "sig": "\u00e9" * 86},
        "sig lone surrogate": {**good, "sig": "\ud800"},
        "sig too short": {**good, "sig": "AAAA"},
        "sig too long": {**good, "sig": "A" * 200},
        "sig over the length limit": {**good, "sig": "A" * 5000},
        "sig padded": {**good, "sig": good["sig"] + "=="},
        "sig not a string": {**good, "sig": [good["sig"]]},
        "sig by another key": sign(without(envelope, "signature"), other_key,
                                   s.c.key_id)["signature"],
        "extra member": {**good, "x5c": []},
    }


SIGNATURE_CASES = ["null", "string", "array", "empty object", "only alg", "other alg",
                   "alg wrong case", "keyId not a string", "keyId huge int", "unknown keyId",
                   "keyId of another agent", "keyId with NUL", "sig not base64", "sig empty",
                   "sig non-ascii", "sig lone surrogate", "sig too short", "sig too long",
                   "sig over the length limit", "sig padded", "sig not a string",
                   "sig by another key", "extra member"]


@pytest.mark.parametrize("case", SIGNATURE_CASES)
def test_a_signature_of_the_wrong_shape_is_refused(s, case):
    envelope = signed(s.c, base_envelope(s))
    envelope["signature"] = _signature_cases(s)[case]
    head = s.world.head
    error = assert_rejected(post_raw(s.c, json.dumps(envelope)))
    assert error["code"] in {"VALIDATION_ERROR", "INVALID_SIGNATURE"}
    assert s.world.head == head


# --- bodies a human sends (no signature: the pipeline hashes the content itself) ----------

HUMAN_BODIES = {
    "huge integer in body": {"title": "t", "ownerId": "user:x", "coordinatorId": "user:x",
                             "budgets": {"tokens": HUGE}},
    "2**53 in body": {"title": "t", "ownerId": "user:x", "coordinatorId": "user:x",
                      "budgets": {"tokens": 2**53}},
    "NUL in title": {"title": "a\x00b", "ownerId": "user:x", "coordinatorId": "user:x"},
    "lone surrogate in title": {"title": "a\ud800b", "ownerId": "user:x",
                                "coordinatorId": "user:x"},
    "NUL in a free-form object": {"title": "t", "ownerId": "user:x", "coordinatorId": "user:x",
                                  "budgets": {"note\x00": "x"}},
    "surrogate in a free-form key": {"title": "t", "ownerId": "user:x",
                                     "coordinatorId": "user:x", "budgets": {"\udc80": 1}},
    "deep free-form object": {"title": "t", "ownerId": "user:x", "coordinatorId": "user:x",
                              "budgets": json.loads('{"a":' * 500 + "1" + "}" * 500)},
}


@pytest.mark.parametrize("body", HUMAN_BODIES.values(), ids=HUMAN_BODIES.keys())
def test_a_human_command_with_unencodable_content_is_refused(s, body):
    envelope = s.owner.envelope("mission.create", body)
    head = s.world.head
    assert_rejected(s.owner.post(envelope))
    assert s.world.head == head


@pytest.mark.parametrize("field,value", [("expectedRevision", HUGE), ("membershipEpoch", HUGE),
                                         ("workItemId", "wi\x00"), ("type", "x\ud800"),
                                         ("issuedAt", "9999-12-31T23:59:59-23:59")])
def test_a_human_envelope_member_out_of_domain_is_refused(s, field, value):
    envelope = {**s.owner.envelope("mission.create", {"title": "t", "ownerId": s.owner.principal,
                                                      "coordinatorId": s.c.principal}),
                field: value}
    head = s.world.head
    assert_rejected(s.owner.post(envelope))
    assert s.world.head == head


# --- command bodies whose values only fail deep inside --------------------------------------

def test_an_offer_start_window_beyond_the_calendar_is_refused(s):
    """startWithinSeconds must not overflow the clock when the offer is accepted."""
    head = s.world.head
    response = s.c.send("work.offer", {
        "candidates": [s.w1.name], "mode": "sequential", "startWithinSeconds": 2**53 - 1,
        "expiresAt": format_time(now() + timedelta(minutes=10))}, workItemId=s.item_id)
    if response.status_code == 200:  # if the server takes it, accepting it must not break
        head = s.world.head
        response = s.w1.send("work.accept_offer", {"contractRevision": 1}, workItemId=s.item_id)
    assert_rejected(response)
    assert s.world.head == head


@pytest.mark.parametrize("seconds_field,type_", [("leaseSeconds", "work.start")])
def test_a_lease_length_beyond_the_calendar_is_refused(s, seconds_field, type_):
    s.offer(s.item_id)
    s.accept(s.item_id)
    head = s.world.head
    response = s.w1.send(type_, {seconds_field: 2**53 - 1}, workItemId=s.item_id,
                         ownershipEpoch=s.item(s.item_id)["ownershipEpoch"])
    assert assert_rejected(response)["code"] == "VALIDATION_ERROR"
    assert s.world.head == head


def test_a_blocked_lease_beyond_the_calendar_is_refused(s):
    s.offer(s.item_id)
    s.accept(s.item_id)
    s.start(s.item_id)
    head = s.world.head
    response = s.w1.send("work.block", {"checkpoint": {"progress": {"phase": "x"}},
                                        "requiredResolution": "r",
                                        "blockedLeaseSeconds": 2**53 - 1},
                         **s.lease_fields(s.item_id))
    assert assert_rejected(response)["code"] == "VALIDATION_ERROR"
    assert s.world.head == head


@pytest.mark.parametrize("expires_at", ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+14:00",
                                        "2026-02-30T00:00:00Z", "1970-01-01T00:00:00Z"])
def test_an_offer_expiry_out_of_range_is_refused(s, expires_at):
    head = s.world.head
    response = s.c.send("work.offer", {"candidates": [s.w1.name], "mode": "sequential",
                                       "expiresAt": expires_at}, workItemId=s.item_id)
    assert assert_rejected(response)["code"] == "VALIDATION_ERROR"
    assert s.world.head == head


@pytest.mark.parametrize("overrides", [
    {"deadline": "9999-12-31T23:59:59-23:59"},
    {"budgets": {"tokens": HUGE}},
    {"goal": "\x00"},
    {"goal": "\ud83d"},
    {"revision": 2**53 - 1},
    {"dependencies": {"workItems": ["\x00"], "policy": "all_verified"}},
    {"dependencies": {"workItems": ["wi_" + "x" * 200], "policy": "all_verified"}},
    {"retry": {"maxAttempts": 3, "backoff": {"strategy": "fixed", "initialSeconds": 2**53 - 1,
                                              "maxSeconds": 1}}},
], ids=["deadline overflow", "huge budget", "NUL goal", "surrogate goal", "huge revision",
        "NUL dependency", "long dependency", "backoff inverted"])
def test_a_contract_with_odd_values_is_refused(s, overrides):
    head = s.world.head
    response = s.c.post(command(s.c, "work.authorize", {"missionId": s.mission_id,
                                                         "contract": contract(**overrides)}))
    assert assert_rejected(response)["code"] in {"VALIDATION_ERROR", "INVALID_CONTRACT"}
    assert s.world.head == head


# --- headers, paths and query parameters ----------------------------------------------------

ODD_AUTHORIZATION = ["", "Bearer", "Bearer ", "Bearer  ", "bearer TOKEN", "Basic dXNlcjpwdw==",
                     "Bearer \x00", "Bearer \u00fc\u00f1\u00ee", "Bearer \U0001F600",
                     "Bearer " + "a" * 10_000, "Bearer a b c", "Bearer\ttoken", "Bearer '; --",
                     "Bearer ../../etc/passwd", "Token abc", "Bearer %00", "Bearer \r\n"]


@pytest.mark.parametrize("header", ODD_AUTHORIZATION)
def test_an_odd_bearer_token_is_refused_on_commands(s, header):
    head = s.world.head
    envelope = signed(s.c, base_envelope(s))
    response = s.c.client.post(f"/api/v1/groups/{s.world.group.id}/commands",
                               json.dumps(envelope), content_type="application/json",
                               HTTP_AUTHORIZATION=header)
    assert assert_rejected(response)["code"] == "UNAUTHENTICATED"
    assert s.world.head == head


@pytest.mark.parametrize("header", ODD_AUTHORIZATION)
def test_an_odd_bearer_token_is_refused_on_reads(s, header):
    response = s.c.client.get(f"/api/v1/groups/{s.world.group.id}/work-items/{s.item_id}",
                              HTTP_AUTHORIZATION=header)
    assert assert_rejected(response)["code"] == "UNAUTHENTICATED"


def test_a_body_that_is_not_json_by_content_type_is_still_judged_as_a_command(s):
    head = s.world.head
    response = post_raw(s.c, "id=1&type=work.cancel",
                        content_type="application/x-www-form-urlencoded")
    assert_rejected(response)
    assert s.world.head == head


BAD_QUERIES = ["after=-1", "after=abc", "after=1.5", "after=", "after=%00", "after=0x10",
               "after=1e3", "limit=0", "limit=-5", "limit=abc", "limit=100000", "limit=1001",
               "limit=1e3", "limit=", "limit=%F0%9F%98%80", "limit=%00",
               "after=-99999999999999999999", "limit=99999999999999999999999999",
               "after=%C2%B2", "limit=%C2%B2", "after=%EF%BC%91", "after=+1", "after=%201",
               "after=1_0", "after=" + "9" * 5000]


@pytest.mark.parametrize("query", BAD_QUERIES)
def test_a_bad_events_query_is_refused(s, query):
    response = s.c.get(f"events?{query}")
    assert assert_rejected(response)["code"] == "VALIDATION_ERROR"


@pytest.mark.parametrize("query", ["after=99999999999999999999999999", "after=9223372036854775808",
                                   "after=1&after=2", "unknown=1", "after=%EF%BC%91"])
def test_an_edge_events_query_never_breaks_the_server(s, query):
    response = s.c.get(f"events?{query}")
    if response.status_code == 200:
        assert response.json()["headSequence"] == s.world.head
    else:
        assert_rejected(response)


@pytest.mark.parametrize("query", ["missionId=%00", "state=%00", "missionId=" + "x" * 5000,
                                   "state=%F0%9F%98%80", "missionId=%ED%A0%80"])
def test_a_bad_work_item_filter_never_breaks_the_server(s, query):
    response = s.c.get(f"work-items?{query}")
    if response.status_code == 200:
        assert response.json()["workItems"] == []
    else:
        assert_rejected(response)


ODD_IDS = ["%00", "a%00b", "x" * 5000, "%F0%9F%98%80", "%ED%A0%80", "%FF", "..", "%20", "null"]


@pytest.mark.parametrize("odd", ODD_IDS)
def test_an_odd_group_id_in_the_path_is_refused(s, odd):
    head = s.world.head
    for path in ("events", "work-items", f"work-items/{s.item_id}", "missions"):
        response = s.c.client.get(f"/api/v1/groups/{odd}/{path}",
                                  HTTP_AUTHORIZATION=f"Bearer {s.c.token}")
        assert assert_rejected(response)["code"] in {"NOT_A_MEMBER", "NOT_FOUND"}
    envelope = signed(s.c, base_envelope(s))
    assert_rejected(post_raw(s.c, json.dumps(envelope), group_id=odd))
    assert s.world.head == head


@pytest.mark.parametrize("odd", ODD_IDS)
def test_an_odd_work_item_or_mission_id_in_the_path_is_refused(s, odd):
    for path in (f"work-items/{odd}", f"work-items/{odd}/audit", f"missions/{odd}"):
        assert assert_rejected(s.c.get(path))["code"] == "NOT_FOUND"


# --- rejected commands are remembered, but never as broken rows -----------------------------

def test_a_rejected_command_with_odd_but_valid_text_is_remembered(s):
    """Unicode that PostgreSQL and RFC 8785 can both hold goes through untouched."""
    text = "\u200b\u202e\ufeff\U0001F600 caf\u00e9 \u00a0\t\n e\u0301 \uffff"
    envelope = s.c.envelope("conversation.post", {"kind": "message", "text": text},
                            workItemId="wi_missing")
    first = s.c.post(envelope)
    assert assert_rejected(first)["code"] == "NOT_FOUND"
    assert s.c.post(envelope).json() == first.json()
    assert CommandRecord.objects.filter(command_id=envelope["id"]).count() == 1


# --- fuzz: random JSON as the envelope -------------------------------------------------------

JSON_SCALARS = (st.none() | st.booleans()
                | st.integers(min_value=-(2**90), max_value=2**90)
                | st.floats(allow_nan=False, allow_infinity=False)
                | st.text(max_size=30))
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20)
ENVELOPE_KEYS = st.sampled_from(["id", "type", "groupId", "actor", "issuedAt", "sessionEpoch",
                                 "membershipEpoch", "workItemId", "expectedRevision",
                                 "ownershipEpoch", "leaseId", "body", "extensions", "signature"])


@hypothesis_settings(max_examples=150, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture,
                                            HealthCheck.too_slow])
@given(value=JSON_VALUES)
def test_fuzz_random_json_as_the_envelope_is_refused(s, value):
    head = s.world.head
    assert_rejected(post_raw(s.c, json.dumps(value)))
    assert s.world.head == head


@hypothesis_settings(max_examples=150, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture,
                                            HealthCheck.too_slow])
@given(members=st.dictionaries(ENVELOPE_KEYS, JSON_VALUES, min_size=1, max_size=4),
       resign=st.booleans())
def test_fuzz_random_members_in_a_valid_envelope_never_break_the_server(s, members, resign):
    """Random values for real envelope members of a command that targets no existing
    WorkItem (so no single change can make it acceptable), signed when possible."""
    envelope = {**without(s.c.envelope("work.start", {}, workItemId="wi_fuzz-missing",
                                       ownershipEpoch=1), "signature"), **members}
    if resign:
        envelope = signed(s.c, envelope)
    head = s.world.head
    assert_rejected(post_raw(s.c, json.dumps(envelope)))
    assert s.world.head == head


@hypothesis_settings(max_examples=100, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture,
                                            HealthCheck.too_slow])
@given(value=JSON_VALUES)
def test_fuzz_random_json_as_a_command_body_is_refused(s, value):
    """A random body for a real command, properly signed by a member."""
    head = s.world.head
    envelope = without(s.c.envelope("work.start", {}, workItemId="wi_fuzz-missing",
                                    ownershipEpoch=1), "signature")
    envelope["body"] = value
    assert_rejected(post_raw(s.c, json.dumps(signed(s.c, envelope))))
    assert s.world.head == head


@hypothesis_settings(max_examples=100, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture,
                                            HealthCheck.too_slow])
@given(members=st.dictionaries(ENVELOPE_KEYS, JSON_VALUES, min_size=1, max_size=4))
def test_fuzz_random_members_in_a_human_envelope_never_break_the_server(s, members):
    """A human's command carries no signature: the server hashes the content itself."""
    envelope = {**s.owner.envelope("approval.grant_execution", {},
                                   workItemId="wi_fuzz-missing"), **members}
    head = s.world.head
    assert_rejected(s.owner.post(envelope))
    assert s.world.head == head


# --- a client-chosen id that is taken ------------------------------------------------------

def test_authorizing_a_work_item_id_that_is_taken_is_refused_and_changes_nothing(s):
    """work.authorize's `workItemId` names the item it creates; one that exists (here
    active, with an owner) is refused, never overwritten by a fresh `open` one."""
    item_id = s.queued()
    s.start(item_id)
    before, head = s.item(item_id), s.world.head

    response = s.c.send("work.authorize", {"missionId": s.mission_id, "workItemId": item_id,
                                           "contract": contract()})

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "VALIDATION_ERROR"
    assert response.json()["error"]["details"] == {"id": item_id}
    assert s.item(item_id) == before and s.world.head == head
    assert before["state"] == "active"
