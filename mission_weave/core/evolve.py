"""`evolve`: how each event changes a Group's projected state (state.py), one pure
function per event type. The live tables hold exactly what `evolve` produces, and
`mw_verify` replays the log through the same functions.
No Django here, no clock: an event's own time is the only time used."""

from collections.abc import Callable, Collection
from datetime import datetime
from typing import Any

from mission_weave.core import records as artifact_records
from mission_weave.protocol.timefmt import format_time, parse_time

from .json_types import JsonObject
from .state import (
    ACTIVE,
    BLOCKED,
    CANCELLED,
    FAILED,
    MISSION_APPROVED,
    MISSION_CANCELLED,
    MISSION_FAILED,
    OFFERED,
    QUEUED,
    SUBMITTED,
    USAGE_RECORDED,
    VERIFIED,
    Event,
    Lease,
    Mission,
    Offer,
    Proposal,
    View,
    WorkItem,
    replace,
)

# How one event type changes the view: in place, from the event and its data.
Mutator = Callable[[View, Event, JsonObject], None]


def evolve(view: View, event: Event) -> View:
    """Apply one event to the view in place and return it."""
    mutator = MUTATORS.get(event.type)
    if mutator is not None:
        mutator(view, event, event.data)
    if "offline" in event.data:  # a command buffered offline and reconciled (§11.5)
        _reconciled(view, event, event.data["offline"])
    if event.work_item_id in view.items:
        _revoke_tokens_without_lease(view, event.known_item_id)
        item = view.items[event.known_item_id]
        view.items[item.id] = replace(item, revision=item.revision + 1,
                                      updated_at=event.occurred_at)
    elif event.mission_id in view.missions:
        mission = view.missions[event.known_mission_id]
        view.missions[mission.id] = replace(mission, revision=mission.revision + 1,
                                            updated_at=event.occurred_at)
    return view


def _update_item(view: View, item_id: str, **changes: Any) -> None:
    view.items[item_id] = replace(view.items[item_id], **changes)


def _mission_created(view: View, event: Event, data: JsonObject) -> None:
    mission = Mission(
        id=data["missionId"], title=data["title"], owner_id=data["ownerId"],
        coordinator_id=data["coordinatorId"], delegates=tuple(data.get("delegates", ())),
        budgets=data.get("budgets") or {},
        parent_work_item_id=data.get("parentWorkItemId"),
        parent_mission_id=data.get("parentMissionId"),
        child_failure_policy=data.get("childFailurePolicy"),
        auto_dispatch=data.get("autoDispatch", False), revision=0, created_at=event.occurred_at)
    view.missions[mission.id] = mission


def _child_created(view: View, event: Event, data: JsonObject) -> None:
    _mission_created(view, event, {**data, "missionId": data["childMissionId"],
                                   "parentWorkItemId": event.work_item_id,
                                   "parentMissionId": event.mission_id})
    child = view.missions[data["childMissionId"]]
    view.missions[child.id] = replace(child, revision=1, updated_at=event.occurred_at)
    _update_item(view, event.known_item_id, state=BLOCKED, owner=None, start_by=None,
                 child_mission_id=data["childMissionId"],
                 child_failure_policy=data["childFailurePolicy"],
                 required_resolution=f"child Mission {data['childMissionId']} must finish")


def _mission_ended(state: str) -> Mutator:
    def mutate(view: View, event: Event, data: JsonObject) -> None:
        mission = view.missions[event.known_mission_id]
        view.missions[mission.id] = replace(mission, state=state)
    return mutate


def _child_mission_failed(view: View, event: Event, data: JsonObject) -> None:
    _update_item(view, event.known_item_id, child_mission_id=None,
                 required_resolution=f"child Mission {data['childMissionId']} failed")


def _proposed(view: View, event: Event, data: JsonObject) -> None:
    view.proposals[data["proposalId"]] = Proposal(
        id=data["proposalId"], mission_id=event.known_mission_id, contract=data["contract"],
        proposer=data["proposer"], created_at=event.occurred_at)


