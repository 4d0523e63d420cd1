"""Every PROTOCOL §2 error code the Foundation covers, produced through the HTTP API.

Each rejection answers `{"error": {"code", "message", "details"}}` with the code's HTTP
status and leaves the Group's head sequence where it was (a rejection appends nothing).
Time moves with time_machine: the server reads django.utils.timezone.now().
"""

import json
import uuid
from datetime import timedelta

import pytest
import time_machine
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.test import override_settings

from apps.identity import registry
from apps.identity.models import Agent
from apps.ledger.models import CommandRecord
from mission_weave.protocol.canonical import sign, without
from mission_weave.protocol.timefmt import format_time
from tests.support import World, assert_error, contract, evidence, now


@pytest.fixture
def s(scenario):
    return scenario




def rejected(s, response, status: int, code: str, head: int) -> dict:
    error = assert_error(response, status, code)
    assert s.world.head == head, "a rejection must append nothing"
    return error


def foreign_envelope(actor, group_id: str, type_: str, body: dict, membership_epoch=1,
                     **fields) -> dict:
    """An envelope for a Group the actor's World is not (a non-member, an unknown Group)."""
    envelope = {"id": f"cmd-{uuid.uuid4().hex}", "type": type_, "groupId": group_id,
                "actor": actor.principal, "issuedAt": format_time(now()),
                "sessionEpoch": actor.session_epoch, "membershipEpoch": membership_epoch,
                "body": body, **fields}
    return sign(envelope, actor.key, actor.key_id)


def mission_body(s, title="Another mission") -> dict:
    return {"title": title, "ownerId": s.owner.principal, "coordinatorId": s.c.principal}


def submit_body(criteria=("ac1", "ac2"), revision=1, artifacts=()) -> dict:
    return {"contractRevision": revision, "artifacts": list(artifacts),
            "evidence": [evidence(list(criteria))]}


# --- 400 -------------------------------------------------------------------------------------

def test_validation_error_for_a_malformed_body(s):
    head = s.world.head
    error = rejected(s, s.c.send("mission.create", {"ownerId": s.owner.principal,
                                                    "coordinatorId": s.c.principal}),
                     400, "VALIDATION_ERROR", head)
    assert "title" in error["message"]


def test_validation_error_for_a_group_id_other_than_the_path(s):
    envelope = s.c.envelope("work.cancel", {}, workItemId=s.authorize(), groupId="grp_other")
    head = s.world.head
    error = rejected(s, s.c.post(envelope), 400, "VALIDATION_ERROR", head)
    assert error["details"]["path"] == "groupId"


@pytest.mark.parametrize("overrides,path", [
    ({"goall": "typo"}, "body.contract"),
    ({"urgency": "asap"}, "body.contract.urgency"),
    ({"acceptanceCriteria": [{"id": "ac1"}]}, "body.contract.acceptanceCriteria[0]"),
    ({"budgets": {"financial": {"amount": "ten", "currency": "USD"}}},
     "body.contract.budgets.financial.amount"),
])
def test_invalid_contract_names_the_field_path(s, overrides, path):
    head = s.world.head
    error = rejected(s, s.c.send("work.authorize", {"missionId": s.mission_id,
                                                    "contract": contract(**overrides)}),
                     400, "INVALID_CONTRACT", head)
    assert path in error["message"], error
    assert error["details"]["path"] == path


def test_invalid_contract_without_a_member_names_it(s):
    broken = contract()
    del broken["acceptanceCriteria"]
    head = s.world.head
    error = rejected(s, s.c.send("work.authorize", {"missionId": s.mission_id,
                                                    "contract": broken}),
                     400, "INVALID_CONTRACT", head)
    assert "body.contract" in error["message"] and "acceptanceCriteria" in error["message"]


# --- 401 -------------------------------------------------------------------------------------

def test_unauthenticated_without_a_bearer(s):
    head = s.world.head
    envelope = s.c.envelope("mission.create", mission_body(s))
    response = s.c.client.post(f"/api/v1/groups/{s.world.group.id}/commands",
                               json.dumps(envelope), content_type="application/json")
    rejected(s, response, 401, "UNAUTHENTICATED", head)


@pytest.mark.parametrize("header", ["Bearer garbage", "Bearer ", "Basic Zm9vOmJhcg==",
                                    "Bearer " + "x" * 43])
