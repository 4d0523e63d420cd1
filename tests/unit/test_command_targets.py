"""What a command acts on decides whose rules apply (core/commands/targets.py). Each trick
here passed before the command table declared its target: a field the sender adds chose
the Mission that was checked, and an unknown WorkItem passed the check. Pure."""

import pytest

from mission_weave.core.commands import COMMANDS, decide
from mission_weave.core.commands.targets import KINDS
from mission_weave.protocol.errors import ProtocolError
from tests.unit.builders import (
    COORDINATOR,
    HUMAN,
    context,
    evidence,
    mission,
    view_of,
    work_item,
)
from tests.unit.builders import command as build_command
from tests.unit.builders import contract as a_contract

# Mission A is the victim's: coordinated by COORDINATOR, owned by HUMAN. Mission B is the
# sender's own: coordinated by COORD_B, owned by OWNER_B.
A, B = "msn_a", "msn_b"
COORD_B, OWNER_B = "agent:coord-b", "user:bob"


def two_missions(state_a="verified", state_b="open"):
    item_a = work_item(state_a, item_id="wi_a", mission_id=A)
    item_b = work_item(state_b, item_id="wi_b", mission_id=B)
    return view_of(item_a, item_b, missions=[
        mission(A), mission(B, coordinator_id=COORD_B, owner_id=OWNER_B)])


def refusal(view, command) -> ProtocolError:
    before = dict(view.items.items())
    with pytest.raises(ProtocolError) as refused:
        decide(view, command, context())
    assert view.items == before
    return refused.value


def test_every_command_type_declares_what_it_acts_on():
    undeclared = {t: spec.target for t, spec in COMMANDS.items() if spec.target not in KINDS}

    assert undeclared == {}
    assert {spec.target for spec in COMMANDS.values()} == KINDS


# --- a field the sender adds does not pick the Mission ---------------------------------------

@pytest.mark.parametrize("named", ["wi_b", "wi_fresh"])
def test_a_coordinator_of_mission_b_authorizes_nothing_into_mission_a(named):
    command = build_command("work.authorize", {"missionId": A, "contract": a_contract()},
                            actor=COORD_B, roles={"coordinator"}, work_item_id=named)

    error = refusal(two_missions(), command)

    assert error.code == "VALIDATION_ERROR"
    assert error.details["paths"] == ["workItemId", "body.workItemId"]


def test_a_coordinator_of_mission_b_authorizes_nothing_into_mission_a_by_the_body_alone():
    command = build_command("work.authorize", {"missionId": A, "contract": a_contract()},
                            actor=COORD_B, roles={"coordinator"})

    assert refusal(two_missions(), command).code == "FORBIDDEN"


@pytest.mark.parametrize("type_", ["mission.cancel", "mission.fail"])
@pytest.mark.parametrize("named", ["wi_b", "wi_fresh"])
def test_a_coordinator_of_mission_b_ends_not_mission_a(type_, named):
    command = build_command(type_, {"missionId": A, "reason": "mine now"}, actor=COORD_B,
                            roles={"coordinator"}, work_item_id=named)

    error = refusal(two_missions(), command)

    assert error.code == "VALIDATION_ERROR"
    assert error.details == {"path": "workItemId", "paths": ["workItemId", "body.missionId"]}
    assert f"no WorkItem of Mission {A}" in error.message


@pytest.mark.parametrize("type_, body", [
    ("mission.approve", {"missionId": A}),
    ("mission.refuse_approval", {"missionId": A, "reason": "not mine to judge"})])
@pytest.mark.parametrize("named", ["wi_b", "wi_fresh", None])
def test_an_owner_of_mission_b_decides_nothing_for_mission_a(type_, body, named):
    command = build_command(type_, body, actor=OWNER_B, roles={"owner"}, work_item_id=named)

    error = refusal(two_missions(), command)

    assert error.code == ("FORBIDDEN" if named is None else "VALIDATION_ERROR")


