"""Execution under a lease (§11.3, §11.4): the start gate, start, renewal,
capability tokens, progress, checkpoint, block, submission, review, failure,
cancellation, preemption, the Conversation, and session replacement."""

from collections.abc import Sequence
from datetime import datetime, timedelta

from mission_weave.protocol.errors import ProtocolError
from mission_weave.protocol.idempotency import attempt_operation_id, idempotency_key
from mission_weave.protocol.timefmt import format_time

from .. import capabilities, fencing, retries
from .. import evidence_review as evaluation
from ..json_types import JsonObject
from ..state import (
    ACTIVE,
    QUEUED,
    View,
    WorkItem,
)
from . import authority, review
from .base import (
    Command,
    Context,
    Draft,
    Handler,
    Policy,
    active_mission,
    after,
    bounded_seconds,
    derive_id,
    held_item,
    item_draft,
    lease_of,
    reconciled_item,
    release,
    require_dependencies,
    require_lease,
    target_item,
)
from .missions import end_child_missions


def _awaiting_execution_approval(view: View, command: Command) -> WorkItem:
    """The target WorkItem, whose contract asks for an execution approval not yet given."""
    item = target_item(view, command)
    if not item.contract["risk"]["requiresExecutionApproval"]:
        raise ProtocolError("TRANSITION_NOT_PERMITTED",
                            f"the contract of {item.id} does not require execution approval")
    if item.execution_approved:
        raise ProtocolError("TRANSITION_NOT_PERMITTED",
                            f"execution of {item.id} is already approved for this revision")
    return item


def approval_grant_execution(view: View, command: Command, context: Context) -> list[Draft]:
    item = _awaiting_execution_approval(view, command)
    return [item_draft(item, "approval.execution_granted", {
        "by": command.actor, "contractRevision": item.contract_revision,
        "comment": command.body.get("comment")})]


def approval_refuse_execution(view: View, command: Command, context: Context) -> list[Draft]:
    """The MissionOwner will not let this revision run (recorded, for the Coordinator,
    who may revise the contract or cancel); the start gate stays shut, and a later
    grant may still open it."""
    item = _awaiting_execution_approval(view, command)
    return [item_draft(item, "approval.execution_refused", {
        "by": command.actor, "contractRevision": item.contract_revision,
        "reason": command.body["reason"]})]


def _capability_token(lease_id: str, scopes: capabilities.Scopes, expires_at: datetime,
                      salt: str) -> JsonObject:
    return capabilities.descriptor(derive_id("cap", lease_id, salt), lease_id, scopes, expires_at)


def work_start(view: View, command: Command, context: Context) -> list[Draft]:
    item = target_item(view, command)
    active_mission(view, item.mission_id)
    fencing.check_ownership(item, command.agent_id, command.ownership_epoch, context.now)
    require_dependencies(view, item)
    if item.accepted_revision != item.contract_revision:
        raise ProtocolError(
            "CONTRACT_REVISION_MISMATCH",
            f"the contract was revised to {item.contract_revision}; accept it before starting",
            {"contractRevision": item.contract_revision})
    if item.contract["risk"]["requiresExecutionApproval"] and not item.execution_approved:
        raise ProtocolError("APPROVAL_REQUIRED",
                            f"WorkItem {item.id} needs approval.grant_execution by a MissionOwner")
    policy = context.policy
    seconds = bounded_seconds(command.body.get("leaseSeconds"), policy.default_lease_seconds,
                              policy.max_lease_seconds, "leaseSeconds")
    lease_id = derive_id("lease", command.id)
    expires_at = context.now + timedelta(seconds=seconds)
    # §11.4: an attempt is one Ownership Epoch's execution; starting again in the same
    # epoch (after a checkpoint, block or session replacement) resumes it, same key.
    resumed = item.lease is not None and item.lease.ownership_epoch == item.ownership_epoch
    attempt = item.attempts if resumed else item.attempts + 1
    return [item_draft(item, "work.started", {
        "leaseId": lease_id, "expiresAt": format_time(expires_at),
        "ownershipEpoch": item.ownership_epoch,
        "agentId": command.agent_id, "sessionEpoch": command.session_epoch,
        "attempt": attempt, "resumed": resumed,
        "idempotencyKey": idempotency_key(item.mission_id, item.id, item.ownership_epoch,
                                          attempt_operation_id(attempt)),
        "capabilityToken": _capability_token(
            lease_id, capabilities.contract_scopes(item.contract), expires_at, command.id)})]