def test_unauthenticated_with_a_garbage_bearer(s, header):
    head = s.world.head
    envelope = s.c.envelope("mission.create", mission_body(s))
    response = s.c.client.post(f"/api/v1/groups/{s.world.group.id}/commands",
                               json.dumps(envelope), content_type="application/json",
                               HTTP_AUTHORIZATION=header)
    rejected(s, response, 401, "UNAUTHENTICATED", head)


def test_invalid_signature_for_a_tampered_body(s):
    envelope = s.c.envelope("mission.create", mission_body(s, "Signed title"))
    envelope["body"]["title"] = "Tampered title"
    head = s.world.head
    rejected(s, s.c.post(envelope), 401, "INVALID_SIGNATURE", head)


def test_invalid_signature_with_a_wrong_key(s):
    envelope = without(s.c.envelope("mission.create", mission_body(s)), "signature")
    forged = sign(envelope, Ed25519PrivateKey.generate(), s.c.key_id)
    head = s.world.head
    rejected(s, s.c.post(forged), 401, "INVALID_SIGNATURE", head)


def test_invalid_signature_with_another_agents_key(s):
    envelope = without(s.c.envelope("mission.create", mission_body(s)), "signature")
    head = s.world.head
    rejected(s, s.c.post(sign(envelope, s.w1.key, s.w1.key_id)), 401, "INVALID_SIGNATURE", head)


def test_invalid_signature_when_an_agent_sends_none(s):
    envelope = without(s.c.envelope("mission.create", mission_body(s)), "signature")
    head = s.world.head
    rejected(s, s.c.post(envelope), 401, "INVALID_SIGNATURE", head)


def test_stale_session_for_the_old_token_after_a_new_session(s):
    old_token = s.c.token
    assert s.c.open_session().status_code == 201
    envelope = s.c.envelope("mission.create", mission_body(s))
    head = s.world.head
    response = s.c.client.post(f"/api/v1/groups/{s.world.group.id}/commands",
                               json.dumps(envelope), content_type="application/json",
                               HTTP_AUTHORIZATION=f"Bearer {old_token}")
    rejected(s, response, 401, "STALE_SESSION", head)


def test_stale_session_for_an_old_session_epoch(s):
    old_epoch = s.c.session_epoch
    assert s.c.open_session().status_code == 201
    head = s.world.head
    error = rejected(s, s.c.send("mission.create", mission_body(s), sessionEpoch=old_epoch),
                     401, "STALE_SESSION", head)
    assert error["details"]["sessionEpoch"] == s.c.session_epoch


@pytest.mark.parametrize("offset", [-400, 400])
def test_clock_skew_for_a_session_request(s, offset):
    epoch = Agent.objects.get(id=s.w1.name).session_epoch
    response = s.w1.open_session(issuedAt=format_time(now() + timedelta(seconds=offset)))
    assert_error(response, 401, "CLOCK_SKEW")
    assert Agent.objects.get(id=s.w1.name).session_epoch == epoch


@pytest.mark.parametrize("offset", [-400, 400])
def test_clock_skew_for_a_command(s, offset):
    head = s.world.head
    issued_at = format_time(now() + timedelta(seconds=offset))
    rejected(s, s.c.send("mission.create", mission_body(s), issuedAt=issued_at),
             401, "CLOCK_SKEW", head)


def test_nonce_reused(s):
    nonce = f"nonce-{uuid.uuid4().hex}"
    assert s.w1.open_session(nonce=nonce).status_code == 201
    epoch, token = s.w1.session_epoch, s.w1.token
    head = s.world.head
    assert_error(s.w1.open_session(nonce=nonce), 401, "NONCE_REUSED")
    assert Agent.objects.get(id=s.w1.name).session_epoch == epoch
    assert s.w1.token == token and s.w1.get(f"missions/{s.mission_id}").status_code == 200
    assert s.world.head == head


# --- 403 -------------------------------------------------------------------------------------

def test_forbidden_for_a_role_that_may_not_send_it(s):
    head = s.world.head
    error = rejected(s, s.w1.send("work.authorize", {"missionId": s.mission_id,
                                                     "contract": contract()}),
                     403, "FORBIDDEN", head)
    assert error["details"]["needs"] == ["coordinator"]


def test_forbidden_for_a_human_only_command_from_an_agent(s):
    item_id = s.authorize(risk={"class": "high", "requiresExecutionApproval": True})
    head = s.world.head
    rejected(s, s.c.send("approval.grant_execution", {}, workItemId=item_id),
             403, "FORBIDDEN", head)


