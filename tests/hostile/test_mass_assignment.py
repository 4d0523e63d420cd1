"""Mass assignment: a command that carries what the server owns (an event's sequence or
hash, a state, a revision, an ownership epoch or lease that is not the sender's, another
session's epoch, Evidence or a manifest in someone else's name, ids of another Group) is
refused, or the field is ignored, and either way it changes nothing it should not.

Every case goes through HTTP as a real principal of the Cast (tests/hostile/cast.py) with
an envelope that is valid but for the one field, so that only that field can be what
refuses it. After a refusal the log (head, hash, event count) and every projection (Missions,
WorkItems, proposals, artifacts, Context Packages) of both Groups are exactly as before."""

import json
from datetime import timedelta

import pytest

from apps.artifacts.models import Artifact, ContextPackage
from apps.ledger.models import Event, Group
from apps.work.models import Mission, Proposal, WorkItem
from mission_weave.core import offline_binding
from mission_weave.protocol.timefmt import format_time
from tests.hostile.cast import envelope
from tests.hostile.matrix import refused, signed_by
from tests.hostile.test_authorization import bearer, client_for
from tests.integration.artifact_helpers import digest, manifest, package, signed
from tests.support import assert_error, contract, evidence, now

PROGRESS = {"phase": "drafting"}


def recorded(cast) -> dict:
    """The log and the projections of both Groups, as comparable values."""
    groups = [cast.home.group.id, cast.other.group.id]

    def rows(model, *fields):
        return sorted(json.dumps(row, sort_keys=True, default=str) for row in
                      model.objects.filter(group_id__in=groups).values(*fields))

    return {"heads": sorted(Group.objects.filter(id__in=groups).values_list(
                "id", "head_sequence", "head_hash")),
            "events": Event.objects.filter(group_id__in=groups).count(),
            "missions": rows(Mission, "mission_id", "doc"),
            "items": rows(WorkItem, "work_item_id", "state", "ownership_epoch", "revision",
                          "lease_id", "doc"),
            "proposals": rows(Proposal, "proposal_id", "doc"),
            "artifacts": rows(Artifact, "hash", "doc"),
            "packages": rows(ContextPackage, "package_id", "version", "doc")}


def send(actor, group_id: str, document: dict):
    return client_for(actor).post(f"/api/v1/groups/{group_id}/commands",
                                  json.dumps(signed_by(actor, document)),
                                  content_type="application/json", **bearer(actor))


def command(actor, group_id, type_, body, **fields) -> dict:
    """An unsigned envelope: the cases add their field, `send` signs."""
    return envelope(actor, group_id, type_, body, **fields)


def lease_of(stage, state="active") -> dict:
    return stage.lease(stage.items[state])


def evidence_of(producer: str, **overrides) -> list:
    return [evidence(["ac1", "ac2"], producer=producer, **{"artifacts": [], **overrides})]


# -- the cases: (who sends, to which Group, the envelope, the refusal) ----------------------------

def on_active(cast, type_, body, **extra):
    """The m1 worker's command on its active WorkItem, with its own current lease."""
    m1 = cast.m1
    return m1.worker, command(m1.worker, cast.home.group.id, type_, body,
                              **{**lease_of(m1), **extra})


def by_coordinator(cast, type_, body, state="open", **extra):
    m1 = cast.m1
    return m1.coordinator, command(m1.coordinator, cast.home.group.id, type_, body,
                                   workItemId=m1.items[state], **extra)


def case_envelope_member(member, value):
    def build(cast):
        actor, document = on_active(cast, "work.progress", PROGRESS)
        return actor, {**document, member: value}
    return build


def case_body_member(type_, body):
    return lambda cast: on_active(cast, type_, body)


def case_epoch_ahead(cast):
    actor, document = on_active(cast, "work.progress", PROGRESS)
    return actor, {**document, "ownershipEpoch": document["ownershipEpoch"] + 1}


def case_lease_of_another_item(cast):
    actor, document = on_active(cast, "work.progress", PROGRESS)
    return actor, {**document, "leaseId": lease_of(cast.m2)["leaseId"]}


def case_lease_of_another_agent(cast):
    m1, m2 = cast.m1, cast.m2
    return m1.worker, command(m1.worker, cast.home.group.id, "work.progress", PROGRESS,
                              **lease_of(m2))


def case_session(delta):
    """The worker's envelope naming another of its sessions than the one it sends from
    (for an earlier one, it opens a new session first: rolled back with the test)."""
    def build(cast):
        actor = reopened(cast.m1.worker) if delta < 0 else cast.m1.worker
        document = command(actor, cast.home.group.id, "work.progress", PROGRESS,
                           **lease_of(cast.m1))
        return actor, {**document, "sessionEpoch": actor.session_epoch + delta}
    return build