def lease_renew(view: View, command: Command, context: Context) -> list[Draft]:
    item = target_item(view, command, fenced_at=context.now)
    policy = context.policy
    seconds = bounded_seconds(command.body.get("leaseSeconds"), policy.default_lease_seconds,
                              policy.max_lease_seconds, "leaseSeconds")
    expires_at = context.now + timedelta(seconds=seconds)
    # The renewal's token keeps the held scopes (a narrowing is never undone by renewing);
    # earlier tokens stay valid until their own, earlier, lease boundary.
    return [item_draft(item, "lease.renewed", {
        "leaseId": lease_of(item).id, "expiresAt": format_time(expires_at),
        "ownershipEpoch": item.ownership_epoch,
        "capabilityToken": _capability_token(lease_of(item).id, capabilities.held_scopes(item),
                                             expires_at, command.id)})]


def reissue_token(event_type: str) -> Handler:
    """capability.rotate / capability.narrow: the lease holder gets a new token for the
    same lease, with the held scopes or a subset of them, and every token it held for the
    lease is revoked (§11.3: rotatable and narrowable while the lease lives)."""
    def handle(view: View, command: Command, context: Context) -> list[Draft]:
        item = target_item(view, command, fenced_at=context.now)
        held = capabilities.held_scopes(item)
        requested = command.body.get("scopes")
        scopes = capabilities.narrowed(held, requested) if requested is not None else held
        lease = lease_of(item)
        expires_at = capabilities.expiry(lease.expires_at, context.now,
                                         command.body.get("expiresInSeconds"))
        return [item_draft(item, event_type, {
            "leaseId": lease.id, "ownershipEpoch": item.ownership_epoch,
            "revokedTokenIds": capabilities.unrevoked_ids(item),
            "capabilityToken": _capability_token(lease.id, scopes, expires_at, command.id)})]
    return handle


def work_progress(view: View, command: Command, context: Context) -> list[Draft]:
    item = held_item(view, command, context)
    return [item_draft(item, "work.progress_reported",
                       {"leaseId": lease_of(item).id, "progress": command.body})]


def work_checkpoint(view: View, command: Command, context: Context) -> list[Draft]:
    item = held_item(view, command, context)
    return [item_draft(item, "work.checkpointed", {
        "leaseId": lease_of(item).id, "progress": command.body["progress"],
        "stateArtifact": command.body.get("stateArtifact"),
        "startBy": after(context.now, context.policy.start_window_seconds)})]


def work_block(view: View, command: Command, context: Context) -> list[Draft]:
    item = held_item(view, command, context)
    policy = context.policy
    seconds = bounded_seconds(command.body.get("blockedLeaseSeconds"),
                              policy.default_blocked_lease_seconds,
                              policy.max_blocked_lease_seconds, "blockedLeaseSeconds")
    checkpoint = command.body["checkpoint"]
    # The checkpoint is a work.checkpoint body (PROTOCOL §2), carried whole: its
    # stateArtifact, like a work.checkpoint's, is the point to resume from.
    return [item_draft(item, "work.blocked", {
        "leaseId": lease_of(item).id,
        "checkpoint": {"progress": checkpoint["progress"],
                       "stateArtifact": checkpoint.get("stateArtifact")},
        "requiredResolution": command.body["requiredResolution"],
        "blockedUntil": after(context.now, seconds)})]


def work_unblock(view: View, command: Command, context: Context) -> list[Draft]:
    item = target_item(view, command)
    active_mission(view, item.mission_id)
    if item.child_mission_id:
        raise ProtocolError("TRANSITION_NOT_PERMITTED",
                            f"WorkItem {item.id} waits on child Mission {item.child_mission_id}",
                            {"childMissionId": item.child_mission_id})
    data = {"resolution": command.body["resolution"]}
    if fencing.owner_is_live(item, context.now):
        data.update(next=QUEUED, startBy=after(context.now, context.policy.start_window_seconds))
    else:
        data.update(next="open", expiredOwner=item.owner)
    return [item_draft(item, "work.unblocked", data)]


def work_submit(view: View, command: Command, context: Context) -> list[Draft]:
    item = target_item(view, command, fenced_at=context.now)
    body = command.body
    if body["contractRevision"] != item.contract_revision:
        raise ProtocolError(
            "CONTRACT_REVISION_MISMATCH",
            f"the contract is at revision {item.contract_revision}, not {body['contractRevision']}",
            {"contractRevision": item.contract_revision})
    _check_evidence_covers(item, body["evidence"])
    _check_deliverables(view, item, body)
    # Who submitted under which Ownership Epoch: its Evidence is never reviewed by it.
    lease = lease_of(item)
    return [item_draft(item, "work.submitted", {
        "leaseId": lease.id, "contractRevision": item.contract_revision,
        "artifacts": body.get("artifacts", []), "evidence": body["evidence"],
        "agentId": lease.agent_id, "ownershipEpoch": lease.ownership_epoch})]