def _authorized(view: View, event: Event, data: JsonObject) -> None:
    contract = data["contract"]
    deps = contract.get("dependencies", {})
    item = WorkItem(
        id=data["workItemId"], mission_id=event.known_mission_id, contract=contract,
        contract_revision=contract["revision"], proposal_id=data.get("proposalId"),
        depends_on=tuple(deps.get("workItems", ())),
        dependency_policy=deps.get("policy", "all_verified"),
        revision=0, created_at=event.occurred_at)
    view.items[item.id] = item
    mission = view.missions[event.known_mission_id]
    view.missions[mission.id] = replace(mission, work_items=(*mission.work_items, item.id),
                                        approval_refusal=None)
    if item.proposal_id in view.proposals:
        view.proposals[item.proposal_id] = replace(
            view.proposals[item.proposal_id], status="authorized", work_item_id=item.id)


def _contract_revised(view: View, event: Event, data: JsonObject) -> None:
    contract = data["contract"]
    deps = contract.get("dependencies", {})
    _update_item(view, event.known_item_id, contract=contract,
                 contract_revision=contract["revision"], execution_approved=False,
                 retry_exhausted=None,
                 depends_on=tuple(deps.get("workItems", ())),
                 dependency_policy=deps.get("policy", "all_verified"), open_ambiguities=(),
                 execution_refusal=None)
    mission = view.missions[event.known_mission_id]
    if mission.approval_refusal is not None:
        view.missions[mission.id] = replace(mission, approval_refusal=None)


def _offered(view: View, event: Event, data: JsonObject) -> None:
    offers = tuple(
        Offer(agent_id=o["agentId"], expires_at=parse_time(o["expiresAt"]), rank=o["rank"],
              selection_basis=o["selectionBasis"])
        for o in data["offers"])
    _update_item(view, event.known_item_id, state=OFFERED, offers=offers, offer_mode=data["mode"],
                 offer_queue=tuple(data.get("pendingCandidates", ())),
                 start_within_seconds=data.get("startWithinSeconds"))


def _set_offer_status(item: WorkItem, agent_ids: Collection[str], status: str,
                      **extra: Any) -> tuple[Offer, ...]:
    return tuple(replace(o, status=status, **extra)
                 if o.agent_id in agent_ids and o.status == "live" else o for o in item.offers)


def _offer_declined(view: View, event: Event, data: JsonObject) -> None:
    item = view.items[event.known_item_id]
    decline = {"reason": data["reason"], "detail": data.get("detail")}
    _update_item(view, item.id, offers=_set_offer_status(item, {data["agentId"]}, "declined",
                                                          decline=decline))


def _offer_withdrawn(view: View, event: Event, data: JsonObject) -> None:
    item = view.items[event.known_item_id]
    _update_item(view, item.id, offers=_set_offer_status(item, set(data["agentIds"]), "withdrawn"))


def _offer_accepted(view: View, event: Event, data: JsonObject) -> None:
    item = view.items[event.known_item_id]
    _update_item(view, item.id, state=QUEUED, owner=data["agentId"], last_owner=data["agentId"],
                 ownership_epoch=data["ownershipEpoch"], start_by=parse_time(data["startBy"]),
                 accepted_revision=data["contractRevision"],
                 offers=_set_offer_status(item, {data["agentId"]}, "accepted"),
                 schedule_disclosure=None)  # a new owner has a schedule of its own


def _contract_accepted(view: View, event: Event, data: JsonObject) -> None:
    _update_item(view, event.known_item_id, accepted_revision=data["contractRevision"])


def _execution_granted(view: View, event: Event, data: JsonObject) -> None:
    _update_item(view, event.known_item_id, execution_approved=True, execution_refusal=None)


def _execution_refused(view: View, event: Event, data: JsonObject) -> None:
    _update_item(view, event.known_item_id, execution_refusal={
        "by": data["by"], "reason": data["reason"],
        "contractRevision": data["contractRevision"], "at": format_time(event.occurred_at)})


def _approval_refused(view: View, event: Event, data: JsonObject) -> None:
    mission = view.missions[event.known_mission_id]
    view.missions[mission.id] = replace(mission, approval_refusal={
        "by": data["by"], "reason": data["reason"], "workItems": data["workItems"],
        "at": format_time(event.occurred_at)})


