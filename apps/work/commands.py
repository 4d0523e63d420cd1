"""decide(view, command, context) -> [Draft]: one pure function per command type.

Each function checks the command against the current state (the §10.2 table,
fencing, dependencies, contract) and returns the events to append, or raises a
ProtocolError. Nothing here reads a clock, a database or a setting: the shell
passes them in `Context`. `evolve` (state.py) turns the events into state.
"""

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from mission_weave.protocol.errors import ProtocolError
from mission_weave.protocol.idempotency import attempt_operation_id, idempotency_key
from mission_weave.protocol.timefmt import format_time, parse_time

from . import capabilities, dag, fencing, lifecycle, ranking, retries
from .ranking import Candidate  # noqa: F401 - the facts of an offer candidate, re-exported
from .schemas import check_body, check_contract
from .state import (
    ACTIVE,
    BLOCKED,
    CANCELLED,
    FAILED,
    MISSION_ACTIVE,
    QUEUED,
    UNFINISHED,
    VERIFIED,
    Mission,
    View,
    WorkItem,
)

HUMAN_ONLY = frozenset({"approval.grant_execution", "mission.approve"})
ANY_ROLE = frozenset({"coordinator", "worker", "reviewer", "owner", "observer"})

# Who may send each command (PROTOCOL §2, "who"). Finer rules (the addressed worker,
# the lease holder, the owner of the item) are checked by the command itself.
ROLES = {
    "mission.create": {"coordinator", "owner"},
    "mission.create_child": {"coordinator"},
    "mission.approve": {"owner"},
    "mission.fail": {"coordinator", "owner"},
    "mission.cancel": {"coordinator", "owner"},
    "work.propose": ANY_ROLE,
    "work.authorize": {"coordinator"},
    "work.revise_contract": {"coordinator"},
    "work.offer": {"coordinator"},
    "work.decline_offer": {"worker"},
    "work.accept_offer": {"worker"},
    "approval.grant_execution": {"owner"},
    "work.start": {"worker"},
    "lease.renew": {"worker"},
    "work.progress": {"worker"},
    "work.checkpoint": {"worker"},
    "work.block": {"worker"},
    "work.unblock": {"coordinator"},
    "work.submit": {"worker"},
    "work.accept_result": {"coordinator"},
    "work.fail": {"coordinator", "worker"},
    "work.cancel": {"coordinator"},
    "work.request_preemption": {"coordinator"},
    "conversation.post": ANY_ROLE,
    "capability.rotate": {"worker"},
    "capability.narrow": {"worker"},
}
COMMAND_TYPES = tuple(ROLES)


@dataclass(frozen=True)
class Command:
    id: str
    type: str
    actor: str  # principal: agent:<id> | user:<name> | system
    body: dict
    roles: frozenset = frozenset()
    work_item_id: str | None = None
    expected_revision: int | None = None
    ownership_epoch: int | None = None
    lease_id: str | None = None
    session_epoch: int | None = None

    @property
    def agent_id(self) -> str | None:
        return self.actor[len("agent:"):] if self.actor.startswith("agent:") else None


@dataclass(frozen=True)
class Policy:
    """The settings `decide` depends on, as plain numbers."""

    start_window_seconds: int = 600
    default_lease_seconds: int = 300
    max_lease_seconds: int = 3600
    default_blocked_lease_seconds: int = 3600
    max_blocked_lease_seconds: int = 86400
    max_urgent_candidates: int = 10
    presence_ttl_seconds: int = 120  # an older Presence report counts as unknown
    auto_offer_seconds: int = 600  # how long an offer issued by automatic dispatch lives


@dataclass(frozen=True)
class Context:
    now: datetime
    policy: Policy = Policy()
    candidates: dict = field(default_factory=dict)  # agent id -> Candidate


@dataclass(frozen=True)
class Draft:
    """An event to append: what happened, to which Mission and WorkItem."""

    type: str
    data: dict
    mission_id: str | None = None
    work_item_id: str | None = None


def derive_id(prefix: str, command_id: str, salt: str = "") -> str:
    """A deterministic id for something a command creates: retries and replays agree."""
    digest = hashlib.sha256(f"{command_id}/{salt}".encode()).hexdigest()[:24]
    return f"{prefix}_{digest}"


# --- the entry point ---------------------------------------------------------------------

def decide(view: View, command: Command, context: Context) -> list:
    if command.type not in ROLES:
        raise ProtocolError("VALIDATION_ERROR", f"unknown command type {command.type!r}",
                            {"knownTypes": sorted(ROLES)})
    _check_actor(command)
    check_body(command.type, command.body)
    return HANDLERS[command.type](view, command, context)