def _check_deliverables(view: View, item: WorkItem, body: JsonObject) -> None:
    """§13.1, §13.2: a deliverable is an artifact published in this Group for this
    WorkItem (a signed manifest, artifact.publish, naming it). Whatever the submission
    offers as one is held to that: its `artifacts`, and the artifacts of its Evidence
    with subject `deliverable:<id>`. Every deliverable of the contract has one: its own
    Evidence cites it, or, with one deliverable, the submission's artifacts are it."""
    offered = [(name, f"body.artifacts[{index}]")
               for index, name in enumerate(body.get("artifacts", []))]
    offered += [(name, f"body.evidence[{index}].artifacts[{position}]")
                for index, record in enumerate(body["evidence"])
                if evaluation.is_deliverable_evidence(record)
                for position, name in enumerate(record.get("artifacts", []))]
    for name, path in offered:
        _check_deliverable(view.artifacts.get(name), name, path, item)
    delivered = evaluation.deliverable_artifacts(item.contract, body)
    missing = [d for d, hashes in delivered.items() if not hashes]
    if missing:
        raise ProtocolError(
            "EVIDENCE_INCOMPLETE", f"no published artifact delivers {missing}: publish each "
            "and cite it in body.artifacts (or in Evidence with subject deliverable:<id>)",
            {"missingDeliverables": missing})


def _check_deliverable(record: JsonObject | None, name: str, path: str, item: WorkItem) -> None:
    if record is None:
        raise ProtocolError("NOT_FOUND", f"{path}: no artifact {name} is published in this "
                            "Group: upload the bytes, then artifact.publish their manifest",
                            {"path": path, "hash": name})
    if record["origin"] != "published":
        whose = f"was received from Group {record['receivedFrom']['groupId']}"
    elif record["manifest"]["workItemId"] is None:
        whose = f"is an artifact of Mission {record['manifest']['missionId']} as a whole"
    elif record["manifest"]["workItemId"] != item.id:
        whose = f"was published for WorkItem {record['manifest']['workItemId']}"
    else:
        return
    raise ProtocolError("VALIDATION_ERROR",
                        f"{path}: {name} {whose}, not for {item.id}: a deliverable is an artifact "
                        f"published for this WorkItem (artifact.publish with workItemId "
                        f"{item.id}); cite other artifacts in Evidence whose subject is not "
                        "a deliverable", {"path": path, "hash": name})


def _check_evidence_covers(item: WorkItem, evidence: Sequence[JsonObject]) -> None:
    criteria = item.criteria_ids
    cited = {c for record in evidence for c in record["criteria"]}
    unknown = sorted(cited - set(criteria))
    if unknown:
        raise ProtocolError("VALIDATION_ERROR",
                            f"Evidence cites criteria the contract does not have: {unknown}",
                            {"unknownCriteria": unknown})
    missing = [c for c in criteria if c not in cited]
    if missing:
        raise ProtocolError("EVIDENCE_INCOMPLETE",
                            f"no Evidence for acceptance criteria {missing}",
                            {"missingCriteria": missing})


def work_accept_result(view: View, command: Command, context: Context) -> list[Draft]:
    item = target_item(view, command)
    active_mission(view, item.mission_id)
    review.check_not_own_work(item, command)
    evidence = command.body.get("evidence", [])
    # §13.2: decided on all the Evidence recorded before it: the review is evaluated
    # again here (an evaluation that changed is appended first, so that the log holds
    # what was decided on), and the verdict is recorded with the acceptance; criteria
    # that had not passed need the Coordinator's own Evidence (review.acceptance).
    drafts = review.reevaluation(item)
    return [*drafts, item_draft(item, "work.verified", {
        "evidence": evidence, "by": command.actor,
        "review": review.acceptance(item, evidence)})]


def work_fail(view: View, command: Command, context: Context) -> list[Draft]:
    item = target_item(view, command)
    coordinators = authority.coordinators(view.missions[item.mission_id])
    if command.actor not in coordinators:
        # A worker may report failure only of the work it holds the lease for.
        if item.state != ACTIVE:
            raise ProtocolError("FORBIDDEN", f"only the lease holder, or the Mission's "
                                f"Coordinator or a delegate ({', '.join(coordinators)}), "
                                f"may fail it; you are {command.actor}",
                                {"missionId": item.mission_id, "allowed": coordinators})
        require_lease(item, command, context.now)
    reason = command.body.get("reason") or "failed"
    permanent = command.body.get("permanent", False)
    # §11.4: a retry may follow within the contract's attempt, backoff, cost and deadline
    # budgets; past them, or for a permanent failure, this is the final work.failed.
    outcome = retries.after_failure(item, permanent, context.now)
    # Its child Missions end with it, deepest first (§10.2: terminal propagates down).
    drafts = end_child_missions(view, item, "work.failed", command, context)
    drafts += release(item, context, "failed")
    return [*drafts, item_draft(item, "work.failed", {
        "evidence": command.body["evidence"], "by": command.actor, "reason": reason,
        "permanent": permanent, "attempt": item.attempts,
        "retryAt": format_time(outcome.retry_at) if outcome.retry_at else None,
        "exhausted": outcome.exhausted, "exhaustedBy": outcome.exhausted_by})]


