"""decide(view, command, context) -> [Draft]: one pure function per command type.

Each function checks the command against the current state (the §10.2 table,
fencing, dependencies, contract) and returns the events to append, or raises a
ProtocolError. Nothing here reads a clock, a database or a setting: the shell
passes them in `Context`. `evolve` (evolve.py) turns the events into state.

By concept: base.py (the command, context, drafts and shared checks), authority.py
(who may decide for a Mission), targets.py (what a command acts on), missions.py
(Missions and planning), offers.py (placement and acceptance), execution.py (work under
a lease). This module holds the command table: per type, the Group roles that may send
it, what it acts on, and its decision.
"""

from collections.abc import Iterable
from dataclasses import dataclass, replace

from mission_weave.core import manifests
from mission_weave.protocol.errors import ProtocolError
from mission_weave.protocol.idempotency import idempotency_key  # noqa: F401 - public helper

from ..ranking import Candidate  # noqa: F401 - the facts of an offer candidate
from ..schemas import check_body
from ..state import View
from . import artifacts, authority, execution, missions, offers, review, schedule, targets, usage
from .base import Command, Context, Draft, Handler, Policy, derive_id  # noqa: F401 - the public API
from .execution import revoke_for_session  # noqa: F401
from .targets import ARTIFACT, GROUP, ITEM, MANIFEST, MISSION, NEW_ITEM, PACKAGE

HUMAN_ONLY = frozenset({"approval.grant_execution", "approval.refuse_execution",
                        "mission.approve", "mission.refuse_approval",
                        "artifact.approve_forwarding"})
ANY_ROLE = frozenset({"coordinator", "worker", "reviewer", "owner", "observer"})


@dataclass(frozen=True)
class Spec:
    """A command type: the Group roles that may send it (PROTOCOL §2, "who"; the finer
    rules, the addressed worker, the lease holder, the Mission's owner and coordinator,
    are checked on the target), what it acts on (targets.py) and its decision."""

    roles: frozenset[str]
    target: str
    handle: Handler


def _spec(roles: Iterable[str], target: str, handle: Handler) -> Spec:
    return Spec(frozenset(roles), target, handle)


WORKER, COORDINATOR, OWNER = {"worker"}, {"coordinator"}, {"owner"}
COMMANDS = {
    "mission.create": _spec(COORDINATOR | OWNER, GROUP, missions.mission_create),
    "mission.create_child": _spec(COORDINATOR, ITEM, missions.mission_create_child),
    "mission.approve": _spec(OWNER, MISSION, missions.mission_approve),
    "mission.refuse_approval": _spec(OWNER, MISSION, missions.mission_refuse_approval),
    "mission.fail": _spec(COORDINATOR | OWNER, MISSION, missions.mission_end(
        "mission.failed", "work.failed", child_failed=True)),
    "mission.cancel": _spec(COORDINATOR | OWNER, MISSION, missions.mission_end(
        "mission.cancelled", "work.cancelled", child_failed=True)),
    "work.propose": _spec(ANY_ROLE, MISSION, missions.work_propose),
    "work.authorize": _spec(COORDINATOR, NEW_ITEM, missions.work_authorize),
    "work.revise_contract": _spec(COORDINATOR, ITEM, missions.work_revise_contract),
    "work.offer": _spec(COORDINATOR, ITEM, offers.work_offer),
    "work.decline_offer": _spec(WORKER, ITEM, offers.work_decline_offer),
    "work.accept_offer": _spec(WORKER, ITEM, offers.work_accept_offer),
    "approval.grant_execution": _spec(OWNER, ITEM, execution.approval_grant_execution),
    "approval.refuse_execution": _spec(OWNER, ITEM, execution.approval_refuse_execution),
    "work.start": _spec(WORKER, ITEM, execution.work_start),
    "lease.renew": _spec(WORKER, ITEM, execution.lease_renew),
    "work.progress": _spec(WORKER, ITEM, execution.work_progress),
    "work.checkpoint": _spec(WORKER, ITEM, execution.work_checkpoint),
    "work.block": _spec(WORKER, ITEM, execution.work_block),
    "work.unblock": _spec(COORDINATOR, ITEM, execution.work_unblock),
    "work.submit": _spec(WORKER, ITEM, execution.work_submit),
    "work.accept_result": _spec(COORDINATOR, ITEM, execution.work_accept_result),
    "evidence.record": _spec({"reviewer", "coordinator"}, ITEM, review.evidence_record),
    "work.fail": _spec(COORDINATOR | WORKER, ITEM, execution.work_fail),
    "work.cancel": _spec(COORDINATOR, ITEM, execution.work_cancel),
    "work.request_preemption": _spec(COORDINATOR, ITEM, execution.work_request_preemption),
    "conversation.post": _spec(ANY_ROLE, ITEM, execution.conversation_post),
    "artifact.publish": _spec(COORDINATOR | WORKER, MANIFEST, artifacts.artifact_publish),
    "context.publish": _spec(ANY_ROLE, PACKAGE, artifacts.context_publish),
    "artifact.approve_forwarding": _spec(OWNER, ARTIFACT, artifacts.artifact_approve_forwarding),
    "artifact.forward": _spec(COORDINATOR, ARTIFACT, artifacts.artifact_forward),
    "capability.rotate": _spec(WORKER, ITEM, execution.reissue_token("capability.rotated")),
    "capability.narrow": _spec(WORKER, ITEM, execution.reissue_token("capability.narrowed")),
    "usage.record": _spec(WORKER, ITEM, usage.usage_record),
    "schedule.disclose": _spec(WORKER, ITEM, schedule.schedule_disclose),
}
ROLES = {type_: spec.roles for type_, spec in COMMANDS.items()}
COMMAND_TYPES = tuple(ROLES)


def decide(view: View, command: Command, context: Context) -> list[Draft]:
    spec = COMMANDS.get(command.type)
    if spec is None:
        raise ProtocolError("VALIDATION_ERROR", f"unknown command type {command.type!r}",
                            {"knownTypes": sorted(ROLES)})
    _check_actor(command)
    check_body(command.type, command.body)
    # Resolved once: the authority check, the handler and its events act on this object.
    command = replace(command, target=targets.resolve(spec.target, view, command))
    authority.check(command)  # the Mission's owner, coordinator and delegates
    authority.check_producers(command)  # the Evidence a command carries is the sender's
    drafts = spec.handle(view, command, context)
    if command.offline is not None:
        drafts = usage.reconcile(view, command, context, drafts)
    # §13.2, §13.3: Evidence and state artifacts cite this Mission's artifacts; checked
    # after the command's own rules, so that a fenced owner still hears STALE_OWNERSHIP first.
    manifests.require_cited(view, command)
    return drafts


def _check_actor(command: Command) -> None:
    if command.type in HUMAN_ONLY and not command.actor.startswith("user:"):
        raise ProtocolError("FORBIDDEN", f"{command.type} is given by a human MissionOwner")
    allowed = ROLES[command.type]
    if not command.roles & allowed:
        raise ProtocolError("FORBIDDEN",
                            f"{command.type} needs one of the roles {', '.join(sorted(allowed))}",
                            {"roles": sorted(command.roles), "needs": sorted(allowed)})


