"""Who may decide for a Mission (mission_weave/core/commands/authority.py), pure: the
Mission's owner, coordinator and delegates are authorization, not decoration; Evidence
in a command is its sender's; an empty Mission cannot be approved."""

from dataclasses import replace

import pytest

from mission_weave.core import commands, state
from mission_weave.core.commands import authority
from mission_weave.protocol.errors import ProtocolError
from tests.unit import builders
from tests.unit.builders import COORDINATOR, HUMAN, MISSION_ID, contract, evidence

OTHER_COORDINATOR = "agent:coord-2"
OTHER_OWNER = "user:bob"
DELEGATE = "agent:deputy"

# A valid body of each command on an item in the state it needs (what the Mission's own
# coordinator may send: the refusal of anyone else is then the authority's alone).
COORDINATOR_BODIES = {
    "work.offer": (state.OPEN, {"candidates": ["w1"], "mode": "sequential",
                                "expiresAt": builders.iso(600)}),
    "work.revise_contract": (state.OPEN, {"contract": contract(goal="Revised goal")}),
    "work.unblock": (state.BLOCKED, {"resolution": "the key arrived"}),
    "work.accept_result": (state.SUBMITTED, {"evidence": []}),
    "work.fail": (state.QUEUED, {"evidence": []}),
    "work.cancel": (state.OPEN, {"reason": "not needed"}),
    "work.request_preemption": (state.ACTIVE, {"reason": "urgent work"}),
    "mission.create_child": (state.OPEN, {"title": "Sub-work", "childFailurePolicy": "fail"}),
}


def decide(view, command):
    return commands.decide(view, command, builders.context())


def item_command(command_type: str, actor: str, item_state: str, body: dict):
    item = builders.work_item(item_state)
    if "evidence" in body:
        body = {**body, "evidence": [evidence(list(item.criteria_ids), producer=actor)]}
    return builders.view_of(item), builders.command(
        command_type, body, item, actor=actor, roles={"coordinator", "owner"})


@pytest.mark.parametrize("command_type", sorted(COORDINATOR_BODIES))
def test_a_coordinators_command_is_for_the_missions_coordinator_only(command_type):
    item_state, body = COORDINATOR_BODIES[command_type]

    view, theirs = item_command(command_type, OTHER_COORDINATOR, item_state, body)
    with pytest.raises(ProtocolError) as refused:
        decide(view, theirs)
    view, own = item_command(command_type, COORDINATOR, item_state, body)

    assert refused.value.code == "FORBIDDEN"
    assert refused.value.details == {"missionId": MISSION_ID, "allowed": [COORDINATOR]}
    assert COORDINATOR in refused.value.message and OTHER_COORDINATOR in refused.value.message
    assert decide(view, own)  # the Mission's own coordinator may


def test_a_delegate_the_mission_names_may_act_as_its_coordinator():
    view, command = item_command("work.cancel", DELEGATE, state.OPEN, {"reason": "dup"})
    mission = view.missions[MISSION_ID]
    view.missions[MISSION_ID] = replace(mission, delegates=(DELEGATE,))

    (cancelled,) = decide(view, command)

    assert cancelled.type == "work.cancelled"
    assert authority.coordinators(view.missions[MISSION_ID]) == [COORDINATOR, DELEGATE]


def test_work_authorize_is_the_missions_coordinators():
    view = builders.view_of(missions=[builders.mission()])
    body = {"missionId": MISSION_ID, "contract": contract()}

    with pytest.raises(ProtocolError) as refused:
        decide(view, builders.command("work.authorize", body, actor=OTHER_COORDINATOR,
                                      roles={"coordinator"}))
    assert refused.value.code == "FORBIDDEN"
    assert decide(view, builders.command("work.authorize", body, actor=COORDINATOR,
                                         roles={"coordinator"}))


def test_the_owners_commands_are_the_missions_owners_only():
    item = builders.work_item(state.QUEUED, requires_approval=True)
    view = builders.view_of(item)

    with pytest.raises(ProtocolError) as refused:
        decide(view, builders.command("approval.grant_execution", {}, item, actor=OTHER_OWNER,
                                      roles={"owner"}))
    assert refused.value.code == "FORBIDDEN"
    assert refused.value.details["allowed"] == [HUMAN]
    (granted,) = decide(view, builders.command("approval.grant_execution", {}, item,
                                               actor=HUMAN, roles={"owner"}))
    assert granted.type == "approval.execution_granted"