def _check_actor(command: Command) -> None:
    if command.type in HUMAN_ONLY and not command.actor.startswith("user:"):
        raise ProtocolError("FORBIDDEN", f"{command.type} is given by a human MissionOwner")
    allowed = ROLES[command.type]
    if not command.roles & allowed:
        raise ProtocolError("FORBIDDEN",
                            f"{command.type} needs one of the roles {', '.join(sorted(allowed))}",
                            {"roles": sorted(command.roles), "needs": sorted(allowed)})


# --- shared checks --------------------------------------------------------------------------

def _mission(view: View, mission_id: str) -> Mission:
    mission = view.missions.get(mission_id)
    if mission is None:
        raise ProtocolError("NOT_FOUND", f"no Mission {mission_id} in this Group")
    return mission


def _active_mission(view: View, mission_id: str) -> Mission:
    mission = _mission(view, mission_id)
    if mission.state != MISSION_ACTIVE:
        raise ProtocolError("TRANSITION_NOT_PERMITTED",
                            f"Mission {mission.id} is {mission.state}; its work is closed",
                            {"missionState": mission.state})
    return mission


def _item(view: View, command: Command, fenced_at: datetime | None = None) -> WorkItem:
    """The targeted WorkItem. With `fenced_at` (the lease holder's commands) fencing is
    checked before the transition, so a late result from a fenced owner is refused as
    STALE_OWNERSHIP / STALE_LEASE / LEASE_EXPIRED whatever state the item moved on to."""
    if not command.work_item_id:
        raise ProtocolError("VALIDATION_ERROR", f"{command.type} needs workItemId")
    item = view.items.get(command.work_item_id)
    if item is None:
        raise ProtocolError("NOT_FOUND", f"no WorkItem {command.work_item_id} in this Group")
    if command.expected_revision is not None and command.expected_revision != item.revision:
        raise ProtocolError(
            "REVISION_CONFLICT",
            f"expectedRevision {command.expected_revision} differs from the WorkItem's "
            f"revision {item.revision}", {"revision": item.revision})
    if fenced_at is not None:
        _require_lease(item, command, fenced_at)
    lifecycle.permitted(item.state, command.type)
    return item


def _dependency_states(view: View, item: WorkItem) -> list:
    return [view.items[dep].state for dep in item.depends_on if dep in view.items]


def _require_dependencies(view: View, item: WorkItem) -> None:
    if not dag.dependencies_met(item.dependency_policy, _dependency_states(view, item)):
        waiting = {dep: view.items[dep].state for dep in item.depends_on if dep in view.items}
        raise ProtocolError(
            "DEPENDENCIES_NOT_MET",
            f"WorkItem {item.id} waits on its dependencies ({item.dependency_policy})",
            {"policy": item.dependency_policy, "dependencies": waiting})


def _require_lease(item: WorkItem, command: Command, now: datetime) -> None:
    if not command.lease_id:
        raise ProtocolError("VALIDATION_ERROR", f"{command.type} must name the current leaseId")
    fencing.check_lease(item, command.agent_id, command.lease_id, command.ownership_epoch,
                        command.session_epoch, now)


def _seconds(value, default: int, maximum: int, name: str) -> int:
    seconds = default if value is None else value
    if seconds > maximum:
        raise ProtocolError("VALIDATION_ERROR", f"body.{name} may be at most {maximum} seconds",
                            {"path": f"body.{name}", "maximum": maximum})
    return seconds


def _at(now: datetime, seconds: int) -> str:
    return format_time(now + timedelta(seconds=seconds))


def _draft(item: WorkItem, type_: str, data: dict) -> Draft:
    return Draft(type_, data, item.mission_id, item.id)


def _release(item: WorkItem, context: Context, reason: str) -> list:
    """Revoke the live lease and withdraw the live offers of an item that is being taken
    away from its workers (failure, cancellation, child Mission, fencing)."""
    drafts = []
    if item.live_lease is not None:
        drafts.append(_draft(item, "lease.revoked", {"leaseId": item.lease.id, "reason": reason}))
    live = [o.agent_id for o in item.live_offers(context.now)]
    if live:
        drafts.append(_draft(item, "work.offer_withdrawn", {"agentIds": live, "reason": reason}))
    return drafts


