"""Key rotation (docs/operations.md, "Key rotation").

The authority key: mw_rotate_authority_key in the key-file case (a new numbered file) and
the environment case (prints what to set); GET /api/v1/authority lists current and retired
keys; a snapshot signed before a rotation still verifies after it, with the key its
keyId names, and new snapshots use the new key; the settings refuse an inconsistent set.

Agents' keys: a second key, then revoking the first: its signatures are refused (a
session request, a command), the session it opened ends, another key's session does not,
and the log it signed stays valid history (mw_verify).

Ed25519 over HTTP: a signature with a non-canonical S, and a small-order key that got
into the table before registration refused them, are INVALID_SIGNATURE and change nothing."""

import importlib
import json
import os
import stat
import subprocess
import sys
import uuid
from io import StringIO
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from django.apps import apps as django_apps
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from apps.identity import registry, sessions
from apps.identity.models import Agent, AgentKey, AgentSession, SessionNonce
from apps.ledger import signing_keys, snapshots, verify
from apps.ledger.models import CommandRecord, Group, Snapshot
from mission_weave.protocol import canonical
from mission_weave.protocol.canonical import b64url, b64url_decode, sign, signing_bytes
from mission_weave.protocol.timefmt import format_time
from mission_weave.sdk import inbox
from tests.support import Scenario, now

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db


def command(name: str, *args) -> dict:
    out = StringIO()
    call_command(name, *args, stdout=out)
    return json.loads(out.getvalue())


def authority_keys() -> dict:
    """GET /api/v1/authority as {keyId: entry}."""
    response = Client().get("/api/v1/authority")
    assert response.status_code == 200
    return {entry["keyId"]: entry for entry in response.json()["keys"]}


def verifies_with_listed_key(document: dict) -> bool:
    """What a client does: the key the signature's keyId names, from GET /api/v1/authority."""
    entry = authority_keys().get(document["signature"]["keyId"])
    return entry is not None and canonical.verify(
        document, canonical.public_key_from_b64url(entry["publicKey"]))


def snapshot_document(s: Scenario) -> dict:
    """A snapshot at the Group's head (after one more event), read through the API."""
    s.authorize()
    result = command("mw_snapshot", s.world.group.id)
    response = s.w1.get(f"snapshots/{result['snapshotId']}")
    assert response.status_code == 200
    return response.json()


@pytest.fixture
def key_files(settings, tmp_path):
    """The key-file case, in this test's own folder."""
    settings.MW_AUTHORITY_KEY = None
    settings.MW_AUTHORITY_KEY_ID = ""
    settings.MW_AUTHORITY_RETIRED_KEYS = ""
    settings.MW_AUTHORITY_KEY_FILE = tmp_path / "keys" / "signing_keys.key"
    return settings.MW_AUTHORITY_KEY_FILE


@pytest.fixture
def environment(settings):
    """The environment case, with a fresh seed."""
    settings.MW_AUTHORITY_KEY = canonical.private_key_b64url(Ed25519PrivateKey.generate())
    settings.MW_AUTHORITY_KEY_ID = ""
    settings.MW_AUTHORITY_RETIRED_KEYS = ""
    return settings


# --- the authority key: key files --------------------------------------------------------------