def reopened(actor):
    """A copy of the agent signed in again: its new token and session epoch (the Cast's
    own Actor keeps the old ones)."""
    from dataclasses import replace

    copy = replace(actor, client=client_for(None), last={})
    assert copy.open_session().status_code == 201
    return copy


def case_actor_of_another(cast):
    actor, document = on_active(cast, "work.progress", PROGRESS)
    return actor, {**document, "actor": cast.worker2.principal}


def case_membership_epoch(cast):
    actor, document = on_active(cast, "work.progress", PROGRESS)
    return actor, {**document, "membershipEpoch": document["membershipEpoch"] + 1}


def case_stale_revision(cast):
    m1 = cast.m1
    revision = m1.item(m1.items["open"])["revision"]
    return by_coordinator(cast, "work.cancel", {"reason": "x"}, expectedRevision=revision - 1)


def case_contract_revision(cast):
    return by_coordinator(cast, "work.revise_contract", {"contract": contract(revision=7)})


def case_submit_evidence_of(producer_of):
    def build(cast):
        name = cast.m1.artifact
        return on_active(cast, "work.submit", {
            "contractRevision": 1, "artifacts": [name],
            "evidence": evidence_of(producer_of(cast), method="human-review")})
    return build


def case_accept_with_owners_evidence(cast):
    return by_coordinator(cast, "work.accept_result", {
        "evidence": evidence_of(cast.owner.principal, method="human-review")}, "submitted")


def case_fail_with_others_evidence(cast):
    return by_coordinator(cast, "work.fail", {"evidence": evidence_of(
        cast.reviewer.principal, result="fail: broken")}, "active")


def case_record_others_evidence(cast):
    m1 = cast.m1
    return cast.reviewer, command(cast.reviewer, cast.home.group.id, "evidence.record", {
        "evidence": [evidence(["ac1"], producer=cast.coordinator.principal,
                              result="pass: fine")]}, workItemId=m1.items["submitted"])


def case_manifest_of(producer_of, signer_of):
    """The m1 worker publishes, under its own lease, a manifest naming another producer."""
    def build(cast):
        m1 = cast.m1
        producer, signer = producer_of(cast), signer_of(cast)
        data = m1.unpublished_data
        document = {**manifest(m1.worker, m1.mission_id, m1.items["active"], data),
                    "producer": producer.name}
        return on_active(cast, "artifact.publish", signed(document, signer))
    return build


def case_package_of_another(cast):
    m1 = cast.m1
    document = package(cast.worker2, m1.mission_id, "pkg-not-mine",
                       events=(m1.created_sequence, m1.created_sequence))
    return m1.worker, command(m1.worker, cast.home.group.id, "context.publish", document)


def case_envelope_group(cast):
    actor, document = on_active(cast, "work.progress", PROGRESS)
    return actor, {**document, "groupId": cast.other.group.id}


def case_manifest_group(cast):
    m1 = cast.m1
    document = {**manifest(m1.worker, m1.mission_id, m1.items["active"], m1.unpublished_data),
                "groupId": cast.other.group.id}
    return on_active(cast, "artifact.publish", signed(document, m1.worker))


def case_mission_of_other_group(cast):
    m1 = cast.m1
    return m1.coordinator, command(m1.coordinator, cast.home.group.id, "work.authorize", {
        "missionId": cast.mb.mission_id, "contract": contract()})


def case_dependency_in_other_group(cast):
    return by_coordinator(cast, "work.revise_contract", {"contract": contract(dependencies={
        "workItems": [cast.mb.items["verified"]], "policy": "all_verified"})})


def case_evidence_citing_other_group(cast):
    return on_active(cast, "work.submit", {
        "contractRevision": 1, "artifacts": [cast.m1.artifact],
        "evidence": evidence_of(cast.m1.worker.principal, subject="workItem:checked",
                                artifacts=[cast.mb.artifact])})


def case_submission_of_other_group(cast):
    return on_active(cast, "work.submit", {
        "contractRevision": 1, "artifacts": [cast.mb.artifact],
        "evidence": evidence_of(cast.m1.worker.principal)})


def case_owner_of_other_group(cast):
    m1 = cast.m1
    return m1.coordinator, command(m1.coordinator, cast.home.group.id, "mission.create", {
        "title": "x", "ownerId": cast.b_owner.principal,
        "coordinatorId": m1.coordinator.principal})