def test_forbidden_when_the_actor_is_not_the_authenticated_principal(s):
    envelope = s.w1.envelope("mission.create", mission_body(s), actor=s.c.principal)
    head = s.world.head
    rejected(s, s.w1.post(envelope), 403, "FORBIDDEN", head)


def test_not_a_member_for_an_outsider(s):
    outsider = World().agent("out-" + s.world.group.slug, roles=("coordinator",))
    envelope = foreign_envelope(outsider, s.world.group.id, "mission.create", mission_body(s))
    head = s.world.head
    rejected(s, outsider.post(envelope, group_id=s.world.group.id), 403, "NOT_A_MEMBER", head)


def test_not_a_member_for_an_unknown_group_reveals_nothing(s):
    outsider = World().agent("out-" + s.world.group.slug, roles=("coordinator",))
    to_real = outsider.post(foreign_envelope(outsider, s.world.group.id, "mission.create",
                                             mission_body(s)), group_id=s.world.group.id)
    to_none = outsider.post(foreign_envelope(outsider, "grp_no-such-group", "mission.create",
                                             mission_body(s)), group_id="grp_no-such-group")
    member_to_none = s.c.post(foreign_envelope(s.c, "grp_no-such-group", "mission.create",
                                               mission_body(s)), group_id="grp_no-such-group")
    for response in (to_real, to_none, member_to_none):
        assert_error(response, 403, "NOT_A_MEMBER")
    assert to_real.json() == to_none.json() == member_to_none.json()
    assert s.world.group.id not in to_real.content.decode()


def test_not_a_member_after_removal(s):
    item_id = s.authorize()
    epoch = s.w2.membership_epoch
    registry.remove_member(s.world.group, s.w2.principal)
    head = s.world.head
    for membership_epoch in (epoch, epoch + 1):
        rejected(s, s.w2.post(foreign_envelope(s.w2, s.world.group.id, "conversation.post",
                                               {"kind": "message", "text": "hi"},
                                               membership_epoch=membership_epoch,
                                               workItemId=item_id)),
                 403, "NOT_A_MEMBER", head)
    assert_error(s.w2.get(f"work-items/{item_id}"), 403, "NOT_A_MEMBER")


def test_stale_membership_after_a_role_change(s):
    old_epoch = s.w1.membership_epoch
    registry.add_member(s.world.group, s.w1.principal, ["worker", "reviewer"])
    assert s.w1.membership_epoch == old_epoch + 1
    item_id = s.authorize()
    head = s.world.head
    error = rejected(s, s.w1.send("conversation.post", {"kind": "message", "text": "hello"},
                                  workItemId=item_id, membershipEpoch=old_epoch),
                     403, "STALE_MEMBERSHIP", head)
    assert error["details"]["membershipEpoch"] == old_epoch + 1
    s.w1.ok("conversation.post", {"kind": "message", "text": "hello"}, workItemId=item_id)


# --- 404 -------------------------------------------------------------------------------------

def test_not_found_for_an_unknown_work_item(s):
    head = s.world.head
    rejected(s, s.c.send("work.cancel", {}, workItemId="wi_no-such-item"), 404, "NOT_FOUND", head)
    assert_error(s.c.get("work-items/wi_no-such-item"), 404, "NOT_FOUND")
    assert_error(s.c.get("work-items/wi_no-such-item/audit"), 404, "NOT_FOUND")


def test_not_found_for_an_unknown_mission(s):
    head = s.world.head
    rejected(s, s.c.send("work.authorize", {"missionId": "msn_no-such-mission",
                                            "contract": contract()}), 404, "NOT_FOUND", head)
    assert_error(s.c.get("missions/msn_no-such-mission"), 404, "NOT_FOUND")


@pytest.mark.parametrize("method,path", [
    ("get", "/api/v1/no-such-endpoint"),
    ("get", "/api/v2/groups"),
    ("post", "/api/v1/groups/{g}/no-such-thing"),
    ("get", "/api/v1/groups/{g}/work-items/{i}/no-such-thing"),
    ("get", "/api/"),
])
def test_not_found_for_an_unknown_url_is_the_json_envelope(s, method, path):
    path = path.format(g=s.world.group.id, i="wi_x")
    response = getattr(s.c.client, method)(path, HTTP_AUTHORIZATION=f"Bearer {s.c.token}")
    assert_error(response, 404, "NOT_FOUND")
    assert b"<html" not in response.content.lower()