def test_key_files_rotate_and_a_snapshot_signed_before_still_verifies(scenario, key_files):
    s = scenario
    before = snapshot_document(s)
    assert before["signature"]["keyId"] == "authority#1"
    assert list(authority_keys()) == ["authority#1"]
    first_public = authority_keys()["authority#1"]["publicKey"]

    rotated = command("mw_rotate_authority_key")

    assert rotated["keyId"] == "authority#2" and rotated["retired"] == ["authority#1"]
    new_file = Path(rotated["keyFile"])
    assert new_file == key_files.with_name("signing_keys.key.2")
    assert stat.S_IMODE(new_file.stat().st_mode) == 0o600
    listed = authority_keys()
    assert list(listed) == ["authority#2", "authority#1"]  # current first
    assert listed["authority#2"]["current"] is True and "retiredAt" not in listed["authority#2"]
    assert listed["authority#1"] == {"keyId": "authority#1", "publicKey": first_public,
                                     "current": False,
                                     "retiredAt": listed["authority#1"]["retiredAt"]}
    assert listed["authority#2"]["publicKey"] == rotated["publicKey"] != first_public
    # The old snapshot, fetched again after the rotation, verifies with authority#1.
    again = s.w1.get(f"snapshots/{before['id']}").json()
    assert again == before and verifies_with_listed_key(again)
    assert signing_keys.verify(again)
    # The SDK's check, with the keys as its client reads them (by keyId).
    sdk_keys = {k: canonical.public_key_from_b64url(v["publicKey"]) for k, v in listed.items()}
    inbox.verify_snapshot(snapshots.reference(Snapshot.objects.get(id=before["id"])), again,
                          sdk_keys)
    with pytest.raises(inbox.IntegrityError):  # only authority#1 verifies it
        inbox.verify_snapshot({"id": before["id"]}, again, {"authority#1": sdk_keys[
            "authority#2"]})

    after = snapshot_document(s)

    assert after["signature"]["keyId"] == "authority#2"
    assert verifies_with_listed_key(after) and signing_keys.verify(after)
    assert not canonical.verify(after, canonical.public_key_from_b64url(first_public))


def test_a_second_rotation_keeps_every_older_key(scenario, key_files):
    s = scenario
    first = snapshot_document(s)
    command("mw_rotate_authority_key")
    second = snapshot_document(s)

    assert command("mw_rotate_authority_key")["retired"] == ["authority#2", "authority#1"]

    assert list(authority_keys()) == ["authority#3", "authority#2", "authority#1"]
    assert [first["signature"]["keyId"], second["signature"]["keyId"]] == \
        ["authority#1", "authority#2"]
    assert verifies_with_listed_key(first) and verifies_with_listed_key(second)
    assert snapshot_document(s)["signature"]["keyId"] == "authority#3"


def test_the_first_key_file_is_made_on_first_use_readable_by_its_owner_only(key_files):
    assert not key_files.exists()

    assert list(authority_keys()) == ["authority#1"]

    assert stat.S_IMODE(key_files.stat().st_mode) == 0o600
    seed = key_files.read_text().strip()
    assert authority_keys()["authority#1"]["publicKey"] == canonical.public_key_b64url(
        canonical.private_key_from_b64url(seed))


def test_a_tampered_document_does_not_verify_under_any_key(scenario, key_files):
    document = snapshot_document(scenario)
    command("mw_rotate_authority_key")

    assert not signing_keys.verify({**document, "sequence": document["sequence"] + 1})
    relabelled = {**document, "signature": {**document["signature"], "keyId": "authority#2"}}
    assert not signing_keys.verify(relabelled)
    unknown = {**document, "signature": {**document["signature"], "keyId": "authority#9"}}
    assert not signing_keys.verify(unknown)


def test_the_key_id_setting_is_refused_in_the_key_file_case(key_files, settings):
    settings.MW_AUTHORITY_KEY_ID = "authority#2"
    with pytest.raises(ImproperlyConfigured, match="MW_AUTHORITY_KEY_ID goes with"):
        signing_keys.keyring()


# --- the authority key: the environment --------------------------------------------------------