def _check_new_contract(view: View, mission: Mission, contract: dict, item_id: str,
                        revision: int, edges: dict) -> dict:
    contract = check_contract(contract)
    if contract.get("revision", revision) != revision:
        raise ProtocolError("INVALID_CONTRACT",
                            f"Work Contract: body.contract.revision must be {revision}",
                            {"path": "body.contract.revision", "expected": revision})
    dependencies = contract["dependencies"]["workItems"]
    for index, dep in enumerate(dependencies):
        other = view.items.get(dep)
        if dep != item_id and (other is None or other.mission_id != mission.id):
            path = f"body.contract.dependencies.workItems[{index}]"
            raise ProtocolError("INVALID_CONTRACT",
                                f"Work Contract: {path}: no WorkItem {dep} in Mission {mission.id}",
                                {"path": path})
    cycle = dag.cycle_through(item_id, dependencies, edges)
    if cycle:
        raise ProtocolError("DEPENDENCY_CYCLE",
                            f"the dependency would close a cycle: {' -> '.join(cycle)}",
                            {"cycle": cycle})
    return {**contract, "revision": revision}


def _edges(view: View, mission: Mission) -> dict:
    return {i: view.items[i].depends_on for i in mission.work_items if i in view.items}


def _new_id(view_ids, command: Command, given, prefix: str, what: str) -> str:
    new_id = given or derive_id(prefix, command.id)
    if new_id in view_ids:
        raise ProtocolError("VALIDATION_ERROR", f"a {what} with id {new_id} already exists",
                            {"id": new_id})
    return new_id


# --- Missions --------------------------------------------------------------------------------

def mission_create(view, command, context):
    body = command.body
    mission_id = _new_id(view.missions, command, body.get("missionId"), "msn", "Mission")
    return [Draft("mission.created", {
        "missionId": mission_id, "title": body["title"], "ownerId": body["ownerId"],
        "coordinatorId": body["coordinatorId"], "budgets": body.get("budgets") or {},
        "autoDispatch": body.get("autoDispatch", False)}, mission_id=mission_id)]


def mission_create_child(view, command, context):
    item = _item(view, command)
    parent = _active_mission(view, item.mission_id)
    if item.child_mission_id:
        raise ProtocolError("TRANSITION_NOT_PERMITTED",
                            f"WorkItem {item.id} already waits on child Mission "
                            f"{item.child_mission_id}", {"childMissionId": item.child_mission_id})
    body = command.body
    child_id = _new_id(view.missions, command, body.get("childMissionId"), "msn", "Mission")
    return _release(item, context, "child Mission created") + [_draft(item, "mission.child_created", {
        "childMissionId": child_id, "title": body["title"], "ownerId": parent.owner_id,
        "coordinatorId": parent.coordinator_id, "budgets": parent.budgets,
        "childFailurePolicy": body["childFailurePolicy"]})]


def _child_approval_evidence(item: WorkItem, mission: Mission, command: Command, now) -> dict:
    return {"id": derive_id("ev", command.id, item.id), "subject": f"mission:{mission.id}",
            "criteria": list(item.criteria_ids), "method": "child-mission-approval",
            "result": "approved", "producer": command.actor, "timestamp": format_time(now),
            "artifacts": []}


def mission_approve(view, command, context):
    mission = _active_mission(view, command.body["missionId"])
    unfinished = [i for i in mission.work_items
                  if view.items[i].state not in (VERIFIED, CANCELLED)]
    if unfinished:
        raise ProtocolError("TRANSITION_NOT_PERMITTED",
                            f"Mission {mission.id} has WorkItems that are not verified or cancelled",
                            {"unfinished": unfinished})
    drafts = [Draft("mission.approved", {"by": command.actor,
                                         "comment": command.body.get("comment")}, mission.id)]
    parent = view.items.get(mission.parent_work_item_id)
    if parent is not None and parent.child_mission_id == mission.id:
        lifecycle.permitted(parent.state, "child mission approval")
        evidence = _child_approval_evidence(parent, mission, command, context.now)
        drafts.append(_draft(parent, "work.verified", {"evidence": [evidence], "by": command.actor,
                                                       "childMissionId": mission.id}))
    return drafts


def _mission_end(event_type: str, item_event: str, child_failed: bool):
    def handle(view, command, context):
        mission = _active_mission(view, command.body["missionId"])
        reason = command.body.get("reason") or f"Mission {mission.id} {event_type.split('.')[1]}"
        drafts = []
        for item_id in mission.work_items:
            item = view.items[item_id]
            if item.state in UNFINISHED:
                drafts += _release(item, context, reason)
                drafts.append(_draft(item, item_event, {
                    "reason": reason, "by": command.actor, "evidence": [],
                    "cause": "parent mission failure or cancellation"}))
        drafts.append(Draft(event_type, {"by": command.actor, "reason": reason}, mission.id))
        parent = view.items.get(mission.parent_work_item_id)
        if child_failed and parent is not None and parent.child_mission_id == mission.id:
            drafts.append(_parent_of_failed_child(parent, mission, command, context, reason))
        return drafts
    return handle


