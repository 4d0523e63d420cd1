"""Offers and acceptance (§10.3): explicit or ranked placement, exclusive work offered
sequentially to the highest-ranked eligible worker, fencing an expired owner, decline,
first-acceptance-wins, the capacity backstop."""


from collections.abc import Sequence
from datetime import datetime

from mission_weave.protocol.errors import ProtocolError
from mission_weave.protocol.timefmt import format_time, parse_time

from .. import dispatch, fencing, ranking
from ..json_types import JsonObject
from ..ranking import Candidate
from ..state import QUEUED, Offer, View, WorkItem
from .base import (
    Command,
    Context,
    Draft,
    active_mission,
    after,
    item_draft,
    require_dependencies,
    target_item,
)


def selection_basis(item: WorkItem, candidate: Candidate, rules: Sequence[str],
                    context: Context) -> JsonObject:
    """§10.3's structured basis for offering `item` to `candidate` (see ranking.py)."""
    return ranking.basis(item.contract, candidate, rules, context.now,
                         context.policy.presence_ttl_seconds)


# Who an offer goes to now ([{agentId, selectionBasis}]) and who is queued after them.
Placement = tuple[list[JsonObject], list[str]]


def _explicit_placement(item: WorkItem, body: JsonObject, context: Context) -> Placement:
    """Named candidates, in the coordinator's order: ([{agentId, selectionBasis}], pending)."""
    candidates = list(body["candidates"])
    for agent_id in candidates:
        candidate = context.candidates.get(agent_id)
        if candidate is None or "worker" not in candidate.roles:
            raise ProtocolError("VALIDATION_ERROR",
                                f"candidate {agent_id} is not a worker in this Group",
                                {"path": "body.candidates", "candidate": agent_id})
    mode = body["mode"]
    if ranking.exclusive(item.contract):  # sequential: work_offer refuses an urgent one
        return _exclusive_placement(item, candidates, context)
    if mode == "urgent":
        limit = min(body.get("candidateCount", len(candidates)),
                    context.policy.max_urgent_candidates)
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


def _exclusive_placement(item: WorkItem, candidates: list[str], context: Context) -> Placement:
    """Named candidates of an exclusive WorkItem (§10.3): the highest-ranked eligible one
    is offered first and the other eligible ones queued by rank, whatever order the
    Coordinator named them in; those not eligible now are queued last, in that order
    (automatic dispatch skips them while they are not). None eligible: refused."""
    policy = context.policy
    rules = ["explicit-candidates", *ranking.AUTO_RULES, ranking.EXCLUSIVE, "mode:sequential"]
    named = [context.candidates[agent_id] for agent_id in candidates]
    ranked = ranking.rank(item.contract, named, context.now, policy.presence_ttl_seconds, rules)
    if not ranked:
        raise ProtocolError(
            "TRANSITION_NOT_PERMITTED",
            f"WorkItem {item.id} is exclusive: it is offered to the highest-ranked eligible "
            "worker, and no candidate named is eligible now",
            {"reason": "no eligible candidate",
             "excluded": ranking.excluded(item.contract, named, context.now,
                                          policy.presence_ttl_seconds)})
    order = [entry["agentId"] for entry in ranked]
    return ranked[:1], order[1:] + [a for a in candidates if a not in order]


def _auto_placement(item: WorkItem, body: JsonObject, context: Context) -> Placement:
    """candidates "auto": the Group's members ranked by ranking.py; sequential offers the
    best and queues the rest, urgent offers the best `candidateCount` (bounded)."""
    mode, policy = body["mode"], context.policy
    exclusive = [ranking.EXCLUSIVE] if ranking.exclusive(item.contract) else []
    rules = ["auto-candidates", *ranking.AUTO_RULES, *exclusive, f"mode:{mode}"]
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


def work_offer(view: View, command: Command, context: Context) -> list[Draft]:
    item = target_item(view, command)
    active_mission(view, item.mission_id)
    # §11.4's attempt, backoff, cost and deadline budgets limit AUTOMATIC retries only
    # (dispatch.py): a failed item returns control to the Coordinator (§10.2), whose
    # explicit offer is its own decision and passes at any time, after a permanent
    # failure too.
    if item.child_mission_id:
        # Like work.unblock: while the linked child runs the parent stays blocked, or the
        # child's approval could never verify it (§10.2). Cancel the child Mission first.
        child = item.child_mission_id
        raise ProtocolError("TRANSITION_NOT_PERMITTED",
                            f"WorkItem {item.id} waits on its child Mission {child}",
                            {"childMissionId": child})
    body = command.body
    if body["mode"] == "urgent" and ranking.exclusive(item.contract):
        raise ProtocolError(
            "VALIDATION_ERROR",
            f"WorkItem {item.id} is exclusive: exclusive work is offered sequentially, to the "
            "highest-ranked eligible worker first (§10.3), never to an urgent set of "
            'candidates; send body.mode "sequential"', {"path": "body.mode", "exclusive": True})
    expires_at = parse_time(body["expiresAt"])
    if expires_at <= context.now:
        raise ProtocolError("VALIDATION_ERROR", "body.expiresAt must be in the future",
                            {"path": "body.expiresAt"})
    require_dependencies(view, item)
    mode = body["mode"]
    placement = _auto_placement if body["candidates"] == "auto" else _explicit_placement
    addressed, pending = placement(item, body, context)
    offers = [{"agentId": entry["agentId"], "expiresAt": format_time(expires_at), "rank": rank,
               "selectionBasis": entry["selectionBasis"]}
              for rank, entry in enumerate(addressed, start=1)]
    drafts = dispatch.fence(item, context.now)  # a missed start-by counts its attempt
    live = [o.agent_id for o in item.live_offers(context.now)]
    if live:
        drafts.append(item_draft(item, "work.offer_withdrawn",
                                 {"agentIds": live, "reason": "replaced"}))
    data = {"offers": offers, "mode": mode, "pendingCandidates": pending}
    if body.get("startWithinSeconds"):
        data["startWithinSeconds"] = body["startWithinSeconds"]
    return [*drafts, item_draft(item, "work.offered", data)]