def _started(view: View, event: Event, data: JsonObject) -> None:
    item = view.items[event.known_item_id]
    lease = Lease(id=data["leaseId"], agent_id=data["agentId"], session_epoch=data["sessionEpoch"],
                  ownership_epoch=data["ownershipEpoch"], started_at=event.occurred_at,
                  expires_at=parse_time(data["expiresAt"]))
    _update_item(view, item.id, state=ACTIVE, lease=lease, lease_count=item.lease_count + 1,
                 attempts=data["attempt"], start_by=None,
                 capability_tokens=_issue_token((), data.get("capabilityToken"), event))


def _lease_renewed(view: View, event: Event, data: JsonObject) -> None:
    item = view.items[event.known_item_id]
    lease = _lease_of(item)
    expires_at = parse_time(data["expiresAt"])
    _update_item(view, event.known_item_id, lease=replace(
        lease, expires_at=expires_at, renewals=(*lease.renewals, (event.occurred_at, expires_at))),
        capability_tokens=_issue_token(item.capability_tokens, data.get("capabilityToken"), event))


# --- capability tokens (§11.3); the rules are in capabilities.py ---------------------------

def _issue_token(tokens: tuple[JsonObject, ...], token: JsonObject | None, event: Event,
                 revoke: Collection[str] = ()) -> tuple[JsonObject, ...]:
    """`tokens` with `revoke` revoked and `token` added; tokens already expired at the
    event's time are dropped, since they can never be active again."""
    kept = tuple({**t, "revoked": True} if t["id"] in revoke else t for t in tokens
                 if parse_time(t["expiresAt"]) > event.occurred_at)
    return kept + (({**token, "revoked": False},) if token else ())


def _token_reissued(view: View, event: Event, data: JsonObject) -> None:
    item = view.items[event.known_item_id]
    _update_item(view, item.id, capability_tokens=_issue_token(
        item.capability_tokens, data["capabilityToken"], event, set(data["revokedTokenIds"])))


def _revoke_tokens_without_lease(view: View, item_id: str) -> None:
    # Tokens never outlive their lease: whatever closed it, every token is revoked with it.
    item = view.items[item_id]
    if item.live_lease is None and any(not t["revoked"] for t in item.capability_tokens):
        _update_item(view, item_id, capability_tokens=tuple(
            {**t, "revoked": True} for t in item.capability_tokens))


def _lease_of(item: WorkItem) -> Lease:
    """The item's lease, for the events that come only while it has one."""
    assert item.lease is not None, f"WorkItem {item.id} has no lease"
    return item.lease


def _close_lease(item: WorkItem, moment: datetime, reason: str) -> Lease | None:
    live = item.live_lease
    if live is None:
        return item.lease
    return replace(live, closed_at=moment, close_reason=reason)


def _lease_closed(reason: str) -> Mutator:
    def mutate(view: View, event: Event, data: JsonObject) -> None:
        item = view.items[event.known_item_id]
        lease = _close_lease(item, event.occurred_at, reason)
        if data.get("reconnection"):
            assert lease is not None, "a reconnection revokes an open lease"
            lease = replace(lease, revoked_by_reconnection=True)
        changes: dict[str, Any] = {"lease": lease}
        if data.get("returnTo") == QUEUED:
            changes.update(state=QUEUED, start_by=parse_time(data["startBy"]))
        _update_item(view, item.id, **changes)
    return mutate


def _released(item: WorkItem, event: Event) -> Lease | None:
    """The lease a checkpoint or block releases. One buffered offline (§11.5) released it
    when it was buffered, even if the Agent's reconnection has revoked it since."""
    offline = event.data.get("offline")
    if offline is None:
        return _close_lease(item, event.occurred_at, "released")
    return replace(_lease_of(item), closed_at=parse_time(offline["bufferedAt"]),
                   close_reason="released", revoked_by_reconnection=False)


def _reconciled(view: View, event: Event, offline: JsonObject) -> None:
    """§11.5: remember how far the buffered commands of the lease were reconciled, so that
    an older one is refused after a newer one."""
    item = view.items[event.known_item_id]
    _update_item(view, item.id, lease=replace(
        _lease_of(item), reconciled_through=parse_time(offline["bufferedAt"])))