def _parent_of_failed_child(parent: WorkItem, mission: Mission, command, context, reason) -> Draft:
    if parent.child_failure_policy == "fail":
        evidence = {**_child_approval_evidence(parent, mission, command, context.now),
                    "method": "child-mission-outcome", "result": f"child Mission failed: {reason}"}
        return _draft(parent, "work.failed", {"reason": reason, "by": command.actor,
                                              "evidence": [evidence],
                                              "cause": "child mission failure"})
    return _draft(parent, "work.child_mission_failed",
                  {"childMissionId": mission.id, "policy": "block", "reason": reason})


# --- proposing and authorizing ---------------------------------------------------------------

def work_propose(view, command, context):
    body = command.body
    mission = _active_mission(view, body["missionId"])
    proposal_id = _new_id(view.proposals, command, body.get("proposalId"), "prp", "Work Proposal")
    contract = {**check_contract(body["contract"]), "revision": 1}
    return [Draft("work.proposed", {"proposalId": proposal_id, "contract": contract,
                                    "proposer": command.actor}, mission.id)]


def work_authorize(view, command, context):
    body = command.body
    mission = _active_mission(view, body["missionId"])
    item_id = _new_id(view.items, command, body.get("workItemId"), "wi", "WorkItem")
    proposal_id = body.get("proposalId")
    lifecycle.permitted(lifecycle.PROPOSAL if proposal_id else lifecycle.NONE, command.type)
    if proposal_id:
        proposal = view.proposals.get(proposal_id)
        if proposal is None or proposal.mission_id != mission.id:
            raise ProtocolError("NOT_FOUND", f"no Work Proposal {proposal_id} in Mission {mission.id}")
        if proposal.status != "open":
            raise ProtocolError("TRANSITION_NOT_PERMITTED",
                                f"Work Proposal {proposal_id} was already authorized")
    contract = _check_new_contract(view, mission, body["contract"], item_id, 1, _edges(view, mission))
    return [Draft("work.authorized", {"workItemId": item_id, "proposalId": proposal_id,
                                      "contract": contract}, mission.id, item_id)]


def work_revise_contract(view, command, context):
    item = _item(view, command)
    mission = _active_mission(view, item.mission_id)
    revision = item.contract_revision + 1
    contract = _check_new_contract(view, mission, command.body["contract"], item.id, revision,
                                   _edges(view, mission))
    return [_draft(item, "work.contract_revised", {
        "contract": contract, "contractRevision": revision,
        "previousRevision": item.contract_revision,
        "resolvedAmbiguities": list(item.open_ambiguities)})]


# --- offers ----------------------------------------------------------------------------------

def selection_basis(item: WorkItem, candidate: Candidate, rules: list, context: Context) -> dict:
    """§10.3's structured basis for offering `item` to `candidate` (see ranking.py)."""
    return ranking.basis(item.contract, candidate, rules, context.now,
                         context.policy.presence_ttl_seconds)


def _explicit_placement(item: WorkItem, body: dict, context: Context) -> tuple[list, list]:
    """Named candidates, in the coordinator's order: ([{agentId, selectionBasis}], pending)."""
    candidates = list(body["candidates"])
    for agent_id in candidates:
        candidate = context.candidates.get(agent_id)
        if candidate is None or "worker" not in candidate.roles:
            raise ProtocolError("VALIDATION_ERROR",
                                f"candidate {agent_id} is not a worker in this Group",
                                {"path": "body.candidates", "candidate": agent_id})
    mode = body["mode"]
    if mode == "urgent":
        limit = min(body.get("candidateCount", len(candidates)), context.policy.max_urgent_candidates)
        if len(candidates) > limit:
            raise ProtocolError("VALIDATION_ERROR",
                                f"an urgent offer goes to at most {limit} candidates",
                                {"path": "body.candidates", "maximum": limit})
        addressed, pending = candidates, []
    else:
        addressed, pending = candidates[:1], candidates[1:]
    rules = ["explicit-candidates", f"mode:{mode}"]
    return [{"agentId": agent_id,
             "selectionBasis": selection_basis(item, context.candidates[agent_id], rules, context)}
            for agent_id in addressed], pending


def _auto_placement(item: WorkItem, body: dict, context: Context) -> tuple[list, list]:
    """candidates "auto": the Group's members ranked by ranking.py; sequential offers the
    best and queues the rest, urgent offers the best `candidateCount` (bounded)."""
    mode, policy = body["mode"], context.policy
    rules = ["auto-candidates", *ranking.AUTO_RULES, f"mode:{mode}"]
    pool = list(context.candidates.values())
    ranked = ranking.rank(item.contract, pool, context.now, policy.presence_ttl_seconds, rules)
    if not ranked:
        raise ProtocolError(
            "TRANSITION_NOT_PERMITTED",
            f"no worker in this Group is eligible for WorkItem {item.id}",
            {"reason": "no eligible candidate",
             "excluded": ranking.excluded(item.contract, pool, context.now,
                                          policy.presence_ttl_seconds)})
    if mode == "urgent":
        count = min(body.get("candidateCount", policy.max_urgent_candidates),
                    policy.max_urgent_candidates)
        return ranked[:count], []
    return ranked[:1], [entry["agentId"] for entry in ranked[1:]]