def _own_live_offer(item: WorkItem, command: Command, now: datetime) -> Offer:
    offer = next((o for o in item.offers if o.agent_id == command.agent_id), None)
    if offer is None or not offer.is_live(now):
        status = "not addressed to you" if offer is None else (
            "expired" if offer.status == "live" else offer.status)
        raise ProtocolError("OFFER_NOT_LIVE", f"the offer of WorkItem {item.id} is {status}",
                            {"status": status})
    return offer


def work_decline_offer(view: View, command: Command, context: Context) -> list[Draft]:
    item = target_item(view, command)
    _own_live_offer(item, command, context.now)
    declined = [item_draft(item, "work.offer_declined", {"agentId": command.agent_id,
                                                         "reason": command.body["reason"],
                                                         "detail": command.body.get("detail")})]
    # Under autoDispatch the next pending candidate is offered in this same transaction.
    return declined + dispatch.after(view, declined, context)


def work_accept_offer(view: View, command: Command, context: Context) -> list[Draft]:
    item = target_item(view, command)
    active_mission(view, item.mission_id)
    revision = command.body["contractRevision"]
    if item.state == QUEUED:
        return _renew_acceptance(item, command, revision, context)
    _own_live_offer(item, command, context.now)
    _require_no_open_ambiguity(item)
    if revision != item.contract_revision:
        raise ProtocolError("CONTRACT_REVISION_MISMATCH",
                            f"the contract is at revision {item.contract_revision}, not {revision}",
                            {"contractRevision": item.contract_revision})
    require_dependencies(view, item)
    _require_deadline_ahead(item, context.now)
    _check_capacity(command.agent_id, context)
    window = item.start_within_seconds or context.policy.start_window_seconds
    losers = [o.agent_id for o in item.live_offers(context.now) if o.agent_id != command.agent_id]
    drafts = [item_draft(item, "work.offer_accepted", {
        "agentId": command.agent_id, "ownershipEpoch": item.ownership_epoch + 1,
        "startBy": after(context.now, window), "withdrawn": losers,
        "contractRevision": revision})]
    if losers:
        drafts.append(item_draft(item, "work.offer_withdrawn",
                                 {"agentIds": losers, "reason": f"accepted by {command.agent_id}"}))
    return drafts


def _require_deadline_ahead(item: WorkItem, now: datetime) -> None:
    """§10.3: an acceptance is a credible commitment; past the contract's deadline none
    can be made."""
    deadline = parse_time(item.contract["deadline"])
    if deadline <= now:
        raise ProtocolError("TRANSITION_NOT_PERMITTED",
                            f"the contract's deadline {item.contract['deadline']} has passed: "
                            "the Coordinator revises the contract or cancels the WorkItem",
                            {"reason": "deadline", "deadline": item.contract["deadline"]})


def _require_no_open_ambiguity(item: WorkItem) -> None:
    """§10.1: while an essential ambiguity is open the Worker MUST NOT accept the WorkItem,
    neither at first nor renewed after a revision. Only the Coordinator's corrected
    contract (work.revise_contract) or a replacement WorkItem resolves it."""
    if item.open_ambiguities:
        raise ProtocolError(
            "TRANSITION_NOT_PERMITTED",
            "an essential ambiguity is open in the WorkItem Conversation; the Coordinator "
            "resolves it with a corrected contract (work.revise_contract) or a replacement "
            "WorkItem before the WorkItem is accepted (§10.1)",
            {"openAmbiguities": list(item.open_ambiguities)})


def _check_capacity(agent_id: str | None, context: Context) -> None:
    """The server's backstop to the Worker's own admission control (§10.3, §11.1): an
    acceptance may not take the Agent past its Agent Card's maxConcurrency, counting the
    WorkItems it owns in queued or active in every Group (facts the shell supplies). An
    item whose lease timed out (`lease.expired`) has no live owner and is not counted
    (§11.5: it is the Coordinator's to reassign)."""
    candidate = context.candidates.get(agent_id) if agent_id is not None else None
    if candidate is None:
        return
    if candidate.load >= candidate.max_concurrency:
        raise ProtocolError(
            "TRANSITION_NOT_PERMITTED",
            f"accepting would exceed your Agent Card's maxConcurrency of "
            f"{candidate.max_concurrency} ({candidate.load} WorkItems owned in queued or active)",
            {"reason": "capacity", "maxConcurrency": candidate.max_concurrency,
             "current": candidate.load})


def _renew_acceptance(item: WorkItem, command: Command, revision: int,
                      context: Context) -> list[Draft]:
    if item.owner != command.agent_id:
        # Not the owner: a loser whose offer was withdrawn, or never addressed (§10.3).
        _own_live_offer(item, command, context.now)
    fencing.check_ownership(item, command.agent_id, item.ownership_epoch, context.now)
    if item.accepted_revision == item.contract_revision:
        raise ProtocolError("OFFER_NOT_LIVE",
                            f"you already accepted revision {item.contract_revision}; "
                            "there is no offer to accept")
    _require_no_open_ambiguity(item)
    _require_deadline_ahead(item, context.now)
    if revision != item.contract_revision:
        raise ProtocolError("CONTRACT_REVISION_MISMATCH",
                            f"the contract is at revision {item.contract_revision}, not {revision}",
                            {"contractRevision": item.contract_revision})
    return [item_draft(item, "work.contract_accepted",
                       {"agentId": command.agent_id, "contractRevision": revision})]