def case_candidate_of_other_group(cast):
    later = format_time(now() + timedelta(hours=1))
    return by_coordinator(cast, "work.offer", {"candidates": [cast.b_worker.name],
                                               "mode": "sequential", "expiresAt": later})


def case_existing_item_id(cast):
    m1 = cast.m1
    return m1.coordinator, command(m1.coordinator, cast.home.group.id, "work.authorize", {
        "missionId": m1.mission_id, "workItemId": cast.m2.items["open"],
        "contract": contract()})


def case_existing_mission_id(cast):
    m1 = cast.m1
    return m1.coordinator, command(m1.coordinator, cast.home.group.id, "mission.create", {
        "title": "x", "missionId": cast.m2.mission_id, "ownerId": cast.owner.principal,
        "coordinatorId": m1.coordinator.principal})


def case_wider_token(cast):
    return on_active(cast, "capability.rotate", {"scopes": {"tools": ["search", "shell"]}})


def case_offline_binding_of_another(cast):
    """A buffered report whose binding names another agent's lease (§11.5)."""
    m2 = cast.m2
    item = m2.item(m2.items["active"])
    at = format_time(now())
    binding = {"critical": True, "agentId": m2.worker.name, "groupId": cast.home.group.id,
               "workItemId": item["id"], "sessionEpoch": m2.worker.session_epoch,
               "ownershipEpoch": item["ownershipEpoch"], "leaseId": item["lease"]["id"],
               "disconnectedAt": at, "bufferedAt": at, "graceDeadline": at,
               "leaseExpiresAt": item["lease"]["expiresAt"], "usage": {"tokens": 5}}
    m1 = cast.m1
    return m1.worker, command(m1.worker, cast.home.group.id, "work.progress", PROGRESS,
                              workItemId=item["id"], ownershipEpoch=item["ownershipEpoch"],
                              leaseId=item["lease"]["id"],
                              extensions={offline_binding.URN: binding})