def test_a_wrong_method_is_the_json_envelope(s):
    response = s.c.client.get(f"/api/v1/groups/{s.world.group.id}/commands",
                              HTTP_AUTHORIZATION=f"Bearer {s.c.token}")
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "VALIDATION_ERROR"


# --- 409 -------------------------------------------------------------------------------------

def test_transition_not_permitted(s):
    item_id = s.authorize()
    head = s.world.head
    error = rejected(s, s.c.send("work.accept_result", {}, workItemId=item_id),
                     409, "TRANSITION_NOT_PERMITTED", head)
    assert error["details"]["state"] == "open"


def test_revision_conflict(s):
    item_id = s.authorize()
    revision = s.item(item_id)["revision"]
    head = s.world.head
    for stale in (revision - 1, revision + 1):
        error = rejected(s, s.c.send("work.cancel", {}, workItemId=item_id,
                                     expectedRevision=stale), 409, "REVISION_CONFLICT", head)
        assert error["details"]["revision"] == revision
    s.c.ok("work.cancel", {}, workItemId=item_id, expectedRevision=revision)


def test_stale_ownership_for_an_older_epoch_or_another_agent(s):
    item_id = s.authorize()
    s.offer(item_id)
    s.accept(item_id)
    epoch = s.item(item_id)["ownershipEpoch"]
    head = s.world.head
    rejected(s, s.w1.send("work.start", {}, workItemId=item_id, ownershipEpoch=epoch - 1),
             409, "STALE_OWNERSHIP", head)
    rejected(s, s.w2.send("work.start", {}, workItemId=item_id, ownershipEpoch=epoch),
             409, "STALE_OWNERSHIP", head)


def test_stale_lease_for_an_older_lease_id_with_the_same_ownership_epoch(s):
    item_id, first = s.running()
    old = s.lease_fields(item_id)
    s.w1.ok("work.checkpoint", {"progress": {"phase": "half"}}, **old)
    second = s.start(item_id)
    assert second["leaseId"] != first["leaseId"]
    assert second["ownershipEpoch"] == first["ownershipEpoch"] == old["ownershipEpoch"]
    head = s.world.head
    rejected(s, s.w1.send("work.progress", {"phase": "late"}, **old), 409, "STALE_LEASE", head)
    rejected(s, s.w1.send("work.submit", submit_body(), **old), 409, "STALE_LEASE", head)
    assert s.item(item_id)["state"] == "active"


def test_lease_expired(s):
    item_id, _started = s.running()
    fields = s.lease_fields(item_id)
    with time_machine.travel(now() + timedelta(seconds=400), tick=False):
        head = s.world.head
        error = rejected(s, s.w1.send("lease.renew", {}, **fields), 409, "LEASE_EXPIRED", head)
        assert "expiredAt" in error["details"]
        rejected(s, s.w1.send("work.submit", submit_body(), **fields), 409, "LEASE_EXPIRED", head)


def test_offer_not_live_when_expired(s):
    item_id = s.authorize()
    s.offer(item_id, s.w1, seconds=60)
    with time_machine.travel(now() + timedelta(seconds=120), tick=False):
        head = s.world.head
        error = rejected(s, s.w1.send("work.accept_offer", {"contractRevision": 1},
                                      workItemId=item_id), 409, "OFFER_NOT_LIVE", head)
        assert error["details"]["status"] == "expired"


def test_offer_not_live_when_declined(s):
    item_id = s.authorize()
    s.offer(item_id, s.w1)
    s.w1.ok("work.decline_offer", {"reason": "capacity"}, workItemId=item_id)
    head = s.world.head
    error = rejected(s, s.w1.send("work.accept_offer", {"contractRevision": 1},
                                  workItemId=item_id), 409, "OFFER_NOT_LIVE", head)
    assert error["details"]["status"] == "declined"


def test_offer_not_live_when_addressed_to_someone_else(s):
    item_id = s.authorize()
    s.offer(item_id, s.w1)
    head = s.world.head
    rejected(s, s.w2.send("work.accept_offer", {"contractRevision": 1}, workItemId=item_id),
             409, "OFFER_NOT_LIVE", head)


def test_offer_not_live_when_replaced_by_a_new_offer(s):
    item_id = s.authorize()
    s.offer(item_id, s.w1)
    s.offer(item_id, s.w2)
    head = s.world.head
    rejected(s, s.w1.send("work.accept_offer", {"contractRevision": 1}, workItemId=item_id),
             409, "OFFER_NOT_LIVE", head)