def work_cancel(view: View, command: Command, context: Context) -> list[Draft]:
    item = target_item(view, command)
    reason = command.body.get("reason") or "cancelled"
    drafts = end_child_missions(view, item, "work.cancelled", command, context)
    return drafts + release(item, context, "cancelled") + [
        item_draft(item, "work.cancelled", {"reason": reason, "by": command.actor})]


def work_request_preemption(view: View, command: Command, context: Context) -> list[Draft]:
    item = target_item(view, command)
    if not fencing.owner_is_live(item, context.now):
        raise ProtocolError("TRANSITION_NOT_PERMITTED",
                            f"WorkItem {item.id} has no live lease to preempt")
    lease = lease_of(item)
    return [item_draft(item, "work.preemption_requested", {
        "leaseId": lease.id, "agentId": lease.agent_id,
        "reason": command.body.get("reason")})]


def conversation_post(view: View, command: Command, context: Context) -> list[Draft]:
    # A message buffered offline is a report of the work under its lease (§11.5).
    item = (target_item(view, command) if command.offline is None
            else reconciled_item(view, command, context))
    body = command.body
    message_id = body.get("messageId") or derive_id("msg", command.id)
    if body["kind"] == "ambiguity" and not command.roles - {"observer"}:
        # An ambiguity blocks acceptance: it comes from someone with a part in the work.
        raise ProtocolError("FORBIDDEN", "an observer posts messages; raising an ambiguity, "
                            "which blocks acceptance, takes another role")
    if body["kind"] == "resolution":
        if "coordinator" not in command.roles:
            raise ProtocolError("FORBIDDEN", "a coordinator resolves an ambiguity")
        if body.get("resolves") not in item.open_ambiguities:
            raise ProtocolError("VALIDATION_ERROR",
                                f"body.resolves must name an open ambiguity of {item.id}",
                                {"path": "body.resolves",
                                 "openAmbiguities": list(item.open_ambiguities)})
    data = {"messageId": message_id, "kind": body["kind"], "text": body["text"],
            "author": command.actor, "resolves": body.get("resolves")}
    if body["kind"] == "resolution":
        # §10.1: prose answers the ambiguity but does not clear it; a corrected contract
        # (work.revise_contract) or a replacement WorkItem does. Said in the event, as
        # resolution messages of older logs did clear it (evolve.py reads both).
        data["cleared"] = False
    return [item_draft(item, "conversation.message_posted", data)]


def revoke_for_session(view: View, agent_id: str, now: datetime,
                       policy: Policy) -> list[Draft]:
    """A replacement session revokes the agent's open leases; each WorkItem returns to
    `queued` under the same owner before the new runtime may start it (§11.3).

    A lease already past its expiry is not handed back: it timed out, and the session gets
    what the sweeper appends for it at `now` (sweep.decide): `lease.expired` (timeout) and,
    under `autoDispatch`, the timed-out attempt's end (the owner fenced, `work.failed` with
    its retry time or exhausted). That decision needs the item's Mission: without it in
    the view, nothing is appended for such a lease, and the sweeper, which reads the
    Mission, closes it (the lease stays unusable meanwhile: it is past its expiry)."""
    # Imported here: sweep and dispatch import this package.
    from .. import dispatch, sweep
    from .base import Context

    start_by = after(now, policy.start_window_seconds)
    context = Context(now=now, policy=policy)
    drafts = []
    for item in view.items.values():
        lease = item.live_lease
        if item.state != ACTIVE or not lease or lease.agent_id != agent_id:
            continue
        if now >= lease.expires_at:
            if item.mission_id in view.missions:
                drafts += sweep.decide(view, context, dispatch.redispatch, [item.id])
            continue
        # `reconnection`: what the Agent buffered offline before now may still be
        # reconciled against this lease (§11.5); no other revocation allows that.
        drafts.append(item_draft(item, "lease.revoked", {
            "leaseId": lease.id, "reason": "session replaced", "reconnection": True,
            "returnTo": QUEUED, "startBy": start_by}))
    return drafts
