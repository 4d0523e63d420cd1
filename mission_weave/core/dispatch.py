"""Automatic dispatch (§10.3, §11.4, §11.5; PROTOCOL §2, the commands the server issues
for itself): when a Mission asks for it (`autoDispatch`),

- a WorkItem whose sequential offer was declined or ran out is offered to the next
  pending candidate (`after: declined | expired`);
- a failed WorkItem whose backoff ended is offered again within its retry budget
  (`after: retry`);
- a WorkItem whose owner timed out, its Execution Lease expired or its start-by deadline
  passed, is reassigned at once from its latest checkpoint (§11.5), the expired owner
  fenced first (`after: lease | start_by`): a timed-out attempt counts against the retry
  budget as a failure does, so when the budget is spent it ends `failed` with system
  Evidence instead (§11.4: "Exhaustion ... emits work.failed with Evidence"), and when
  nobody is eligible to take it now it ends `failed` with a `retryAt`, so that the retry
  rule offers it later: a timed-out WorkItem is never left without a deadline the
  sweeper watches.

Automatic dispatch is held to the retry budgets; a Coordinator's explicit `work.offer` is
not (retries.py). Pure: the candidates' facts come in `Context`.

Two callers: `work.decline_offer` (the next offer is appended in the decline's own
transaction) and the sweeper (offers that all expired, failed items due a retry, owners
that timed out).
"""

from mission_weave.protocol.timefmt import format_time

from . import fencing, ranking, retries, state
from .commands import base
from .state import ACTIVE, FAILED, MISSION_ACTIVE, OFFERED, QUEUED, View, WorkItem

# The rules an offer made by automatic dispatch records, besides its trigger.
NEXT_RULES = ("auto-dispatch", "next-pending-candidate", ranking.WORKER_ROLE,
              ranking.CAPABILITY_REQUIRED, ranking.CAPACITY, "mode:sequential")
RETRY_RULES = ("auto-dispatch", "retry", "auto-candidates", *ranking.AUTO_RULES, "mode:sequential")
REASSIGN_RULES = ("auto-dispatch", "reassign", "auto-candidates", *ranking.AUTO_RULES,
                  "expired-owner-last", "mode:sequential")

LEASE, START_BY = "lease", "start_by"  # the timeouts, named as work.ownership_expired names them
TIMEOUTS = frozenset({LEASE, START_BY})


def timed_out(item: WorkItem, now) -> str | None:
    """`lease` or `start_by` when `item` is active or queued without a live owner: its
    lease timed out or its start-by deadline passed, whether the owner has been fenced
    yet or not; otherwise None."""
    if item.state in (ACTIVE, QUEUED) and not fencing.owner_is_live(item, now):
        return LEASE if item.state == ACTIVE else START_BY
    return None


def redispatch(view: View, item: WorkItem, context) -> list:
    """What automatic dispatch appends for `item` now: the next sequential `work.offered`
    (after any fencing it needs), a timed-out item's `work.failed`, or [] when there is
    nothing to do: no auto-dispatch, a live owner or offer remains, the Mission is closed,
    the dependencies are not met (or not in the view), no retry is due, or no candidate
    is eligible."""
    trigger = _trigger(view, item, context.now)
    if trigger is None:
        return []
    if trigger in TIMEOUTS:
        return _reassign(item, trigger, context)
    ttl = context.policy.presence_ttl_seconds
    chosen, pending, skipped = _next_in_queue(item, context, ttl)
    rules = NEXT_RULES
    if chosen is None and trigger == "retry":
        # The queue is spent: rank every candidate the caller supplied (the Group's workers).
        chosen, pending, rules = _best_ranked(item, context, RETRY_RULES)
    if chosen is None:
        return []
    return [_offered(item, chosen, pending, skipped, rules, {"after": trigger}, context)]


def after(view: View, drafts: list, context) -> list:
    """`redispatch` as things will stand once `drafts` are appended (a decline's own
    transaction): the drafts are evolved on a copy of the view, which is left as it was."""
    if not drafts:
        return []
    future, item = evolved(view, drafts, drafts[-1].work_item_id, context.now)
    return redispatch(future, item, context) if item is not None else []


def evolved(view: View, drafts: list, item_id: str, now) -> tuple:
    """(a copy of `view` with `drafts` evolved into it, its WorkItem `item_id` or None)."""
    future = view.copy()
    for draft in drafts:
        state.evolve(future, state.Event(draft.type, draft.data, now, draft.mission_id,
                                         draft.work_item_id))
    return future, future.items.get(item_id)


def _trigger(view: View, item: WorkItem, now) -> str | None:
    """Why `item` should be dispatched now, or None."""
    mission = view.missions.get(item.mission_id)
    if mission is None or not mission.auto_dispatch or mission.state != MISSION_ACTIVE:
        return None
    if item.child_mission_id or fencing.owner_is_live(item, now):
        return None
    if not base.dependencies_met(view, item):  # a dependency not in the view is not met
        return None
    timeout = timed_out(item, now)
    if timeout is not None:
        return timeout
    if item.owner is not None:
        return None  # an owner still to be fenced that no timeout explains: leave it be
    if item.state == OFFERED and not item.live_offers(now):
        expired = any(o.status == "live" for o in item.offers)  # live but past its expiry
        return "expired" if expired else "declined"
    if item.state == FAILED and item.retry_at is not None and item.retry_at <= now \
            and retries.refusal(item, now) is None:  # §11.4: attempts, deadline, cost
        return "retry"
    return None