def test_offer_not_live_for_the_loser_of_an_urgent_offer(s):
    """The loser's offer was withdrawn by the winner's acceptance (§10.3)."""
    item_id = s.authorize()
    s.offer(item_id, s.w1, s.w2, mode="urgent")
    s.accept(item_id, s.w1)
    head = s.world.head
    error = rejected(s, s.w2.send("work.accept_offer", {"contractRevision": 1},
                                  workItemId=item_id), 409, "OFFER_NOT_LIVE", head)
    assert error["details"]["status"] == "withdrawn"
    assert s.item(item_id)["owner"] in (s.w1.name, s.w1.principal)


def test_contract_revision_mismatch_when_accepting_an_old_revision(s):
    item_id = s.authorize()
    s.offer(item_id, s.w1)
    s.c.ok("work.revise_contract", {"contract": contract(goal="A sharper goal")},
           workItemId=item_id)
    head = s.world.head
    error = rejected(s, s.w1.send("work.accept_offer", {"contractRevision": 1},
                                  workItemId=item_id), 409, "CONTRACT_REVISION_MISMATCH", head)
    assert error["details"]["contractRevision"] == 2


def test_contract_revision_mismatch_when_starting_before_accepting_the_revision(s):
    item_id = s.authorize()
    s.offer(item_id, s.w1)
    s.accept(item_id, s.w1)
    s.c.ok("work.revise_contract", {"contract": contract(goal="A sharper goal")},
           workItemId=item_id)
    head = s.world.head
    rejected(s, s.w1.send("work.start", {}, workItemId=item_id,
                          ownershipEpoch=s.item(item_id)["ownershipEpoch"]),
             409, "CONTRACT_REVISION_MISMATCH", head)


def test_contract_revision_mismatch_when_submitting_against_another_revision(s):
    item_id, _ = s.running()
    head = s.world.head
    rejected(s, s.w1.send("work.submit", submit_body(revision=2), **s.lease_fields(item_id)),
             409, "CONTRACT_REVISION_MISMATCH", head)


def test_dependency_cycle(s):
    a = s.authorize()
    b = s.authorize(dependencies={"workItems": [a], "policy": "all_verified"})
    head = s.world.head
    error = rejected(s, s.c.send("work.revise_contract", {"contract": contract(
        dependencies={"workItems": [b], "policy": "all_verified"})}, workItemId=a),
        409, "DEPENDENCY_CYCLE", head)
    assert error["details"]["cycle"][0] == error["details"]["cycle"][-1] == a


def test_dependency_cycle_on_itself(s):
    head = s.world.head
    rejected(s, s.c.send("work.authorize", {
        "missionId": s.mission_id, "workItemId": "wi_self",
        "contract": contract(dependencies={"workItems": ["wi_self"], "policy": "all_verified"})}),
        409, "DEPENDENCY_CYCLE", head)


def test_dependencies_not_met(s):
    a = s.authorize()
    b = s.authorize(dependencies={"workItems": [a], "policy": "all_verified"})
    head = s.world.head
    error = rejected(s, s.c.send("work.offer", {
        "candidates": [s.w1.name], "mode": "sequential",
        "expiresAt": format_time(now() + timedelta(minutes=10))}, workItemId=b),
        409, "DEPENDENCIES_NOT_MET", head)
    assert error["details"]["dependencies"] == {a: "open"}


def test_evidence_incomplete(s):
    item_id, _ = s.running()
    head = s.world.head
    error = rejected(s, s.w1.send("work.submit", submit_body(criteria=["ac1"]),
                                  **s.lease_fields(item_id)), 409, "EVIDENCE_INCOMPLETE", head)
    assert error["details"]["missingCriteria"] == ["ac2"]
    assert s.item(item_id)["state"] == "active"


def test_approval_required(s):
    item_id = s.authorize(risk={"class": "high", "requiresExecutionApproval": True})
    s.offer(item_id)
    s.accept(item_id)
    epoch = s.item(item_id)["ownershipEpoch"]
    head = s.world.head
    rejected(s, s.w1.send("work.start", {}, workItemId=item_id, ownershipEpoch=epoch),
             409, "APPROVAL_REQUIRED", head)
    s.owner.ok("approval.grant_execution", {"comment": "go"}, workItemId=item_id)
    s.w1.ok("work.start", {}, workItemId=item_id, ownershipEpoch=epoch)


def test_idempotency_mismatch(s):
    command_id = f"cmd-{uuid.uuid4().hex}"
    s.c.ok("mission.create", mission_body(s, "First"), id=command_id)
    head = s.world.head
    rejected(s, s.c.send("mission.create", mission_body(s, "Second"), id=command_id),
             409, "IDEMPOTENCY_MISMATCH", head)