def test_failing_or_cancelling_the_mission_is_its_owners_or_its_coordinators():
    view = builders.view_of(builders.work_item(state.OPEN))

    for actor, allowed in ((OTHER_OWNER, False), (OTHER_COORDINATOR, False), (HUMAN, True),
                           (COORDINATOR, True)):
        command = builders.command("mission.cancel", {"missionId": MISSION_ID,
                                                      "reason": "budget cut"},
                                   actor=actor, roles={"owner", "coordinator"})
        if allowed:
            assert "mission.cancelled" in [d.type for d in decide(view, command)]
        else:
            with pytest.raises(ProtocolError) as refused:
                decide(view, command)
            assert refused.value.code == "FORBIDDEN"


def test_the_lease_holder_still_reports_its_own_failure():
    item = builders.work_item(state.ACTIVE)
    command = builders.command("work.fail", {"evidence": [evidence(["ac1"])]}, item,
                               roles={"worker"})

    drafts = decide(builders.view_of(item), command)

    assert drafts[-1].type == "work.failed"


@pytest.mark.parametrize("command_type,item_state,actor", [
    ("work.submit", state.ACTIVE, builders.AGENT),
    ("work.fail", state.ACTIVE, builders.AGENT),
    ("work.accept_result", state.SUBMITTED, COORDINATOR)])
def test_evidence_in_a_command_is_its_senders_own(command_type, item_state, actor):
    item = builders.work_item(item_state)
    body = {"evidence": [evidence(["ac1", "ac2"], producer=HUMAN, method="human-review")]}
    if command_type == "work.submit":
        body["contractRevision"] = 1

    with pytest.raises(ProtocolError) as refused:
        decide(builders.view_of(item), builders.command(command_type, body, item, actor=actor))

    assert refused.value.code == "FORBIDDEN"
    assert refused.value.details == {"path": "body.evidence[0].producer"}


def test_an_empty_mission_cannot_be_approved():
    view = builders.view_of(missions=[builders.mission()])
    approve = builders.command("mission.approve", {"missionId": MISSION_ID}, actor=HUMAN,
                               roles={"owner"})

    with pytest.raises(ProtocolError) as refused:
        decide(view, approve)

    assert refused.value.code == "TRANSITION_NOT_PERMITTED"
    assert "no verified WorkItem" in refused.value.message


def test_a_mission_of_cancelled_items_only_cannot_be_approved_but_one_verified_may():
    cancelled = builders.work_item(state.CANCELLED)
    verified = builders.work_item(state.VERIFIED, item_id="wi_2")
    approve = builders.command("mission.approve", {"missionId": MISSION_ID}, actor=HUMAN,
                               roles={"owner"})

    with pytest.raises(ProtocolError):
        decide(builders.view_of(cancelled), approve)
    assert decide(builders.view_of(cancelled, verified), approve)[0].type == "mission.approved"


def create(roles: dict, **body):
    values = {"title": "Q4", "ownerId": HUMAN, "coordinatorId": COORDINATOR, **body}
    command = builders.command("mission.create", values, actor=COORDINATOR,
                               roles={"coordinator"})
    return commands.decide(builders.view_of(), command,
                           builders.context(facts={"roles": roles}))


def test_mission_create_names_members_with_the_roles_they_need():
    members = {HUMAN: ["owner"], COORDINATOR: ["coordinator"], DELEGATE: ["coordinator"]}

    (created,) = create(members, delegates=[DELEGATE])
    assert created.data["delegates"] == [DELEGATE]
    for roles, body, path in (
            ({**members, HUMAN: None}, {}, "body.ownerId"),
            ({**members, HUMAN: ["observer"]}, {}, "body.ownerId"),
            ({**members, COORDINATOR: ["worker"]}, {}, "body.coordinatorId"),
            ({**members, DELEGATE: ["reviewer"]}, {"delegates": [DELEGATE]},
             "body.delegates[0]"),
            ({**members, COORDINATOR: ["coordinator", "owner"]},
             {"ownerId": COORDINATOR}, "body.ownerId")):  # an agent cannot be the owner
        with pytest.raises(ProtocolError) as refused:
            create(roles, **body)
        assert refused.value.code == "VALIDATION_ERROR"
        assert refused.value.details["path"] == path


def test_no_acceptance_once_the_contracts_deadline_has_passed():
    late = builders.work_item(state.OFFERED, contract=contract(deadline=builders.iso(-60)))
    in_time = builders.work_item(state.OFFERED)
    accept = {"contractRevision": 1}

    with pytest.raises(ProtocolError) as refused:
        decide(builders.view_of(late), builders.command("work.accept_offer", accept, late))

    assert refused.value.code == "TRANSITION_NOT_PERMITTED"
    assert refused.value.details == {"reason": "deadline", "deadline": builders.iso(-60)}
    assert decide(builders.view_of(in_time), builders.command("work.accept_offer", accept,
                                                              in_time))