def test_the_environment_case_prints_what_to_set_and_changes_nothing(scenario, environment):
    s = scenario
    before = snapshot_document(s)
    old_public = authority_keys()["authority#1"]["publicKey"]

    printed = command("mw_rotate_authority_key")

    assert list(authority_keys()) == ["authority#1"]  # nothing changed yet
    assert printed["keyId"] == "authority#2" and printed["retired"] == ["authority#1"]
    values = printed["set"]
    assert values["MW_AUTHORITY_KEY_ID"] == "authority#2"
    assert canonical.public_key_b64url(canonical.private_key_from_b64url(
        values["MW_AUTHORITY_KEY"])) == printed["publicKey"]
    retired_id, rest = values["MW_AUTHORITY_RETIRED_KEYS"].split("=")
    assert retired_id == "authority#1" and rest.split("@")[0] == old_public

    # The operator sets them and restarts.
    for name, value in values.items():
        setattr(environment, name, value)

    listed = authority_keys()
    assert list(listed) == ["authority#2", "authority#1"]
    assert listed["authority#1"]["retiredAt"] == rest.split("@")[1]
    assert verifies_with_listed_key(s.w1.get(f"snapshots/{before['id']}").json())
    after = snapshot_document(s)
    assert after["signature"]["keyId"] == "authority#2" and verifies_with_listed_key(after)

    # The next rotation carries authority#1 along.
    again = command("mw_rotate_authority_key")["set"]
    assert again["MW_AUTHORITY_KEY_ID"] == "authority#3"
    assert [entry.split("=")[0] for entry in again["MW_AUTHORITY_RETIRED_KEYS"].split(",")] == \
        ["authority#2", "authority#1"]


def test_the_new_seed_can_go_to_a_file_instead_of_the_output(environment, tmp_path):
    path = tmp_path / "new-seed"

    printed = command("mw_rotate_authority_key", "--seed-file", str(path))

    seed = path.read_text().strip()
    assert seed not in json.dumps(printed)
    assert printed["set"]["MW_AUTHORITY_KEY"] == f"<the seed in {path}>"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert canonical.public_key_b64url(canonical.private_key_from_b64url(seed)) == \
        printed["publicKey"]
    with pytest.raises(CommandError, match="File exists"):  # never overwrites a file
        command("mw_rotate_authority_key", "--seed-file", str(path))


def test_retired_keys_are_read_from_the_environment(environment):
    old = Ed25519PrivateKey.generate()
    document = sign({"hello": "world"}, old, "authority#1")
    environment.MW_AUTHORITY_KEY_ID = "authority#2"
    environment.MW_AUTHORITY_RETIRED_KEYS = \
        f" authority#1={canonical.public_key_b64url(old)}@2026-01-02T03:04:05+00:00 "

    listed = authority_keys()

    assert listed["authority#1"]["retiredAt"] == "2026-01-02T03:04:05Z"
    assert listed["authority#2"]["current"] is True
    assert signing_keys.verify(document) and verifies_with_listed_key(document)
    assert signing_keys.sign({"a": 1})["signature"]["keyId"] == "authority#2"


def _public() -> str:
    return canonical.public_key_b64url(Ed25519PrivateKey.generate())


@pytest.mark.parametrize("key_id,retired,words", [
    ("", "authority#1={public}", "authority#1 is given twice"),
    ("authority#2", "authority#3={public}", "numbered above the current authority#2"),
    ("authority#3", "authority#1={public},authority#1={public}", "given twice"),
    ("authority#2", "authority#1", "write authority#<n>=<publicKey>[@<retiredAt>]"),
    ("authority#2", "key1={public}", "write authority#<n>=<publicKey>"),
    ("authority#2", "authority#1=abc", "32 bytes; this one is 2"),
    ("authority#2", "authority#1={public}@yesterday", "retiredAt"),
    ("authority#2", "authority#1=" + b64url(bytes(32)), "small order"),
    ("authority-2", "", "MW_AUTHORITY_KEY_ID must be authority#<n>"),
    ("authority#0", "", "MW_AUTHORITY_KEY_ID must be authority#<n>"),
])
def test_an_inconsistent_set_of_keys_is_refused_saying_why(environment, key_id, retired, words):
    environment.MW_AUTHORITY_KEY_ID = key_id
    environment.MW_AUTHORITY_RETIRED_KEYS = retired.replace("{public}", _public(), 1) \
        .replace("{public}", _public())

    with pytest.raises(ImproperlyConfigured) as raised:
        signing_keys.keyring()
    assert words in str(raised.value)