# --- 413, 422 --------------------------------------------------------------------------------

def test_payload_too_large_for_a_command(s):
    envelope = s.c.envelope("mission.create", mission_body(s, "x" * 5000))
    head = s.world.head
    with override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=2048):
        rejected(s, s.c.post(envelope), 413, "PAYLOAD_TOO_LARGE", head)


def test_payload_too_large_for_a_session(s):
    with override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=256):
        response = s.w1.open_session(nonce="n" * 199, padding="p" * 1000)
    assert_error(response, 413, "PAYLOAD_TOO_LARGE")


def test_unknown_critical_extension(s):
    item_id = s.authorize()
    head = s.world.head
    error = rejected(s, s.c.send("work.cancel", {}, workItemId=item_id,
                                 extensions={"urn:example:unknown": {"critical": True}}),
                     422, "UNKNOWN_CRITICAL_EXTENSION", head)
    assert error["details"]["extension"] == "urn:example:unknown"
    s.c.ok("work.cancel", {}, workItemId=item_id,
           extensions={"urn:example:unknown": {"critical": False, "hint": 1}})


# --- idempotency: duplicates and remembered rejections ---------------------------------------

def test_the_same_command_twice_answers_the_same_with_duplicate_true(s):
    item_id = s.authorize()
    envelope = s.c.envelope("work.cancel", {"reason": "scope cut"}, workItemId=item_id)
    first = s.c.post(envelope)
    assert first.status_code == 200 and first.json()["duplicate"] is False
    head = s.world.head
    second = s.c.post(envelope)
    assert second.status_code == 200
    assert second.json() == {**first.json(), "duplicate": True}
    assert s.world.head == head
    assert CommandRecord.objects.filter(command_id=envelope["id"]).count() == 1


def test_a_rejected_command_sent_again_gets_the_same_rejection(s):
    """Rejections are remembered under the command id, even once the state would allow it."""
    item_id = s.authorize()
    envelope = s.c.envelope("work.accept_result", {}, workItemId=item_id)
    first = s.c.post(envelope)
    assert_error(first, 409, "TRANSITION_NOT_PERMITTED")
    head = s.world.head
    again = s.c.post(envelope)
    assert (again.status_code, again.json()) == (first.status_code, first.json())
    assert s.world.head == head
    s.offer(item_id)
    s.accept(item_id)
    s.start(item_id)
    s.w1.ok("work.submit", submit_body(artifacts=[s.deliver(item_id)]),
            **s.lease_fields(item_id))
    head = s.world.head
    later = s.c.post(envelope)
    assert (later.status_code, later.json()) == (first.status_code, first.json())
    assert s.world.head == head
    assert s.item(item_id)["state"] == "submitted"


def test_a_late_result_from_a_fenced_owner_is_refused_audited_and_never_completes(s):
    item_id, started = s.running()
    old = s.lease_fields(item_id)
    with time_machine.travel(now() + timedelta(seconds=400), tick=False):
        s.offer(item_id, s.w2)  # fences the expired owner first (§10.2)
        s.accept(item_id, s.w2)
        head = s.world.head
        late = s.w1.envelope("work.submit", submit_body(), **old)
        response = s.w1.post(late)
        assert response.status_code == 409
        code = response.json()["error"]["code"]
        assert code in ("STALE_OWNERSHIP", "STALE_LEASE")
        assert s.world.head == head
        audit = s.c.get(f"work-items/{item_id}/audit")
        assert audit.status_code == 200
        refused = [r for r in audit.json()["refusedCommands"] if r["commandId"] == late["id"]]
        assert len(refused) == 1
        assert refused[0]["type"] == "work.submit"
        assert refused[0]["actor"] == s.w1.principal
        assert refused[0]["error"]["code"] == code
        assert refused[0]["command"]["body"] == late["body"]
        assert refused[0]["command"]["leaseId"] == started["leaseId"]
        types = [e["type"] for e in audit.json()["events"]]
        assert "work.submitted" not in types and "work.verified" not in types
        assert "work.ownership_expired" in types
        item = s.item(item_id)
        assert item["state"] == "queued" and item["owner"] in (s.w2.name, s.w2.principal)
        rejected(s, s.c.send("work.accept_result", {}, workItemId=item_id),
                 409, "TRANSITION_NOT_PERMITTED", head)