def _fence_expired_owner(item: WorkItem, context: Context) -> list:
    if item.owner is None:
        return []
    if fencing.owner_is_live(item, context.now):
        raise ProtocolError(
            "TRANSITION_NOT_PERMITTED",
            f"WorkItem {item.id} has a live owner (agent {item.owner}, epoch "
            f"{item.ownership_epoch}); it cannot be offered until that ownership ends",
            {"owner": item.owner, "ownershipEpoch": item.ownership_epoch})
    drafts = []
    if item.live_lease is not None:
        drafts.append(_draft(item, "lease.expired", {"leaseId": item.lease.id, "reason": "timeout"}))
    reason = {QUEUED: "start_by", ACTIVE: "lease", BLOCKED: "blocked_lease"}.get(item.state,
                                                                                "fenced")
    drafts.append(_draft(item, "work.ownership_expired", {
        "agentId": item.owner, "ownershipEpoch": item.ownership_epoch, "reason": reason}))
    return drafts


def work_offer(view, command, context):
    item = _item(view, command)
    _active_mission(view, item.mission_id)
    if item.state == FAILED:
        retries.check_retry(item, context.now)  # §11.4: attempts, backoff, deadline, cost
    if item.child_mission_id:
        # Like work.unblock: while the linked child runs the parent stays blocked, or the
        # child's approval could never verify it (§10.2). Cancel the child Mission first.
        child = item.child_mission_id
        raise ProtocolError("TRANSITION_NOT_PERMITTED",
                            f"WorkItem {item.id} waits on its child Mission {child}",
                            {"childMissionId": child})
    body = command.body
    expires_at = parse_time(body["expiresAt"])
    if expires_at <= context.now:
        raise ProtocolError("VALIDATION_ERROR", "body.expiresAt must be in the future",
                            {"path": "body.expiresAt"})
    _require_dependencies(view, item)
    mode = body["mode"]
    placement = _auto_placement if body["candidates"] == "auto" else _explicit_placement
    addressed, pending = placement(item, body, context)
    offers = [{"agentId": entry["agentId"], "expiresAt": format_time(expires_at), "rank": rank,
               "selectionBasis": entry["selectionBasis"]}
              for rank, entry in enumerate(addressed, start=1)]
    drafts = _fence_expired_owner(item, context)
    live = [o.agent_id for o in item.live_offers(context.now)]
    if live:
        drafts.append(_draft(item, "work.offer_withdrawn", {"agentIds": live, "reason": "replaced"}))
    data = {"offers": offers, "mode": mode, "pendingCandidates": pending}
    if body.get("startWithinSeconds"):
        data["startWithinSeconds"] = body["startWithinSeconds"]
    return drafts + [_draft(item, "work.offered", data)]


def _own_live_offer(item: WorkItem, command: Command, now):
    offer = next((o for o in item.offers if o.agent_id == command.agent_id), None)
    if offer is None or not offer.is_live(now):
        status = "not addressed to you" if offer is None else (
            "expired" if offer.status == "live" else offer.status)
        raise ProtocolError("OFFER_NOT_LIVE", f"the offer of WorkItem {item.id} is {status}",
                            {"status": status})
    return offer


def work_decline_offer(view, command, context):
    item = _item(view, command)
    _own_live_offer(item, command, context.now)
    declined = [_draft(item, "work.offer_declined", {"agentId": command.agent_id,
                                                     "reason": command.body["reason"],
                                                     "detail": command.body.get("detail")})]
    # Under autoDispatch the next pending candidate is offered in this same transaction.
    # Imported here: dispatch builds its drafts with this module's Draft.
    from . import dispatch
    return declined + dispatch.after(view, declined, context)