def _reassign(item: WorkItem, trigger: str, context) -> list:
    """§11.5 for a timed-out item: reassign it at once to the next candidate, the expired
    owner fenced first, resuming from the latest checkpoint; or end the attempt `failed`."""
    now = context.now
    # Called on the item as its expiry left it; should its lease still be open, close it.
    closing = [base.item_draft(item, "lease.expired", {"leaseId": item.lease.id,
                                                       "reason": "timeout"})
               ] if item.live_lease is not None else []
    spent = retries.budget_left(item, now)  # the timed-out attempt is in item.attempts
    if spent is not None:
        return closing + [_timeout_failure(item, trigger, retries.Outcome(None, spent), now)]
    ttl = context.policy.presence_ttl_seconds
    chosen, pending, skipped = _next_in_queue(item, context, ttl)
    rules = NEXT_RULES
    if chosen is None:
        chosen, pending, rules = _best_ranked(item, context, REASSIGN_RULES,
                                              last=item.last_owner)
    if chosen is None:
        # Nobody may take it now: the timeout ends the attempt like a failure, and the
        # retry rule offers it once the backoff ends (or it is exhausted, as work.fail is).
        outcome = retries.after_failure(item, False, now)
        return closing + [_timeout_failure(item, trigger, outcome, now)]
    how = {"after": trigger, "resumeFrom": item.last_checkpoint}
    return base.fence_expired_owner(item, now) + [
        _offered(item, chosen, pending, skipped, rules, how, context)]


def _timeout_failure(item: WorkItem, trigger: str, outcome, now) -> base.Draft:
    """`work.failed` by the server for a timed-out attempt, with its system Evidence."""
    agent = item.owner or item.last_owner
    if trigger == LEASE and item.lease is not None:
        reason = "lease timeout"
        result = (f"Execution Lease {item.lease.id} of agent {item.lease.agent_id} (ownership "
                  f"epoch {item.lease.ownership_epoch}) expired at "
                  f"{format_time(item.lease.expires_at)} without renewal")
    else:
        reason = "start-by deadline missed"
        result = (f"agent {agent} (ownership epoch {item.ownership_epoch}) did not start the "
                  f"WorkItem by its start-by deadline")
    if outcome.exhausted:
        result += f"; no automatic retry is left (exhausted by {outcome.exhausted_by})"
    else:
        result += (f"; no eligible worker to reassign it to now: offered again from "
                   f"{format_time(outcome.retry_at)}")
    evidence = {"id": base.derive_id("ev", item.id, f"{trigger}/{item.ownership_epoch}/"
                                                    f"{item.revision}"),
                "subject": f"workItem:{item.id}", "criteria": [],
                "method": "lease-timeout" if reason == "lease timeout" else "start-by-deadline",
                "result": result, "producer": "system", "timestamp": format_time(now),
                "artifacts": []}
    return base.item_draft(item, "work.failed", {
        "evidence": [evidence], "by": "system", "reason": reason, "permanent": False,
        "attempt": item.attempts,
        "retryAt": format_time(outcome.retry_at) if outcome.retry_at else None,
        "exhausted": outcome.exhausted, "exhaustedBy": outcome.exhausted_by})


def _offered(item: WorkItem, chosen: str, pending: list, skipped: list, rules, how: dict,
             context) -> base.Draft:
    ttl = context.policy.presence_ttl_seconds
    expires_at = base.after(context.now, context.policy.auto_offer_seconds)
    rank = max((o.rank for o in item.offers), default=0) + 1 + len(skipped)
    offer = {"agentId": chosen, "expiresAt": expires_at, "rank": rank,
             "selectionBasis": ranking.basis(item.contract, context.candidates[chosen], rules,
                                             context.now, ttl)}
    data = {"offers": [offer], "mode": "sequential", "pendingCandidates": pending,
            "autoDispatch": {**how, "skipped": skipped}}
    if item.start_within_seconds:
        data["startWithinSeconds"] = item.start_within_seconds
    return base.item_draft(item, "work.offered", data)


def _best_ranked(item: WorkItem, context, rules, last: str | None = None) -> tuple:
    """(the best-ranked eligible candidate or None, the rest in order, the rules): every
    candidate the caller supplied (the Group's workers) ranked; `last` (the owner that
    just timed out) after every other eligible one."""
    ranked = ranking.rank(item.contract, list(context.candidates.values()), context.now,
                          context.policy.presence_ttl_seconds, rules)
    order = [e["agentId"] for e in ranked if e["agentId"] != last]
    order += [e["agentId"] for e in ranked if e["agentId"] == last]
    if not order:
        return None, [], rules
    return order[0], order[1:], rules


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