def test_the_current_key_listed_as_retired_too_is_refused(environment):
    current = canonical.public_key_b64url(canonical.private_key_from_b64url(
        environment.MW_AUTHORITY_KEY))
    environment.MW_AUTHORITY_KEY_ID = "authority#2"
    environment.MW_AUTHORITY_RETIRED_KEYS = f"authority#1={current}"

    with pytest.raises(ImproperlyConfigured, match="listed twice"):
        signing_keys.keyring()


def _production(**variables) -> subprocess.CompletedProcess:
    """Load the production settings in a fresh interpreter, as a process starts."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "mission_weave.settings_production",
           "SECRET_KEY": "x7Gq-" * 12, "MW_AUTHORITY_KEY": "A" * 43,
           "MW_AUTHORITY_KEY_ID": "", "MW_AUTHORITY_RETIRED_KEYS": "", **variables}
    code = "from django.conf import settings; print(settings.MW_AUTHORITY_KEY_ID)"
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_production_settings_check_the_retired_keys_at_start_up():
    good = _production(MW_AUTHORITY_KEY_ID="authority#2",
                       MW_AUTHORITY_RETIRED_KEYS=f"authority#1={_public()}@2026-01-01T00:00:00Z")
    duplicate = _production(MW_AUTHORITY_RETIRED_KEYS=f"authority#1={_public()}")
    seed = _production(MW_AUTHORITY_KEY="not-a-seed")

    assert good.returncode == 0, good.stderr
    assert duplicate.returncode != 0
    assert "ImproperlyConfigured" in duplicate.stderr
    assert "authority#1 is given twice" in duplicate.stderr
    assert seed.returncode != 0
    assert "MW_AUTHORITY_KEY must be a base64url-encoded 32-byte seed" in seed.stderr


def test_mw_verify_accepts_a_snapshot_signed_before_a_rotation(scenario, key_files):
    snapshot_document(scenario)
    command("mw_rotate_authority_key")
    snapshot_document(scenario)

    assert verify.verify_group(scenario.world.group.id) == []


# --- agents' keys: add one, revoke one ----------------------------------------------------------

def second_key(actor) -> tuple[Ed25519PrivateKey, str]:
    key = Ed25519PrivateKey.generate()
    printed = command("mw_register_agent", actor.name, "--add-key",
                      f"--public-key={canonical.public_key_b64url(key)}")
    return key, printed["keyId"]


def test_revoking_a_key_ends_its_session_and_refuses_its_signatures(scenario):
    s = scenario
    old_key, old_id = s.w1.key, s.w1.key_id
    old_token = s.w1.token
    item_id, _ = s.running()  # history the old key signed
    new_key, new_id = second_key(s.w1)
    assert new_id == f"{s.w1.name}#2"

    printed = command("mw_register_agent", s.w1.name, "--revoke-key", old_id)

    assert printed["endedSessions"] == 1 and printed["revoked"] is True
    assert [(k["keyId"], k["active"], k["revokedAt"] is not None) for k in printed["keys"]] == \
        [(old_id, False, True), (new_id, True, False)]
    # The session the old key opened is over: reads and commands alike.
    assert s.w1.get("events").json()["error"]["code"] == "UNAUTHENTICATED"
    assert s.w1.send("work.progress", {"message": "hi"},
                     **s.lease_fields(item_id)).json()["error"]["code"] == "UNAUTHENTICATED"
    # A session request signed with it is refused, saying why.
    refused = s.w1.open_session()
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "INVALID_SIGNATURE"
    assert "revoked" in refused.json()["error"]["message"]
    assert s.w1.token == old_token  # no session was opened

    # The new key opens a session; a command signed with the old key is still refused.
    s.w1.key, s.w1.key_id = new_key, new_id
    assert s.w1.open_session().status_code == 201
    head = s.world.head
    s.w1.key, s.w1.key_id = old_key, old_id
    stale = s.w1.send("work.progress", {"message": "hi"}, **s.lease_fields(item_id))
    assert stale.json()["error"]["code"] == "INVALID_SIGNATURE"
    assert s.world.head == head
    s.w1.key, s.w1.key_id = new_key, new_id
    assert s.w1.get(f"work-items/{item_id}").status_code == 200

    # What the old key signed stays valid history.
    verified = command("mw_verify", s.world.group.id)
    assert verified["ok"], verified["problems"]


def test_another_keys_session_survives_a_revocation(scenario):
    s = scenario
    old_id = s.w1.key_id
    s.w1.key, s.w1.key_id = second_key(s.w1)
    assert s.w1.open_session().status_code == 201  # supersedes the old key's session

    printed = command("mw_register_agent", s.w1.name, "--revoke-key", old_id)

    assert printed["endedSessions"] == 0
    assert s.w1.get("events").status_code == 200
    assert AgentSession.objects.get(agent_id=s.w1.name, superseded_at=None).key_id == s.w1.key_id


def test_a_session_opened_before_sessions_recorded_their_key_ends_too(scenario):
    s = scenario
    AgentSession.objects.filter(agent_id=s.w1.name).update(key_id=None)
    _, new_id = second_key(s.w1)

    assert command("mw_register_agent", s.w1.name, "--revoke-key", new_id)["endedSessions"] == 1
    assert s.w1.get("events").json()["error"]["code"] == "UNAUTHENTICATED"


def test_revoking_twice_changes_nothing_more(scenario):
    s = scenario
    first = command("mw_register_agent", s.w1.name, "--revoke-key", s.w1.key_id)
    second = command("mw_register_agent", s.w1.name, "--revoke-key", s.w1.key_id)

    assert (first["endedSessions"], second["endedSessions"]) == (1, 0)
    assert first["keys"] == second["keys"]


def test_a_key_revoked_while_its_session_request_is_checked_opens_nothing(scenario, monkeypatch):
    """The revocation commits after the signature was checked and before the session is
    made: under the agent's lock the key is checked again."""
    s = scenario
    real_check_fresh = sessions.principals.check_fresh

    def revoked_meanwhile(issued_at, moment):
        registry.revoke_key(s.w1.name, s.w1.key_id)
        return real_check_fresh(issued_at, moment)

    monkeypatch.setattr(sessions.principals, "check_fresh", revoked_meanwhile)
    epoch = Agent.objects.get(id=s.w1.name).session_epoch
    nonces = SessionNonce.objects.filter(agent_id=s.w1.name).count()

    response = s.w1.open_session()

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "INVALID_SIGNATURE"
    assert Agent.objects.get(id=s.w1.name).session_epoch == epoch
    assert SessionNonce.objects.filter(agent_id=s.w1.name).count() == nonces