CASES = {
    # What the server numbers, chains and projects, in the envelope or a body.
    "envelope carries an event sequence": (case_envelope_member("sequence", 1),
                                           "VALIDATION_ERROR"),
    "envelope carries a hash": (case_envelope_member("hash", "sha256:" + "0" * 64),
                                "VALIDATION_ERROR"),
    "envelope carries a state": (case_envelope_member("state", "verified"),
                                 "VALIDATION_ERROR"),
    "envelope carries a revision": (case_envelope_member("revision", 99), "VALIDATION_ERROR"),
    "envelope carries occurredAt": (case_envelope_member("occurredAt", "2020-01-01T00:00:00Z"),
                                    "VALIDATION_ERROR"),
    "body carries a state": (case_body_member("work.progress", {**PROGRESS, "state": "verified"}),
                             "VALIDATION_ERROR"),
    "body carries a sequence": (case_body_member("work.checkpoint", {"progress": PROGRESS,
                                                                     "sequence": 1}),
                                "VALIDATION_ERROR"),
    "body chooses its lease id": (case_body_member("lease.renew", {"leaseId": "lease_mine"}),
                                  "VALIDATION_ERROR"),
    "body chooses its ownership epoch": (case_body_member("lease.renew",
                                                          {"ownershipEpoch": 99}),
                                         "VALIDATION_ERROR"),
    "contract claims a revision": (case_contract_revision, "INVALID_CONTRACT"),
    "expectedRevision behind the WorkItem's": (case_stale_revision, "REVISION_CONFLICT"),
    # Fencing tokens and epochs that are not the sender's.
    "ownershipEpoch ahead of the WorkItem's": (case_epoch_ahead, "STALE_OWNERSHIP"),
    "leaseId of another WorkItem's lease": (case_lease_of_another_item, "STALE_LEASE"),
    "lease and epoch of another agent": (case_lease_of_another_agent, "STALE_LEASE"),
    "sessionEpoch of an earlier session": (case_session(-1), "STALE_SESSION"),
    "sessionEpoch of a later session": (case_session(+1), "STALE_SESSION"),
    "actor of another principal": (case_actor_of_another, "FORBIDDEN"),
    "membershipEpoch not the member's": (case_membership_epoch, "STALE_MEMBERSHIP"),
    "offline binding of another agent's lease": (case_offline_binding_of_another,
                                                 "VALIDATION_ERROR"),
    # Evidence, manifests and packages in someone else's name.
    "submission Evidence by a human reviewer": (
        case_submit_evidence_of(lambda c: c.owner.principal), "FORBIDDEN"),
    "submission Evidence by the coordinator": (
        case_submit_evidence_of(lambda c: c.coordinator.principal), "FORBIDDEN"),
    "acceptance Evidence by the owner": (case_accept_with_owners_evidence, "FORBIDDEN"),
    "failure Evidence by the reviewer": (case_fail_with_others_evidence, "FORBIDDEN"),
    "recorded Evidence by the coordinator": (case_record_others_evidence, "FORBIDDEN"),
    "manifest of another agent, signed by the sender": (
        case_manifest_of(lambda c: c.worker2, lambda c: c.m1.worker), "FORBIDDEN"),
    "manifest of another agent, signed by it": (
        case_manifest_of(lambda c: c.worker2, lambda c: c.worker2), "FORBIDDEN"),
    "Context Package of another agent": (case_package_of_another, "FORBIDDEN"),
    "capability token wider than the lease's": (case_wider_token, "FORBIDDEN"),
    # Ids of another Group, and ids this Group already uses.
    "envelope groupId of another Group": (case_envelope_group, "VALIDATION_ERROR"),
    "manifest groupId of another Group": (case_manifest_group, "VALIDATION_ERROR"),
    "Mission of another Group": (case_mission_of_other_group, "NOT_FOUND"),
    "dependency on another Group's WorkItem": (case_dependency_in_other_group,
                                               "INVALID_CONTRACT"),
    "Evidence citing another Group's artifact": (case_evidence_citing_other_group,
                                                 "NOT_FOUND"),
    "submission of another Group's artifact": (case_submission_of_other_group, "NOT_FOUND"),
    "MissionOwner of another Group": (case_owner_of_other_group, "VALIDATION_ERROR"),
    "offer to a worker of another Group": (case_candidate_of_other_group, "VALIDATION_ERROR"),
    "WorkItem id another Mission uses": (case_existing_item_id, "VALIDATION_ERROR"),
    "Mission id another Mission uses": (case_existing_mission_id, "VALIDATION_ERROR"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_server_owned_or_foreign_field_is_refused_and_changes_nothing(cast, db, case):
    build, code = CASES[case]
    actor, document = build(cast)
    group_id = cast.home.group.id
    before = recorded(cast)

    response = send(actor, group_id, document)

    assert_error(response, refused(code)[0], code)
    assert recorded(cast) == before


def test_an_unknown_extension_carrying_server_fields_is_ignored(cast, db):
    """A non-critical extension is ignored (PROTOCOL §7): whatever it claims, the event is
    numbered, chained and attributed by the server and the WorkItem keeps its state."""
    m1 = cast.m1
    item_id = m1.items["active"]
    claims = {"critical": False, "sequence": 1, "actor": "system", "state": "verified",
              "ownershipEpoch": 99, "leaseId": "lease_mine", "revision": 0}
    actor, document = on_active(cast, "work.progress", PROGRESS,
                                extensions={"urn:example:claims": claims})
    group = Group.objects.get(id=cast.home.group.id)
    item = m1.item(item_id)

    response = send(actor, group.id, document)

    assert response.status_code == 200, response.json()
    [event] = response.json()["events"]
    assert (event["sequence"], event["prevHash"]) == (group.head_sequence + 1, group.head_hash)
    assert (event["actor"], event["type"]) == (actor.principal, "work.progress_reported")
    assert "urn:example:claims" not in json.dumps(event)
    after = m1.item(item_id)
    assert (after["state"], after["ownershipEpoch"], after["lease"]) == (
        "active", item["ownershipEpoch"], item["lease"])
    assert after["revision"] == item["revision"] + 1


def test_a_coordinator_and_worker_of_another_mission_publishes_only_under_a_lease(cast, db):
    """Both roles, but the Mission is someone else's: a relay without the lease is refused
    (mission_weave/core/commands/authority.py, artifacts.py), and with the Mission's
    worker's lease too."""
    from apps.identity import registry

    registry.add_member(cast.home.group, cast.worker.principal, ["worker", "coordinator"])
    m2 = cast.m2
    document = signed({**manifest(m2.worker, m2.mission_id, m2.items["active"],
                                  m2.unpublished_data), "groupId": cast.home.group.id},
                      m2.worker)
    before = recorded(cast)

    relayed = send(cast.worker, cast.home.group.id, command(
        cast.worker, cast.home.group.id, "artifact.publish", document,
        workItemId=m2.items["active"]))
    leased = send(cast.worker, cast.home.group.id, command(
        cast.worker, cast.home.group.id, "artifact.publish", document, **lease_of(m2)))

    assert_error(relayed, 400, "VALIDATION_ERROR")  # the lease path: name the leaseId
    assert_error(leased, 409, "STALE_LEASE")
    assert recorded(cast) == before
    assert digest(m2.unpublished_data) not in set(Artifact.objects.values_list(
        "hash", flat=True))
