"""The MissionOwner's refusals, over the API: `approval.refuse_execution` keeps the start
gate shut with a reason on record, and `mission.refuse_approval` records why the final
Approval is not given yet while the Mission stays open for more work."""

import pytest

from tests.support import Scenario, assert_error, evidence

pytestmark = pytest.mark.django_db

RISKY = {"class": "high", "requiresExecutionApproval": True}


def queued_risky(s: Scenario) -> str:
    return s.queued(s.w1, risk=RISKY)


def test_a_refused_execution_keeps_the_gate_shut_until_a_grant(scenario):
    s = scenario
    item_id = queued_risky(s)

    refused = s.owner.ok("approval.refuse_execution", {"reason": "no rollback plan"},
                         workItemId=item_id)
    start = s.w1.send("work.start", {}, workItemId=item_id, ownershipEpoch=1)
    granted = s.owner.ok("approval.grant_execution", {"comment": "plan attached"},
                         workItemId=item_id)

    assert refused[0]["type"] == "approval.execution_refused"
    assert refused[0]["data"] == {"by": s.owner.principal, "contractRevision": 1,
                                  "reason": "no rollback plan"}
    assert_error(start, 409, "APPROVAL_REQUIRED")
    assert granted[0]["type"] == "approval.execution_granted"
    assert s.start(item_id)["leaseId"]


def test_refusing_execution_needs_the_missions_human_owner_and_a_reason(scenario):
    s = scenario
    item_id = queued_risky(s)
    other_owner = s.world.human("other-" + s.world.group.slug, roles=("owner",))
    head = s.world.head

    by_coordinator = s.c.send("approval.refuse_execution", {"reason": "no"}, workItemId=item_id)
    by_other_owner = other_owner.send("approval.refuse_execution", {"reason": "no"},
                                      workItemId=item_id)
    without_reason = s.owner.send("approval.refuse_execution", {}, workItemId=item_id)

    assert_error(by_coordinator, 403, "FORBIDDEN")
    assert_error(by_other_owner, 403, "FORBIDDEN")
    assert_error(without_reason, 400, "VALIDATION_ERROR")
    assert s.world.head == head


def test_execution_of_a_low_risk_item_or_an_approved_one_is_not_refused(scenario):
    s = scenario
    plain = s.queued(s.w1)
    risky = queued_risky(s)
    s.owner.ok("approval.grant_execution", {}, workItemId=risky)

    assert_error(s.owner.send("approval.refuse_execution", {"reason": "x"}, workItemId=plain),
                 409, "TRANSITION_NOT_PERMITTED")
    assert_error(s.owner.send("approval.refuse_execution", {"reason": "x"}, workItemId=risky),
                 409, "TRANSITION_NOT_PERMITTED")


def test_a_refused_final_approval_is_recorded_and_the_mission_stays_open(scenario):
    s = scenario
    first = s.authorize()
    other = Scenario()
    foreign = other.authorize()

    refused = s.owner.ok("mission.refuse_approval", {
        "missionId": s.mission_id, "reason": "the summary misses Q4",
        "workItems": [{"workItemId": first, "reason": "no sources cited"}]})
    stranger = s.owner.send("mission.refuse_approval", {
        "missionId": s.mission_id, "reason": "x",
        "workItems": [{"workItemId": foreign, "reason": "x"}]})
    by_coordinator = s.c.send("mission.refuse_approval", {"missionId": s.mission_id,
                                                          "reason": "x"})
    more_work = s.authorize(goal="Add Q4")

    assert refused[0]["type"] == "mission.approval_refused"
    assert refused[0]["data"] == {"by": s.owner.principal, "reason": "the summary misses Q4",
                                  "workItems": [{"workItemId": first,
                                                 "reason": "no sources cited"}]}
    assert_error(stranger, 400, "VALIDATION_ERROR")
    assert_error(by_coordinator, 403, "FORBIDDEN")
    mission = s.c.get(f"missions/{s.mission_id}").json()
    assert mission["state"] == "active" and more_work in mission["workItems"]


def test_the_approval_refusal_waits_on_the_coordinator_until_new_work_answers_it(scenario):
    from apps.work.models import Mission
    from mission_weave.core import state_documents

    s = scenario
    item_id = s.authorize()
    s.owner.ok("mission.refuse_approval", {"missionId": s.mission_id, "reason": "thin"})

    def refusal():
        row = Mission.objects.get(group_id=s.world.group.id, mission_id=s.mission_id)
        return state_documents.mission_from_doc(row.doc).approval_refusal

    waiting = refusal()
    revised = {**s.item(item_id)["contract"], "goal": "Summarize it, with sources"}
    revised.pop("revision")
    s.c.ok("work.revise_contract", {"contract": revised}, workItemId=item_id)

    assert waiting["reason"] == "thin" and waiting["by"] == s.owner.principal
    assert refusal() is None


def test_an_approved_mission_cannot_be_refused_afterwards(scenario):
    s = scenario
    item_id, _ = s.running(s.w1)
    s.w1.ok("work.submit", {"contractRevision": 1, "artifacts": [s.deliver(item_id)],
                            "evidence": [evidence(["ac1", "ac2"])]}, **s.lease_fields(item_id))
    s.accept_result(item_id)
    s.owner.ok("mission.approve", {"missionId": s.mission_id})

    late = s.owner.send("mission.refuse_approval", {"missionId": s.mission_id, "reason": "x"})

    assert_error(late, 409, "TRANSITION_NOT_PERMITTED")