def work_accept_offer(view, command, context):
    item = _item(view, command)
    _active_mission(view, item.mission_id)
    revision = command.body["contractRevision"]
    if item.state == QUEUED:
        return _renew_acceptance(item, command, revision, context)
    _own_live_offer(item, command, context.now)
    if item.open_ambiguities:
        raise ProtocolError(
            "TRANSITION_NOT_PERMITTED",
            "an essential ambiguity is open in the WorkItem Conversation; it must be resolved "
            "before the WorkItem is accepted (§10.1)",
            {"openAmbiguities": list(item.open_ambiguities)})
    if revision != item.contract_revision:
        raise ProtocolError("CONTRACT_REVISION_MISMATCH",
                            f"the contract is at revision {item.contract_revision}, not {revision}",
                            {"contractRevision": item.contract_revision})
    _require_dependencies(view, item)
    _check_capacity(command.agent_id, context)
    window = item.start_within_seconds or context.policy.start_window_seconds
    losers = [o.agent_id for o in item.live_offers(context.now) if o.agent_id != command.agent_id]
    drafts = [_draft(item, "work.offer_accepted", {
        "agentId": command.agent_id, "ownershipEpoch": item.ownership_epoch + 1,
        "startBy": _at(context.now, window), "withdrawn": losers,
        "contractRevision": revision})]
    if losers:
        drafts.append(_draft(item, "work.offer_withdrawn",
                             {"agentIds": losers, "reason": f"accepted by {command.agent_id}"}))
    return drafts


def _check_capacity(agent_id: str, context: Context) -> None:
    """The server's backstop to the Worker's own admission control (§10.3, §11.1): an
    acceptance may not take the Agent past its Agent Card's maxConcurrency, counting the
    WorkItems it owns in queued or active in every Group (facts the shell supplies)."""
    candidate = context.candidates.get(agent_id)
    if candidate is None:
        return
    if candidate.load >= candidate.max_concurrency:
        raise ProtocolError(
            "TRANSITION_NOT_PERMITTED",
            f"accepting would exceed your Agent Card's maxConcurrency of "
            f"{candidate.max_concurrency} ({candidate.load} WorkItems owned in queued or active)",
            {"reason": "capacity", "maxConcurrency": candidate.max_concurrency,
             "current": candidate.load})


def _renew_acceptance(item: WorkItem, command: Command, revision: int, context) -> list:
    if item.owner != command.agent_id:
        # Not the owner: a loser whose offer was withdrawn, or never addressed (§10.3).
        _own_live_offer(item, command, context.now)
    fencing.check_ownership(item, command.agent_id, item.ownership_epoch, context.now)
    if item.accepted_revision == item.contract_revision:
        raise ProtocolError("OFFER_NOT_LIVE",
                            f"you already accepted revision {item.contract_revision}; "
                            "there is no offer to accept")
    if revision != item.contract_revision:
        raise ProtocolError("CONTRACT_REVISION_MISMATCH",
                            f"the contract is at revision {item.contract_revision}, not {revision}",
                            {"contractRevision": item.contract_revision})
    return [_draft(item, "work.contract_accepted",
                   {"agentId": command.agent_id, "contractRevision": revision})]


# --- execution -------------------------------------------------------------------------------

def approval_grant_execution(view, command, context):
    item = _item(view, command)
    if not item.contract["risk"]["requiresExecutionApproval"]:
        raise ProtocolError("TRANSITION_NOT_PERMITTED",
                            f"the contract of {item.id} does not require execution approval")
    if item.execution_approved:
        raise ProtocolError("TRANSITION_NOT_PERMITTED",
                            f"execution of {item.id} is already approved for this revision")
    return [_draft(item, "approval.execution_granted", {
        "by": command.actor, "contractRevision": item.contract_revision,
        "comment": command.body.get("comment")})]


def _capability_token(lease_id: str, scopes: dict, expires_at: datetime, salt: str) -> dict:
    return capabilities.descriptor(derive_id("cap", lease_id, salt), lease_id, scopes, expires_at)


def work_start(view, command, context):
    item = _item(view, command)
    _active_mission(view, item.mission_id)
    fencing.check_ownership(item, command.agent_id, command.ownership_epoch, context.now)
    _require_dependencies(view, item)
    if item.accepted_revision != item.contract_revision:
        raise ProtocolError(
            "CONTRACT_REVISION_MISMATCH",
            f"the contract was revised to {item.contract_revision}; accept it before starting",
            {"contractRevision": item.contract_revision})
    if item.contract["risk"]["requiresExecutionApproval"] and not item.execution_approved:
        raise ProtocolError("APPROVAL_REQUIRED",
                            f"WorkItem {item.id} needs approval.grant_execution by a MissionOwner")
    policy = context.policy
    seconds = _seconds(command.body.get("leaseSeconds"), policy.default_lease_seconds,
                       policy.max_lease_seconds, "leaseSeconds")
    lease_id = derive_id("lease", command.id)
    expires_at = context.now + timedelta(seconds=seconds)
    # §11.4: an attempt is one Ownership Epoch's execution; starting again in the same
    # epoch (after a checkpoint, block or session replacement) resumes it, same key.
    resumed = item.lease is not None and item.lease.ownership_epoch == item.ownership_epoch
    attempt = item.attempts if resumed else item.attempts + 1
    return [_draft(item, "work.started", {
        "leaseId": lease_id, "expiresAt": format_time(expires_at),
        "ownershipEpoch": item.ownership_epoch,
        "agentId": command.agent_id, "sessionEpoch": command.session_epoch,
        "attempt": attempt, "resumed": resumed,
        "idempotencyKey": idempotency_key(item.mission_id, item.id, item.ownership_epoch,
                                          attempt_operation_id(attempt)),
        "capabilityToken": _capability_token(
            lease_id, capabilities.contract_scopes(item.contract), expires_at, command.id)})]