def test_the_admin_action_revokes_and_ends_sessions(scenario):
    s = scenario
    get_user_model().objects.create_superuser("root", "root@example.org", "pw")
    operator = Client()
    operator.login(username="root", password="pw")
    key = AgentKey.objects.get(key_id=s.w1.key_id)

    page = operator.post("/admin/identity/agentkey/", {"action": "deactivate",
                                                        "_selected_action": [key.pk]},
                         follow=True)

    assert "Revoked 1 key(s); 1 session(s) ended." in page.content.decode()
    key.refresh_from_db()
    assert not key.active and key.revoked_at is not None
    assert s.w1.get("events").json()["error"]["code"] == "UNAUTHENTICATED"
    listing = operator.get("/admin/identity/agentkey/").content.decode()
    assert "Revoked at" in listing


# --- Ed25519 edge cases over HTTP ---------------------------------------------------------------

def with_s_plus_l(document: dict) -> dict:
    raw = b64url_decode(document["signature"]["sig"])
    s = int.from_bytes(raw[32:], "little") + canonical.ED25519_ORDER
    return {**document, "signature": {**document["signature"],
                                      "sig": b64url(raw[:32] + s.to_bytes(32, "little"))}}


def session_request(actor, **overrides) -> dict:
    request = {"agentId": actor.name, "keyId": actor.key_id, "nonce": uuid.uuid4().hex,
               "issuedAt": format_time(now()), **overrides}
    return sign(request, actor.key, actor.key_id)