def test_an_owner_of_another_mission_does_not_approve_a_child_mission_nor_verify_its_parent():
    parent = work_item("blocked", item_id="wi_parent", mission_id=A,
                       child_mission_id="msn_child")
    child_item = work_item("verified", item_id="wi_child", mission_id="msn_child")
    view = view_of(parent, child_item, work_item("open", item_id="wi_b", mission_id=B),
                   missions=[mission(A), mission("msn_child", parent_work_item_id="wi_parent"),
                             mission(B, coordinator_id=COORD_B, owner_id=OWNER_B)])

    for named in ("wi_b", None):
        command = build_command("mission.approve", {"missionId": "msn_child"}, actor=OWNER_B,
                                roles={"owner"}, work_item_id=named)
        assert refusal(view, command).code in ("VALIDATION_ERROR", "FORBIDDEN")

    [approved, verified] = decide(view, build_command(
        "mission.approve", {"missionId": "msn_child"}, actor=HUMAN, roles={"owner"}), context())
    assert (approved.type, verified.type, verified.work_item_id) == (
        "mission.approved", "work.verified", "wi_parent")


def test_the_missions_own_coordinator_naming_one_of_its_workitems_still_ends_it():
    command = build_command("mission.cancel", {"missionId": A, "reason": "done"},
                            actor=COORDINATOR, roles={"coordinator"}, work_item_id="wi_a")

    drafts = decide(two_missions(state_a="open"), command, context())

    assert drafts[-1].type == "mission.cancelled" and drafts[-1].mission_id == A


# --- an unknown WorkItem is NOT_FOUND, never a pass -------------------------------------------

@pytest.mark.parametrize("type_, body", [
    ("work.cancel", {"reason": "x"}),
    ("work.accept_result", {"evidence": [evidence(["ac1", "ac2"], producer=COORD_B)]}),
    ("work.fail", {"evidence": [evidence(["ac1"], producer=COORD_B)]}),
    ("work.unblock", {"resolution": "x"}),
    ("approval.grant_execution", {})])
def test_a_command_on_a_workitem_the_group_does_not_have_is_not_found(type_, body):
    actor, roles = ((OWNER_B, {"owner"}) if type_.startswith("approval")
                    else (COORD_B, {"coordinator"}))
    command = build_command(type_, body, actor=actor, roles=roles, work_item_id="wi_fresh")

    error = refusal(two_missions(), command)

    assert (error.code, error.details["path"]) == ("NOT_FOUND", "workItemId")


def test_a_body_naming_another_workitem_than_the_envelope_is_refused():
    item = work_item("submitted", item_id="wi_a", mission_id=A)
    view = view_of(item, work_item("open", item_id="wi_b", mission_id=B),
                   missions=[mission(A), mission(B)])
    command = build_command("evidence.record", {
        "evidence": [evidence(["ac1"], "ev-r", producer="agent:rev")], "workItemId": "wi_b"},
        item, actor="agent:rev", roles={"reviewer"})

    error = refusal(view, command)

    assert error.code == "VALIDATION_ERROR"
    assert error.details["paths"] == ["body.workItemId", "workItemId"]


def test_a_command_on_the_group_names_no_workitem():
    command = build_command("mission.create", {"title": "t", "ownerId": HUMAN,
                                               "coordinatorId": COORDINATOR},
                            actor=COORDINATOR, roles={"coordinator"}, work_item_id="wi_a")

    error = refusal(two_missions(), command)

    assert (error.code, error.details["path"]) == ("VALIDATION_ERROR", "workItemId")


# --- a checkpoint's state artifact is one its Mission may cite --------------------------------

@pytest.mark.parametrize("type_, body, path", [
    ("work.checkpoint", lambda name: {"progress": {"phase": "p"}, "stateArtifact": name},
     "body.stateArtifact"),
    ("work.block", lambda name: {"checkpoint": {"progress": {"phase": "p"},
                                                "stateArtifact": name},
                                 "requiredResolution": "x"},
     "body.checkpoint.stateArtifact")])
def test_a_state_artifact_is_this_missions(type_, body, path):
    item = work_item("active", item_id="wi_a", mission_id=A)
    view = two_missions()
    view.items["wi_a"] = item
    foreign = "sha256:" + "f" * 64
    view.artifacts[foreign] = {"hash": foreign, "origin": "published", "manifest": {
        "missionId": B, "workItemId": "wi_b", "groupId": "grp_1", "classification": "internal",
        "sources": []}}

    unknown = refusal(view, build_command(type_, body("sha256:" + "0" * 64), item))
    other = refusal(view, build_command(type_, body(foreign), item))

    assert (unknown.code, unknown.details["path"]) == ("NOT_FOUND", path)
    assert (other.code, other.details["path"]) == ("VALIDATION_ERROR", path)