def lease_renew(view, command, context):
    item = _item(view, command, fenced_at=context.now)
    policy = context.policy
    seconds = _seconds(command.body.get("leaseSeconds"), policy.default_lease_seconds,
                       policy.max_lease_seconds, "leaseSeconds")
    expires_at = context.now + timedelta(seconds=seconds)
    # The renewal's token keeps the held scopes (a narrowing is never undone by renewing);
    # earlier tokens stay valid until their own, earlier, lease boundary.
    return [_draft(item, "lease.renewed", {
        "leaseId": item.lease.id, "expiresAt": format_time(expires_at),
        "ownershipEpoch": item.ownership_epoch,
        "capabilityToken": _capability_token(item.lease.id, capabilities.held_scopes(item),
                                             expires_at, command.id)})]


def _reissue_token(event_type: str):
    """capability.rotate / capability.narrow: the lease holder gets a new token for the
    same lease, with the held scopes or a subset of them, and every token it held for the
    lease is revoked (§11.3: rotatable and narrowable while the lease lives)."""
    def handle(view, command, context):
        item = _item(view, command, fenced_at=context.now)
        held = capabilities.held_scopes(item)
        requested = command.body.get("scopes")
        scopes = capabilities.narrowed(held, requested) if requested is not None else held
        lease = item.lease
        expires_at = capabilities.expiry(lease.expires_at, context.now,
                                         command.body.get("expiresInSeconds"))
        return [_draft(item, event_type, {
            "leaseId": lease.id, "ownershipEpoch": item.ownership_epoch,
            "revokedTokenIds": capabilities.unrevoked_ids(item),
            "capabilityToken": _capability_token(lease.id, scopes, expires_at, command.id)})]
    return handle


def work_progress(view, command, context):
    item = _item(view, command, fenced_at=context.now)
    return [_draft(item, "work.progress_reported",
                   {"leaseId": item.lease.id, "progress": command.body})]


def work_checkpoint(view, command, context):
    item = _item(view, command, fenced_at=context.now)
    return [_draft(item, "work.checkpointed", {
        "leaseId": item.lease.id, "progress": command.body["progress"],
        "stateArtifact": command.body.get("stateArtifact"),
        "startBy": _at(context.now, context.policy.start_window_seconds)})]


def work_block(view, command, context):
    item = _item(view, command, fenced_at=context.now)
    policy = context.policy
    seconds = _seconds(command.body.get("blockedLeaseSeconds"),
                       policy.default_blocked_lease_seconds, policy.max_blocked_lease_seconds,
                       "blockedLeaseSeconds")
    return [_draft(item, "work.blocked", {
        "leaseId": item.lease.id, "checkpoint": command.body["checkpoint"],
        "requiredResolution": command.body["requiredResolution"],
        "blockedUntil": _at(context.now, seconds)})]


def work_unblock(view, command, context):
    item = _item(view, command)
    _active_mission(view, item.mission_id)
    if item.child_mission_id:
        raise ProtocolError("TRANSITION_NOT_PERMITTED",
                            f"WorkItem {item.id} waits on its child Mission {item.child_mission_id}",
                            {"childMissionId": item.child_mission_id})
    data = {"resolution": command.body["resolution"]}
    if fencing.owner_is_live(item, context.now):
        data.update(next=QUEUED, startBy=_at(context.now, context.policy.start_window_seconds))
    else:
        data.update(next="open", expiredOwner=item.owner)
    return [_draft(item, "work.unblocked", data)]


def work_submit(view, command, context):
    item = _item(view, command, fenced_at=context.now)
    body = command.body
    if body["contractRevision"] != item.contract_revision:
        raise ProtocolError(
            "CONTRACT_REVISION_MISMATCH",
            f"the contract is at revision {item.contract_revision}, not {body['contractRevision']}",
            {"contractRevision": item.contract_revision})
    _check_evidence_covers(item, body["evidence"])
    return [_draft(item, "work.submitted", {
        "leaseId": item.lease.id, "contractRevision": item.contract_revision,
        "artifacts": body.get("artifacts", []), "evidence": body["evidence"]})]