def _checkpointed(view: View, event: Event, data: JsonObject) -> None:
    item = view.items[event.known_item_id]
    _update_item(view, item.id, state=QUEUED, lease=_released(item, event),
                 start_by=parse_time(data["startBy"]),
                 last_checkpoint={"progress": data["progress"],
                                  "stateArtifact": data.get("stateArtifact"),
                                  "at": format_time(event.occurred_at)})


def _blocked(view: View, event: Event, data: JsonObject) -> None:
    item = view.items[event.known_item_id]
    _update_item(view, item.id, state=BLOCKED, lease=_released(item, event),
                 blocked_until=parse_time(data["blockedUntil"]),
                 required_resolution=data["requiredResolution"],
                 last_checkpoint={**_block_checkpoint(data["checkpoint"]),
                                  "at": format_time(event.occurred_at)})


def _block_checkpoint(checkpoint: JsonObject) -> JsonObject:
    """work.blocked's `checkpoint` as {progress, stateArtifact}, like a checkpoint's.

    Both shapes are read: `{progress: {...}, stateArtifact}` (a work.checkpoint body, as
    PROTOCOL §2 pins it), and the progress fields themselves, `{phase, ...}`, which this
    server took and stored before it followed the pin. Logs already in a database hold
    the old shape and mw_verify replays them, so this must keep reading it, and give what
    it gave then (`{progress}`, no stateArtifact member), so that the replay still equals
    the live projections and the stored snapshots made from it. The two shapes never
    meet: a progress object has no `progress` member (its schema is closed)."""
    if "progress" in checkpoint:
        return {"progress": checkpoint["progress"],
                "stateArtifact": checkpoint.get("stateArtifact")}
    return {"progress": checkpoint}


def _unblocked(view: View, event: Event, data: JsonObject) -> None:
    changes: dict[str, Any]
    if data["next"] == QUEUED:
        changes = {"start_by": parse_time(data["startBy"])}
    else:
        changes = {"owner": None, "start_by": None}
    _update_item(view, event.known_item_id, state=data["next"], blocked_until=None,
                 required_resolution=None, **changes)


def _ownership_expired(view: View, event: Event, data: JsonObject) -> None:
    changes: dict[str, Any] = {}
    if "attempt" in data:
        # A missed start-by deadline is an attempt (retries.py); older events do not say,
        # and counted nothing.
        changes["attempts"] = data["attempt"]
    _update_item(view, event.known_item_id, owner=None, start_by=None, blocked_until=None,
                 **changes)


def _submitted(view: View, event: Event, data: JsonObject) -> None:
    item = view.items[event.known_item_id]
    submission = {"contractRevision": data["contractRevision"],
                  "artifacts": data["artifacts"], "evidence": data["evidence"],
                  "at": format_time(event.occurred_at)}
    if "agentId" in data:
        # Who submitted, under which Ownership Epoch: no one reviews their own work
        # (commands/review.py). Older events do not say; their lease does (submitter()).
        submission.update(agentId=data["agentId"], ownershipEpoch=data["ownershipEpoch"])
    _update_item(view, item.id, state=SUBMITTED,
                 lease=_close_lease(item, event.occurred_at, "released"),
                 submission=submission,
                 # The submission is known by the revision this event gives the item.
                 review={"submissionRevision": item.revision + 1, "integrity": None,
                         "checks": None, "evidenceRequest": None, "reviewerEvidence": [],
                         "evaluation": None})


def _review_step(key: str) -> Mutator:
    """review.*: the outcome of one pipeline step, for the submission it names."""
    def mutate(view: View, event: Event, data: JsonObject) -> None:
        item = view.items[event.known_item_id]
        if item.review and item.review["submissionRevision"] == data["submissionRevision"]:
            outcome = {k: v for k, v in data.items() if k != "submissionRevision"}
            _update_item(view, item.id, review={**item.review, key: outcome})
    return mutate


def _evidence_recorded(view: View, event: Event, data: JsonObject) -> None:
    item = view.items[event.known_item_id]
    if item.review and item.review["submissionRevision"] == data["submissionRevision"]:
        _update_item(view, item.id, review={
            **item.review, "reviewerEvidence": item.review["reviewerEvidence"] + data["evidence"]})


