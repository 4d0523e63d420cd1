"""Capability tokens through HTTP (§11.3): the lease holder receives the bearer string in
the command answer, a tool gateway introspects it (RFC 7662 style), rotation and
narrowing replace it, and it dies with the lease. Time moves with time_machine."""

import json
from datetime import timedelta

import pytest
from django.test import Client

from apps.ledger.verify import verify_group
from apps.work import capability_bearer
from tests.support import Scenario, World, evidence

ALLOWED = {"tools": ["search", "fetch"], "data": [], "operations": ["read", "write"],
           "resources": {}}
SCOPES = {"tools": ["search", "fetch"], "operations": ["read", "write"]}


@pytest.fixture
def s(db, clock):
    return Scenario()


def introspect(actor, token) -> dict:
    headers = {"HTTP_AUTHORIZATION": f"Bearer {actor.token}"} if actor.token else {}
    response = actor.client.post("/api/v1/capabilities/introspect", json.dumps({"token": token}),
                                 content_type="application/json", **headers)
    assert response.status_code == 200, response.content[:400]
    return response.json()


def started(s) -> tuple[str, dict]:
    """An item started by w1; (item id, the answer's capabilityToken)."""
    item_id = s.authorize(allowed=ALLOWED)
    s.offer(item_id)
    s.accept(item_id)
    fields = {"workItemId": item_id, "ownershipEpoch": s.item(item_id)["ownershipEpoch"]}
    response = s.w1.send("work.start", {"leaseSeconds": 300}, **fields)
    assert response.status_code == 200, response.json()
    return item_id, response.json()["capabilityToken"]


def test_the_start_answer_carries_the_bearer_token_and_the_gateway_sees_it_active(s):
    item_id, token = started(s)
    answer = s.w1.last
    lease = s.item(item_id)["lease"]

    seen = introspect(s.c, token["token"])

    assert set(token) == {"id", "token", "scopes", "expiresAt"}
    assert token["token"].startswith("mwcap.")
    assert token["scopes"] == SCOPES
    assert token["expiresAt"] == lease["expiresAt"]
    assert token["id"] == answer["events"][0]["data"]["capabilityToken"]["id"]
    assert seen["active"] is True
    assert seen["scope"] == "tool:search tool:fetch operation:read operation:write"
    assert seen["scopes"] == SCOPES
    assert (seen["groupId"], seen["workItemId"], seen["leaseId"]) == (
        s.world.group.id, item_id, lease["id"])
    assert seen["sub"] == s.w1.principal
    assert isinstance(seen["exp"], int)


def test_the_bearer_string_is_never_in_the_event_log(s):
    _, token = started(s)

    log = s.c.get("events?after=0&limit=1000").json()["events"]

    assert token["token"] not in json.dumps(log)


def test_a_duplicate_start_answer_derives_the_same_bearer_string(s):
    item_id = s.authorize(allowed=ALLOWED)
    s.offer(item_id)
    s.accept(item_id)
    envelope = s.w1.envelope("work.start", {}, workItemId=item_id,
                             ownershipEpoch=s.item(item_id)["ownershipEpoch"])

    first = s.w1.post(envelope).json()
    again = s.w1.post(envelope).json()

    assert again["duplicate"] is True
    assert again["capabilityToken"] == first["capabilityToken"]


def test_rotate_then_narrow(s):
    item_id, first = started(s)
    fields = s.lease_fields(item_id)

    rotated = s.w1.send("capability.rotate", {}, **fields).json()
    second = rotated["capabilityToken"]
    narrowed = s.w1.send("capability.narrow", {"scopes": {"tools": ["search"]}},
                         **fields).json()
    third = narrowed["capabilityToken"]

    assert [e["type"] for e in rotated["events"]] == ["capability.rotated"]
    assert rotated["events"][0]["data"]["revokedTokenIds"] == [first["id"]]
    assert introspect(s.c, first["token"]) == {"active": False}
    assert introspect(s.c, second["token"]) == {"active": False}
    seen = introspect(s.c, third["token"])
    assert seen["active"] is True
    assert seen["scopes"] == {"tools": ["search"], "operations": ["read", "write"]}
    assert set(seen["scopes"]["tools"]) <= set(SCOPES["tools"])
    assert verify_group(s.world.group.id) == []


def test_narrowing_beyond_the_held_scopes_is_refused_and_changes_nothing(s):
    item_id, token = started(s)
    head = s.world.head

    response = s.w1.send("capability.narrow", {"scopes": {"tools": ["shell"]}},
                         **s.lease_fields(item_id))

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "FORBIDDEN"
    assert response.json()["error"]["details"]["widening"] == {"tools": ["shell"]}
    assert s.world.head == head
    assert introspect(s.c, token["token"])["active"] is True