def _check_evidence_covers(item: WorkItem, evidence: list) -> None:
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


def work_accept_result(view, command, context):
    item = _item(view, command)
    _active_mission(view, item.mission_id)
    return [_draft(item, "work.verified", {"evidence": command.body.get("evidence", []),
                                           "by": command.actor})]


def work_fail(view, command, context):
    item = _item(view, command)
    if "coordinator" not in command.roles:
        # A worker may report failure only of the work it holds the lease for.
        if item.state != ACTIVE:
            raise ProtocolError("FORBIDDEN", "only the lease holder or a coordinator may fail it")
        _require_lease(item, command, context.now)
    reason = command.body.get("reason") or "failed"
    permanent = command.body.get("permanent", False)
    # §11.4: a retry may follow within the contract's attempt, backoff, cost and deadline
    # budgets; past them, or for a permanent failure, this is the final work.failed.
    outcome = retries.after_failure(item, permanent, context.now)
    drafts = _release(item, context, "failed")
    return drafts + [_draft(item, "work.failed", {
        "evidence": command.body["evidence"], "by": command.actor, "reason": reason,
        "permanent": permanent, "attempt": item.attempts,
        "retryAt": format_time(outcome.retry_at) if outcome.retry_at else None,
        "exhausted": outcome.exhausted, "exhaustedBy": outcome.exhausted_by})]


def work_cancel(view, command, context):
    item = _item(view, command)
    reason = command.body.get("reason") or "cancelled"
    return _release(item, context, "cancelled") + [
        _draft(item, "work.cancelled", {"reason": reason, "by": command.actor})]


def work_request_preemption(view, command, context):
    item = _item(view, command)
    if not fencing.owner_is_live(item, context.now):
        raise ProtocolError("TRANSITION_NOT_PERMITTED",
                            f"WorkItem {item.id} has no live lease to preempt")
    return [_draft(item, "work.preemption_requested", {
        "leaseId": item.lease.id, "agentId": item.lease.agent_id,
        "reason": command.body.get("reason")})]


def conversation_post(view, command, context):
    item = _item(view, command)
    body = command.body
    message_id = body.get("messageId") or derive_id("msg", command.id)
    if body["kind"] == "resolution":
        if "coordinator" not in command.roles:
            raise ProtocolError("FORBIDDEN", "a coordinator resolves an ambiguity")
        if body.get("resolves") not in item.open_ambiguities:
            raise ProtocolError("VALIDATION_ERROR",
                                f"body.resolves must name an open ambiguity of {item.id}",
                                {"path": "body.resolves",
                                 "openAmbiguities": list(item.open_ambiguities)})
    return [_draft(item, "conversation.message_posted", {
        "messageId": message_id, "kind": body["kind"], "text": body["text"],
        "author": command.actor, "resolves": body.get("resolves")})]


def revoke_for_session(view: View, agent_id: str, now: datetime, policy: Policy) -> list:
    """A replacement session revokes the agent's open leases; each WorkItem returns to
    `queued` under the same owner before the new runtime may start it (§11.3)."""
    start_by = _at(now, policy.start_window_seconds)
    return [_draft(item, "lease.revoked", {"leaseId": item.lease.id, "reason": "session replaced",
                                           "returnTo": QUEUED, "startBy": start_by})
            for item in view.items.values()
            if item.state == ACTIVE and item.live_lease and item.lease.agent_id == agent_id]


HANDLERS = {
    "mission.create": mission_create,
    "mission.create_child": mission_create_child,
    "mission.approve": mission_approve,
    "mission.fail": _mission_end("mission.failed", "work.failed", child_failed=True),
    "mission.cancel": _mission_end("mission.cancelled", "work.cancelled", child_failed=True),
    "work.propose": work_propose,
    "work.authorize": work_authorize,
    "work.revise_contract": work_revise_contract,
    "work.offer": work_offer,
    "work.decline_offer": work_decline_offer,
    "work.accept_offer": work_accept_offer,
    "approval.grant_execution": approval_grant_execution,
    "work.start": work_start,
    "lease.renew": lease_renew,
    "work.progress": work_progress,
    "work.checkpoint": work_checkpoint,
    "work.block": work_block,
    "work.unblock": work_unblock,
    "work.submit": work_submit,
    "work.accept_result": work_accept_result,
    "work.fail": work_fail,
    "work.cancel": work_cancel,
    "work.request_preemption": work_request_preemption,
    "conversation.post": conversation_post,
    "capability.rotate": _reissue_token("capability.rotated"),
    "capability.narrow": _reissue_token("capability.narrowed"),
}
assert set(HANDLERS) == set(ROLES)
