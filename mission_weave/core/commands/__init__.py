"""decide(view, command, context) -> [Draft]: one pure function per command type.

Each function checks the command against the current state (the §10.2 table,
fencing, dependencies, contract) and returns the events to append, or raises a
ProtocolError. Nothing here reads a clock, a database or a setting: the shell
passes them in `Context`. `evolve` (state.py) turns the events into state.

By concept: base.py (the command, context, drafts and shared checks), authority.py
(who may decide for a Mission), missions.py (Missions and planning), offers.py
(placement and acceptance), execution.py (work under a lease). This module holds the
Group role each command needs, and the dispatch table.
"""

from mission_weave.core import manifests
from mission_weave.protocol.errors import ProtocolError
from mission_weave.protocol.idempotency import idempotency_key  # noqa: F401 - public helper

from ..ranking import Candidate  # noqa: F401 - the facts of an offer candidate
from ..schemas import check_body
from ..state import View
from . import artifacts, authority, execution, missions, offers, review, schedule, usage
from .base import Command, Context, Draft, Policy, derive_id  # noqa: F401 - the public API
from .execution import revoke_for_session  # noqa: F401

HUMAN_ONLY = frozenset({"approval.grant_execution", "approval.refuse_execution",
                        "mission.approve", "mission.refuse_approval",
                        "artifact.approve_forwarding"})
ANY_ROLE = frozenset({"coordinator", "worker", "reviewer", "owner", "observer"})

# Who may send each command (PROTOCOL §2, "who"). Finer rules (the addressed worker,
# the lease holder, the owner of the item) are checked by the command itself.
ROLES = {
    "mission.create": {"coordinator", "owner"},
    "mission.create_child": {"coordinator"},
    "mission.approve": {"owner"},
    "mission.refuse_approval": {"owner"},
    "mission.fail": {"coordinator", "owner"},
    "mission.cancel": {"coordinator", "owner"},
    "work.propose": ANY_ROLE,
    "work.authorize": {"coordinator"},
    "work.revise_contract": {"coordinator"},
    "work.offer": {"coordinator"},
    "work.decline_offer": {"worker"},
    "work.accept_offer": {"worker"},
    "approval.grant_execution": {"owner"},
    "approval.refuse_execution": {"owner"},
    "work.start": {"worker"},
    "lease.renew": {"worker"},
    "work.progress": {"worker"},
    "work.checkpoint": {"worker"},
    "work.block": {"worker"},
    "work.unblock": {"coordinator"},
    "work.submit": {"worker"},
    "work.accept_result": {"coordinator"},
    "evidence.record": {"reviewer", "coordinator"},
    "work.fail": {"coordinator", "worker"},
    "work.cancel": {"coordinator"},
    "work.request_preemption": {"coordinator"},
    "conversation.post": ANY_ROLE,
    "artifact.publish": {"coordinator", "worker"},
    "context.publish": ANY_ROLE,
    "artifact.approve_forwarding": {"owner"},
    "artifact.forward": {"coordinator"},
    "capability.rotate": {"worker"},
    "capability.narrow": {"worker"},
    "usage.record": {"worker"},
    "schedule.disclose": {"worker"},
}
COMMAND_TYPES = tuple(ROLES)


def decide(view: View, command: Command, context: Context) -> list:
    if command.type not in ROLES:
        raise ProtocolError("VALIDATION_ERROR", f"unknown command type {command.type!r}",
                            {"knownTypes": sorted(ROLES)})
    _check_actor(command)
    check_body(command.type, command.body)
    authority.check(view, command)  # the Mission's owner, coordinator and delegates
    authority.check_producers(command)  # the Evidence a command carries is the sender's
    drafts = HANDLERS[command.type](view, command, context)
    if command.offline is not None:
        drafts = usage.reconcile(view, command, context, drafts)
    # §13.2: Evidence cites artifacts published in this Group; checked after the
    # command's own rules, so that a fenced owner still hears STALE_OWNERSHIP first.
    manifests.require_cited_evidence(view.artifacts, command.body)
    return drafts


def _check_actor(command: Command) -> None:
    if command.type in HUMAN_ONLY and not command.actor.startswith("user:"):
        raise ProtocolError("FORBIDDEN", f"{command.type} is given by a human MissionOwner")
    allowed = ROLES[command.type]
    if not command.roles & allowed:
        raise ProtocolError("FORBIDDEN",
                            f"{command.type} needs one of the roles {', '.join(sorted(allowed))}",
                            {"roles": sorted(command.roles), "needs": sorted(allowed)})


HANDLERS = {
    "mission.create": missions.mission_create,
    "mission.create_child": missions.mission_create_child,
    "mission.approve": missions.mission_approve,
    "mission.refuse_approval": missions.mission_refuse_approval,
    "mission.fail": missions.mission_end("mission.failed", "work.failed", child_failed=True),
    "mission.cancel": missions.mission_end("mission.cancelled", "work.cancelled",
                                           child_failed=True),
    "work.propose": missions.work_propose,
    "work.authorize": missions.work_authorize,
    "work.revise_contract": missions.work_revise_contract,
    "work.offer": offers.work_offer,
    "work.decline_offer": offers.work_decline_offer,
    "work.accept_offer": offers.work_accept_offer,
    "approval.grant_execution": execution.approval_grant_execution,
    "approval.refuse_execution": execution.approval_refuse_execution,
    "work.start": execution.work_start,
    "lease.renew": execution.lease_renew,
    "work.progress": execution.work_progress,
    "work.checkpoint": execution.work_checkpoint,
    "work.block": execution.work_block,
    "work.unblock": execution.work_unblock,
    "work.submit": execution.work_submit,
    "work.accept_result": execution.work_accept_result,
    "evidence.record": review.evidence_record,
    "work.fail": execution.work_fail,
    "work.cancel": execution.work_cancel,
    "work.request_preemption": execution.work_request_preemption,
    "conversation.post": execution.conversation_post,
    "artifact.publish": artifacts.artifact_publish,
    "context.publish": artifacts.context_publish,
    "artifact.approve_forwarding": artifacts.artifact_approve_forwarding,
    "artifact.forward": artifacts.artifact_forward,
    "capability.rotate": execution.reissue_token("capability.rotated"),
    "capability.narrow": execution.reissue_token("capability.narrowed"),
    "usage.record": usage.usage_record,
    "schedule.disclose": schedule.schedule_disclose,
}
assert set(HANDLERS) == set(ROLES)
