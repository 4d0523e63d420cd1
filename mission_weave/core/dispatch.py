"""Automatic dispatch (§10.3; PROTOCOL §2, the commands the server issues for itself):
when a Mission asks for it (`autoDispatch`), a WorkItem whose sequential offer was
declined or ran out is offered to the next pending candidate, and a failed WorkItem
that is due a retry is offered again. Pure: the candidates' facts come in `Context`.

Two callers: `work.decline_offer` (the next offer is appended in the decline's own
transaction) and the sweeper (offers that all expired, failed items due a retry).
"""

from . import dag, ranking, retries, state
from .commands import base
from .state import FAILED, MISSION_ACTIVE, OFFERED, View, WorkItem

# The rules an offer made by automatic dispatch records, besides its trigger.
NEXT_RULES = ("auto-dispatch", "next-pending-candidate", ranking.WORKER_ROLE,
              ranking.CAPABILITY_REQUIRED, ranking.CAPACITY, "mode:sequential")
RETRY_RULES = ("auto-dispatch", "retry", "auto-candidates", *ranking.AUTO_RULES, "mode:sequential")


def redispatch(view: View, item: WorkItem, context) -> list:
    """The next sequential `work.offered` for `item` (after any fencing it needs), or []
    when there is nothing to do: no auto-dispatch, a live offer remains, the Mission is
    closed, the dependencies are not met, no retry is due, or no candidate is eligible."""
    trigger = _trigger(view, item, context.now)
    if trigger is None:
        return []
    ttl = context.policy.presence_ttl_seconds
    chosen, pending, skipped = _next_in_queue(item, context, ttl)
    rules = NEXT_RULES
    if chosen is None and trigger == "retry":
        # The queue is spent: rank every candidate the caller supplied (the Group's workers).
        ranked = ranking.rank(item.contract, list(context.candidates.values()), context.now, ttl,
                              RETRY_RULES)
        if ranked:
            chosen = ranked[0]["agentId"]
            pending = [entry["agentId"] for entry in ranked[1:]]
            rules = RETRY_RULES
    if chosen is None:
        return []
    expires_at = base.after(context.now, context.policy.auto_offer_seconds)
    rank = max((o.rank for o in item.offers), default=0) + 1 + len(skipped)
    offer = {"agentId": chosen, "expiresAt": expires_at, "rank": rank,
             "selectionBasis": ranking.basis(item.contract, context.candidates[chosen], rules,
                                             context.now, ttl)}
    data = {"offers": [offer], "mode": "sequential", "pendingCandidates": pending,
            "autoDispatch": {"after": trigger, "skipped": skipped}}
    if item.start_within_seconds:
        data["startWithinSeconds"] = item.start_within_seconds
    return [base.item_draft(item, "work.offered", data)]


def after(view: View, drafts: list, context) -> list:
    """`redispatch` as things will stand once `drafts` are appended (a decline's own
    transaction): the drafts are evolved on a copy of the view, which is left as it was."""
    if not drafts:
        return []
    future = view.copy()
    for draft in drafts:
        state.evolve(future, state.Event(draft.type, draft.data, context.now, draft.mission_id,
                                         draft.work_item_id))
    item = future.items.get(drafts[-1].work_item_id)
    return redispatch(future, item, context) if item is not None else []


def _trigger(view: View, item: WorkItem, now) -> str | None:
    """Why `item` should be offered again now, or None."""
    mission = view.missions.get(item.mission_id)
    if mission is None or not mission.auto_dispatch or mission.state != MISSION_ACTIVE:
        return None
    if item.owner is not None or item.child_mission_id:
        return None  # an owner, live or still to be fenced, is the sweeper's first concern
    if not dag.dependencies_met(item.dependency_policy, base.dependency_states(view, item)):
        return None
    if item.state == OFFERED and not item.live_offers(now):
        expired = any(o.status == "live" for o in item.offers)  # live but past its expiry
        return "expired" if expired else "declined"
    if item.state == FAILED and item.retry_at is not None and item.retry_at <= now \
            and retries.refusal(item, now) is None:  # §11.4: attempts, deadline, cost
        return "retry"
    return None


def _next_in_queue(item: WorkItem, context, ttl: int) -> tuple:
    """(the first eligible pending candidate or None, those after it, the skipped ones)."""
    skipped = []
    for index, agent_id in enumerate(item.offer_queue):
        candidate = context.candidates.get(agent_id)
        reasons = (["member"] if candidate is None else
                   ranking.ineligibility(item.contract, candidate, context.now, ttl))
        if not reasons:
            return agent_id, list(item.offer_queue[index + 1:]), skipped
        skipped.append({"agentId": agent_id, "failedRules": reasons})
    return None, [], skipped