def test_a_renewal_gives_a_fresh_token_only_to_the_lease_holder(s):
    item_id, _ = started(s)

    renewed = s.w1.send("lease.renew", {"leaseSeconds": 600}, **s.lease_fields(item_id)).json()
    events = s.c.get("events?after=0&limit=1000").json()["events"]

    assert introspect(s.c, renewed["capabilityToken"]["token"])["active"] is True
    assert renewed["capabilityToken"]["expiresAt"] == s.item(item_id)["lease"]["expiresAt"]
    # A coordinator's answer never carries a token: another principal's command.
    preempt = s.c.send("work.request_preemption", {"reason": "make room"}, workItemId=item_id)
    assert preempt.status_code == 200 and "capabilityToken" not in preempt.json()
    assert all("token" not in e["data"].get("capabilityToken", {}) for e in events)


def test_a_checkpoint_makes_the_token_inactive(s):
    item_id, token = started(s)

    s.w1.ok("work.checkpoint", {"progress": {"phase": "drafting"}}, **s.lease_fields(item_id))

    assert introspect(s.c, token["token"]) == {"active": False}


def test_a_submission_makes_the_token_inactive(s):
    item_id, token = started(s)

    s.w1.ok("work.submit", {"contractRevision": 1, "artifacts": [s.deliver(item_id)],
                            "evidence": [evidence(["ac1", "ac2"])]}, **s.lease_fields(item_id))

    assert introspect(s.c, token["token"]) == {"active": False}


def test_revocation_by_a_coordinators_failure_makes_the_token_inactive(s):
    item_id, token = started(s)

    s.c.ok("work.fail", {"evidence": [evidence(["ac1"], producer=s.c.principal)]},
           workItemId=item_id)

    assert introspect(s.c, token["token"]) == {"active": False}


def test_a_token_is_inactive_from_its_expiry_even_before_any_sweep(s, clock):
    _, token = started(s)

    clock.shift(timedelta(seconds=299))
    assert introspect(s.c, token["token"])["active"] is True
    clock.shift(timedelta(seconds=1))
    assert introspect(s.c, token["token"]) == {"active": False}


def test_a_short_lived_rotation_expires_before_the_lease(s, clock):
    item_id, _ = started(s)
    short = s.w1.send("capability.rotate", {"expiresInSeconds": 30},
                      **s.lease_fields(item_id)).json()["capabilityToken"]

    clock.shift(timedelta(seconds=30))

    assert introspect(s.c, short["token"]) == {"active": False}
    assert s.item(item_id)["state"] == "active"


def test_a_replacement_session_revokes_the_token(s):
    _, token = started(s)

    assert s.w1.open_session().status_code == 201

    assert introspect(s.c, token["token"]) == {"active": False}


def test_a_non_member_learns_nothing(s):
    _, token = started(s)
    outsider = World().agent("outsider-" + s.world.group.slug)

    assert introspect(outsider, token["token"]) == {"active": False}
    assert introspect(s.w2, token["token"])["active"] is True  # any member may ask


def test_a_forged_or_malformed_token_is_inactive(s):
    item_id, token = started(s)
    prefix, payload, mac = token["token"].split(".")
    other = capability_bearer._b64(json.dumps(
        {"g": s.world.group.id, "w": item_id, "t": "cap_forged"}).encode())

    for forged in (f"{prefix}.{payload}.{mac[:-2]}AA", f"{prefix}.{other}.{mac}",
                   "mwcap.e30.AAAA", "not a token", "", "a.b.c.d"):
        assert introspect(s.c, forged) == {"active": False}, forged
    assert introspect(s.c, 42) == {"active": False}


def test_introspection_needs_an_authenticated_caller(s):
    _, token = started(s)

    response = Client().post("/api/v1/capabilities/introspect",
                             json.dumps({"token": token["token"]}),
                             content_type="application/json")

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "UNAUTHENTICATED"


def test_a_human_member_may_introspect(s):
    _, token = started(s)

    assert introspect(s.owner, token["token"])["active"] is True


def test_the_token_is_bound_to_the_lease_not_reused_by_the_next_start(s):
    item_id, first = started(s)
    s.w1.ok("work.checkpoint", {"progress": {"phase": "drafting"}}, **s.lease_fields(item_id))

    restart = s.w1.send("work.start", {}, workItemId=item_id,
                        ownershipEpoch=s.item(item_id)["ownershipEpoch"]).json()

    assert introspect(s.c, first["token"]) == {"active": False}
    assert introspect(s.c, restart["capabilityToken"]["token"])["active"] is True
    assert restart["capabilityToken"]["id"] != first["id"]


def test_only_the_lease_holder_rotates_and_a_refusal_appends_nothing(s):
    item_id, token = started(s)
    fields = s.lease_fields(item_id)
    head = s.world.head

    other = s.w2.send("capability.rotate", {}, **fields)
    coordinator = s.c.send("capability.rotate", {}, **fields)

    assert other.status_code == 409 and other.json()["error"]["code"] == "STALE_LEASE"
    assert coordinator.status_code == 403 and coordinator.json()["error"]["code"] == "FORBIDDEN"
    assert s.world.head == head
    assert introspect(s.c, token["token"])["active"] is True