def _ended(state: str) -> Mutator:
    def mutate(view: View, event: Event, data: JsonObject) -> None:
        item = view.items[event.known_item_id]
        changes: dict[str, Any] = {"state": state, "start_by": None, "blocked_until": None,
                   "child_mission_id": None if state != VERIFIED else item.child_mission_id}
        if state != VERIFIED:
            changes["owner"] = None
        _update_item(view, item.id, **changes)
    return mutate


def _failed(view: View, event: Event, data: JsonObject) -> None:
    _ended(FAILED)(view, event, data)
    # §11.4: from when a retry may be offered, or why none may (set by work.fail only).
    _update_item(view, event.known_item_id, retry_at=_parse(data.get("retryAt")),
                 retry_exhausted=data.get("exhaustedBy"))


def _message_posted(view: View, event: Event, data: JsonObject) -> None:
    item = view.items[event.known_item_id]
    if data["kind"] == "ambiguity":
        _update_item(view, item.id, open_ambiguities=(*item.open_ambiguities, data["messageId"]))
    elif data["kind"] == "resolution" and data.get("cleared", True):
        # A resolution message cleared its ambiguity until §10.1 was followed: older logs
        # hold such events (no `cleared` member) and replay must still clear it. New ones
        # say `cleared: false`: only a contract revision or a replacement WorkItem does.
        _update_item(view, item.id, open_ambiguities=tuple(
            m for m in item.open_ambiguities if m != data.get("resolves")))


def _usage_recorded(view: View, event: Event, data: JsonObject) -> None:
    """The totals the decision computed for every level of the budget ancestry."""
    for level in data["chargedTo"]:
        if level["level"] == "workItem":
            _update_item(view, level["id"], usage=level["usage"])
        else:
            view.missions[level["id"]] = replace(view.missions[level["id"]], usage=level["usage"])


def _schedule_disclosed(view: View, event: Event, data: JsonObject) -> None:
    _update_item(view, event.known_item_id, schedule_disclosure=dict(data))


def _noop(view: View, event: Event, data: JsonObject) -> None:
    """Recorded in the log and the audit trail; no projected state changes."""


MUTATORS: dict[str, Mutator] = {
    "mission.created": _mission_created,
    "mission.child_created": _child_created,
    "mission.approved": _mission_ended(MISSION_APPROVED),
    "mission.approval_refused": _approval_refused,
    "mission.failed": _mission_ended(MISSION_FAILED),
    "mission.cancelled": _mission_ended(MISSION_CANCELLED),
    "work.child_mission_failed": _child_mission_failed,
    "work.proposed": _proposed,
    "work.authorized": _authorized,
    "work.contract_revised": _contract_revised,
    "work.offered": _offered,
    "work.offer_declined": _offer_declined,
    "work.offer_withdrawn": _offer_withdrawn,
    "work.offer_accepted": _offer_accepted,
    "work.contract_accepted": _contract_accepted,
    "approval.execution_granted": _execution_granted,
    "approval.execution_refused": _execution_refused,
    "work.started": _started,
    "lease.renewed": _lease_renewed,
    "lease.revoked": _lease_closed("revoked"),
    "lease.expired": _lease_closed("expired"),
    "work.progress_reported": _noop,
    "work.preemption_requested": _noop,
    "work.checkpointed": _checkpointed,
    "work.blocked": _blocked,
    "work.unblocked": _unblocked,
    "work.ownership_expired": _ownership_expired,
    "work.submitted": _submitted,
    "work.verified": _ended(VERIFIED),
    "work.failed": _failed,
    "capability.rotated": _token_reissued,
    "capability.narrowed": _token_reissued,
    "work.cancelled": _ended(CANCELLED),
    "conversation.message_posted": _message_posted,
    "work.schedule_disclosed": _schedule_disclosed,
    "review.integrity_checked": _review_step("integrity"),
    "review.checks_completed": _review_step("checks"),
    "review.evidence_requested": _review_step("evidenceRequest"),
    "review.evaluated": _review_step("evaluation"),
    "evidence.recorded": _evidence_recorded,
    USAGE_RECORDED: _usage_recorded,
    **artifact_records.MUTATORS,
}


def _parse(text: str | None) -> datetime | None:
    return parse_time(text) if text is not None else None