def test_a_session_request_with_a_non_canonical_s_is_refused_and_changes_nothing(scenario):
    s = scenario
    request = session_request(s.w1)
    sessions_before = list(AgentSession.objects.filter(agent_id=s.w1.name)
                           .values_list("id", "superseded_at"))
    epoch = Agent.objects.get(id=s.w1.name).session_epoch

    response = Client().post("/api/v1/sessions", with_s_plus_l(request),
                             content_type="application/json")

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "INVALID_SIGNATURE"
    assert list(AgentSession.objects.filter(agent_id=s.w1.name)
                .values_list("id", "superseded_at")) == sessions_before
    assert Agent.objects.get(id=s.w1.name).session_epoch == epoch
    assert not SessionNonce.objects.filter(nonce=request["nonce"]).exists()
    assert s.w1.get("events").status_code == 200  # the live session was not superseded
    # The same request, properly signed, still opens a session: its nonce was not spent.
    assert Client().post("/api/v1/sessions", request,
                         content_type="application/json").status_code == 201


def test_a_command_with_a_non_canonical_s_is_refused_and_changes_nothing(scenario):
    s = scenario
    head = s.world.head
    envelope = s.c.envelope("mission.create", {"title": "Q4", "ownerId": s.owner.principal,
                                               "coordinatorId": s.c.principal})
    assert s.c.post(envelope).status_code == 200  # as signed, it would be accepted
    envelope = s.c.envelope("mission.create", {"title": "Q4", "ownerId": s.owner.principal,
                                               "coordinatorId": s.c.principal})
    head = s.world.head

    response = s.c.post(with_s_plus_l(envelope))

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "INVALID_SIGNATURE"
    assert s.world.head == head == Group.objects.get(id=s.world.group.id).head_sequence
    assert not CommandRecord.objects.filter(group_id=s.world.group.id,
                                            command_id=envelope["id"]).exists()


def test_a_small_order_key_in_the_table_verifies_no_forgery(scenario):
    """A key stored before registration refused small orders: the forged request
    (R = neutral point, S = 0) that OpenSSL alone accepts is INVALID_SIGNATURE."""
    s = scenario
    neutral = b64url(bytes.fromhex("01" + "00" * 31))
    AgentKey.objects.create(key_id=f"{s.w1.name}#9", agent_id=s.w1.name, public_key=neutral)
    request = {"agentId": s.w1.name, "keyId": f"{s.w1.name}#9", "nonce": uuid.uuid4().hex,
               "issuedAt": format_time(now())}
    forged_sig = bytes.fromhex("01" + "00" * 31) + bytes(32)
    forged = {**request, "signature": {"alg": "Ed25519", "keyId": request["keyId"],
                                       "sig": b64url(forged_sig)}}
    Ed25519PublicKey.from_public_bytes(b64url_decode(neutral)).verify(
        forged_sig, signing_bytes(forged))  # OpenSSL alone: valid
    epoch = Agent.objects.get(id=s.w1.name).session_epoch

    response = Client().post("/api/v1/sessions", forged, content_type="application/json")

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "INVALID_SIGNATURE"
    assert Agent.objects.get(id=s.w1.name).session_epoch == epoch


def test_the_migration_revokes_stored_keys_the_checks_refuse(scenario):
    s = scenario
    bad = AgentKey.objects.create(key_id=f"{s.w1.name}#9", agent_id=s.w1.name,
                                  public_key=b64url(bytes.fromhex("ec" + "ff" * 30 + "7f")))
    short = AgentKey.objects.create(key_id=f"{s.w1.name}#10", agent_id=s.w1.name,
                                    public_key=b64url(bytes(31)))
    migration = importlib.import_module("apps.identity.migrations.0003_key_rotation")

    migration.revoke_refused_keys(django_apps, None)

    for key in (bad, short):
        key.refresh_from_db()
        assert not key.active and key.revoked_at is not None
    assert AgentKey.objects.get(key_id=s.w1.key_id).active
    assert s.w1.get("events").status_code == 200
