"""Who may decide for a Mission (§10.2, PROTOCOL §2 "who").

A Group role is necessary (ROLES), not sufficient: a Mission's `ownerId` and
`coordinatorId` are authorization. The MissionOwner's commands come from that Mission's
owner. The Coordinator's commands on a Mission and its WorkItems come from its
coordinator, or from a principal the Mission names in `delegates` (§10.2 "Coordinator or
scoped delegate"). Failing or cancelling a whole Mission is either's. Anyone else with
the role in the Group is FORBIDDEN, with a message that names who may.

Some commands are the Coordinator's when a coordinator sends them and another role's own
otherwise: a worker's failure report or manifest under its lease, a reviewer's Evidence.
Sent on the strength of the coordinator role alone, they are the Mission's Coordinator's
too, so that a coordinator of one Mission cannot fail, publish into or review the work
of another.
"""

from mission_weave.protocol.errors import ProtocolError

from ..state import Mission
from .base import Command

OWNER = frozenset({"mission.approve", "mission.refuse_approval", "approval.grant_execution",
                   "approval.refuse_execution"})
COORDINATOR = frozenset({
    "work.authorize", "work.revise_contract", "work.offer", "work.unblock",
    "work.accept_result", "work.fail", "work.cancel", "work.request_preemption",
    "mission.create_child"})
OWNER_OR_COORDINATOR = frozenset({"mission.fail", "mission.cancel"})
# command -> the role that sends it on its own account (the handler checks that part).
ON_OWN_ACCOUNT = {"work.fail": "worker", "artifact.publish": "worker",
                  "evidence.record": "reviewer"}


def check(command: Command) -> None:
    """FORBIDDEN unless the sender may decide this for the Mission of the object the
    command acts on (`command.target`, resolved by decide: never a field it may choose)."""
    if command.type not in OWNER | COORDINATOR | OWNER_OR_COORDINATOR | set(ON_OWN_ACCOUNT):
        return
    assert command.target is not None, "decide resolves the target first"
    mission = command.target.mission
    if mission is None or command.actor == "system":
        return
    own_role = ON_OWN_ACCOUNT.get(command.type)
    if own_role is not None:
        allowed = coordinators(mission)
        if command.actor in allowed or own_role in command.roles:
            return  # the Coordinator's, or e.g. a worker's report, which its handler fences
        raise ProtocolError(
            "FORBIDDEN", f"{command.type} in Mission {mission.id} is for its Coordinator (or "
            f"a delegate it names): {', '.join(allowed)}, or a {own_role} on its own "
            f"account; you are {command.actor}", {"missionId": mission.id, "allowed": allowed})
    if command.type in OWNER:
        allowed, whom = [mission.owner_id], "its MissionOwner"
    elif command.type in COORDINATOR:
        allowed, whom = coordinators(mission), "its Coordinator (or a delegate it names)"
    else:
        allowed = [mission.owner_id, *coordinators(mission)]
        whom = "its MissionOwner or Coordinator"
    if command.actor not in allowed:
        raise ProtocolError(
            "FORBIDDEN", f"{command.type} in Mission {mission.id} is for {whom}: "
            f"{', '.join(allowed)}; you are {command.actor}",
            {"missionId": mission.id, "allowed": allowed})


# The commands whose body carries Evidence in the sender's own name. Reviewer Evidence
# by anyone else arrives only through evidence.record, which checks the same.
OWN_EVIDENCE = frozenset({"work.submit", "work.accept_result", "work.fail"})


def check_producers(command: Command) -> None:
    """FORBIDDEN when an Evidence item names another producer than the sender: a worker
    cannot submit Evidence as `user:alice` with `method: human-review`."""
    if command.type not in OWN_EVIDENCE:
        return
    for index, record in enumerate(command.body.get("evidence", [])):
        if record["producer"] != command.actor:
            raise ProtocolError(
                "FORBIDDEN", f"body.evidence[{index}].producer is {record['producer']}, but "
                f"you are {command.actor}: a command carries only its sender's own Evidence "
                "(reviewers record theirs with evidence.record)",
                {"path": f"body.evidence[{index}].producer"})


def coordinators(mission: Mission) -> list[str]:
    """The Mission's coordinator and the delegates it names."""
    return [mission.coordinator_id, *(d for d in mission.delegates
                                      if d != mission.coordinator_id)]

