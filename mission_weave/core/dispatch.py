"""Automatic dispatch (§10.3, §11.4, §11.5; PROTOCOL §2, the commands the server issues
for itself): when a Mission asks for it (`autoDispatch`),

- a WorkItem whose sequential offer was declined or ran out is offered to the next
  pending candidate (`after: declined | expired`);
- a failed WorkItem whose backoff ended is offered again within its retry budget
  (`after: retry`, `resumeFrom`: its latest checkpoint);
- a WorkItem whose owner timed out, its Execution Lease expired or its start-by deadline
  passed, has its attempt ended: the expired owner fenced, then `work.failed` by the
  server with system Evidence (`reason: "lease timeout" | "start-by deadline missed"`),
  whose `retryAt` is the contract's backoff after that attempt, so that the retry rule
  above offers it again once it is due (§11.5: reassigned, with a higher Ownership Epoch,
  from the latest checkpoint), or `exhausted` when the retry budget is spent (§11.4:
  "Exhaustion ... emits work.failed with Evidence"). A timeout is a failed attempt like
  any other: a timed-out WorkItem is never offered again sooner than a failed one would
  be, and never left without a deadline the sweeper watches.

An `exclusive` WorkItem (§10.3: "offered sequentially to the highest-ranked eligible
Worker") goes to the highest-ranked eligible candidate at every turn: the pending queue is
ranked again when its next offer is made, instead of being taken in order.

Automatic dispatch is held to the retry budgets; a Coordinator's explicit `work.offer` is
not (retries.py). Pure: the candidates' facts come in `Context`.

Three callers: `work.decline_offer` (the next offer is appended in the decline's own
transaction), the sweeper (offers that all expired, failed items due a retry, owners
that timed out) and a new session of an owner whose lease had already expired
(`commands.revoke_for_session`, through the sweeper's decision).
"""

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from mission_weave.protocol.timefmt import format_time

from . import fencing, ranking, retries, state
from .commands import base
from .evolve import evolve
from .json_types import JsonObject
from .state import ACTIVE, FAILED, MISSION_ACTIVE, OFFERED, QUEUED, View, WorkItem

# The rules an offer made by automatic dispatch records, besides its trigger.
NEXT_RULES = ("auto-dispatch", "next-pending-candidate", ranking.WORKER_ROLE,
              ranking.CAPABILITY_REQUIRED, ranking.CAPACITY, "mode:sequential")
NEXT_EXCLUSIVE_RULES = ("auto-dispatch", "next-pending-candidate", *ranking.AUTO_RULES,
                        ranking.EXCLUSIVE, "mode:sequential")
RETRY_RULES = ("auto-dispatch", "retry", "auto-candidates", *ranking.AUTO_RULES, "mode:sequential")

LEASE, START_BY = "lease", "start_by"  # the timeouts, named as work.ownership_expired names them
TIMEOUTS = frozenset({LEASE, START_BY})


def timed_out(item: WorkItem, now: datetime) -> str | None:
    """`lease` or `start_by` when `item` is active or queued without a live owner: its
    lease timed out or its start-by deadline passed, whether the owner has been fenced
    yet or not; otherwise None."""
    if item.state in (ACTIVE, QUEUED) and not fencing.owner_is_live(item, now):
        return LEASE if item.state == ACTIVE else START_BY
    return None


def fence(item: WorkItem, now: datetime) -> list[base.Draft]:
    """`base.fence_expired_owner` (what an offer appends first when the owner is no longer
    live: `lease.expired` for a lease still open, `work.ownership_expired`), with the
    attempt a missed start-by deadline used up recorded in its `work.ownership_expired`
    (retries.py), as the sweeper records it: the count is the same whoever notices the
    deadline first. Shared by `work.offer` and automatic dispatch."""
    return [replace(draft, data={**draft.data, "attempt": retries.missed_start_attempt(item)})
            if draft.type == "work.ownership_expired" and draft.data["reason"] == START_BY
            else draft for draft in base.fence_expired_owner(item, now)]


def redispatch(view: View, item: WorkItem, context: base.Context) -> list[base.Draft]:
    """What automatic dispatch appends for `item` now: the next sequential `work.offered`,
    a timed-out attempt's end (fencing, then `work.failed`), or [] when there is nothing
    to do: no auto-dispatch, a live owner or offer remains, the Mission is closed, the
    dependencies of an offer are not met (or not in the view), no retry is due, or no
    candidate is eligible."""
    trigger = _trigger(view, item, context.now)
    if trigger is None:
        return []
    if trigger in TIMEOUTS:
        return _end_attempt(item, trigger, context.now)
    ttl = context.policy.presence_ttl_seconds
    chosen, pending, skipped = _next_in_queue(item, context, ttl)
    rules: tuple[str, ...] = (NEXT_EXCLUSIVE_RULES if ranking.exclusive(item.contract)
                              else NEXT_RULES)
    how: JsonObject = {"after": trigger}
    if trigger == "retry":
        # A retry resumes from the latest checkpoint, whoever takes it (§11.5).
        how["resumeFrom"] = item.last_checkpoint
        if chosen is None:
            # The queue is spent: rank every candidate the caller supplied (the Group's
            # workers), best first.
            chosen, pending, rules = _best_ranked(item, context, _with_exclusive(
                item, RETRY_RULES))
    if chosen is None:
        return []
    return [_offered(item, chosen, pending, skipped, rules, how, context)]


def after(view: View, drafts: list[base.Draft], context: base.Context) -> list[base.Draft]:
    """`redispatch` as things will stand once `drafts` are appended (a decline's own
    transaction): the drafts are evolved on a copy of the view, which is left as it was."""
    if not drafts:
        return []
    future, item = evolved(view, drafts, drafts[-1].work_item_id, context.now)
    return redispatch(future, item, context) if item is not None else []


def evolved(view: View, drafts: Sequence[base.Draft], item_id: str | None,
            now: datetime) -> tuple[View, WorkItem | None]:
    """(a copy of `view` with `drafts` evolved into it, its WorkItem `item_id` or None)."""
    future = view.copy()
    for draft in drafts:
        evolve(future, state.Event(draft.type, draft.data, now, draft.mission_id,
                                   draft.work_item_id))
    return future, (future.items.get(item_id) if item_id is not None else None)


def _trigger(view: View, item: WorkItem, now: datetime) -> str | None:
    """Why `item` should be dispatched now, or None."""
    mission = view.missions.get(item.mission_id)
    if mission is None or not mission.auto_dispatch or mission.state != MISSION_ACTIVE:
        return None
    if item.child_mission_id or fencing.owner_is_live(item, now):
        return None
    timeout = timed_out(item, now)
    if timeout is not None:
        return timeout  # ending the attempt offers nothing: no dependency to check yet
    if not base.dependencies_met(view, item):  # a dependency not in the view is not met
        return None
    if item.owner is not None:
        return None  # an owner still to be fenced that no timeout explains: leave it be
    if item.state == OFFERED and not item.live_offers(now):
        expired = any(o.status == "live" for o in item.offers)  # live but past its expiry
        return "expired" if expired else "declined"
    if item.state == FAILED and item.retry_at is not None and item.retry_at <= now \
            and retries.refusal(item, now) is None:  # §11.4: attempts, deadline, cost
        return "retry"
    return None


def _end_attempt(item: WorkItem, trigger: str, now: datetime) -> list[base.Draft]:
    """§11.4, §11.5 for a timed-out item: its lease closed and its owner fenced, as an
    offer would (whatever the sweep or an earlier decision has not done yet), then the
    attempt ends `failed`: offered again after the contract's backoff, or exhausted."""
    fenced = fence(item, now)
    attempt = next((d.data["attempt"] for d in fenced if "attempt" in d.data), item.attempts)
    outcome = retries.after_failure(state.replace(item, attempts=attempt), False, now)
    return [*fenced, _timeout_failure(item, attempt, trigger, outcome, now)]


def _timeout_failure(item: WorkItem, attempt: int, trigger: str, outcome: retries.Outcome,
                     now: datetime) -> base.Draft:
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
    result += f"; attempt {attempt} of {item.contract['retry']['maxAttempts']}"
    if outcome.exhausted:
        result += f"; no automatic retry is left (exhausted by {outcome.exhausted_by})"
    else:
        assert outcome.retry_at is not None, "a retry that is not exhausted has its time"
        result += (f"; offered again automatically from {format_time(outcome.retry_at)}, "
                   f"after the contract's backoff")
    evidence = {"id": base.derive_id("ev", item.id, f"{trigger}/{item.ownership_epoch}/"
                                                    f"{item.revision}"),
                "subject": f"workItem:{item.id}", "criteria": [],
                "method": "lease-timeout" if reason == "lease timeout" else "start-by-deadline",
                "result": result, "producer": "system", "timestamp": format_time(now),
                "artifacts": []}
    return base.item_draft(item, "work.failed", {
        "evidence": [evidence], "by": "system", "reason": reason, "permanent": False,
        "attempt": attempt,
        "retryAt": format_time(outcome.retry_at) if outcome.retry_at else None,
        "exhausted": outcome.exhausted, "exhaustedBy": outcome.exhausted_by})


def _offered(item: WorkItem, chosen: str, pending: list[str], skipped: list[JsonObject],
             rules: Sequence[str], how: JsonObject,
             context: base.Context) -> base.Draft:
    ttl = context.policy.presence_ttl_seconds
    expires_at = base.after(context.now, context.policy.auto_offer_seconds)
    rank = max((o.rank for o in item.offers), default=0) + 1 + len(skipped)
    offer = {"agentId": chosen, "expiresAt": expires_at, "rank": rank,
             "selectionBasis": ranking.basis(item.contract, context.candidates[chosen], rules,
                                             context.now, ttl)}
    data: JsonObject = {"offers": [offer], "mode": "sequential", "pendingCandidates": pending,
            "autoDispatch": {**how, "skipped": skipped}}
    if item.start_within_seconds:
        data["startWithinSeconds"] = item.start_within_seconds
    return base.item_draft(item, "work.offered", data)


def _with_exclusive(item: WorkItem, rules: tuple[str, ...]) -> tuple[str, ...]:
    """`rules` with the exclusive rule before the mode, for an exclusive item."""
    if not ranking.exclusive(item.contract):
        return rules
    return (*rules[:-1], ranking.EXCLUSIVE, rules[-1])


def _best_ranked(item: WorkItem, context: base.Context,
                 rules: tuple[str, ...]) -> tuple[str | None, list[str], tuple[str, ...]]:
    """(the best-ranked eligible candidate or None, the rest in order, the rules): every
    candidate the caller supplied (the Group's workers) ranked."""
    ranked = ranking.rank(item.contract, list(context.candidates.values()), context.now,
                          context.policy.presence_ttl_seconds, rules)
    order = [e["agentId"] for e in ranked]
    if not order:
        return None, [], rules
    return order[0], order[1:], rules


# (the candidate chosen or None, those queued after it, the skipped ones with their rules)
Next = tuple[str | None, list[str], list[JsonObject]]


def _next_in_queue(item: WorkItem, context: base.Context, ttl: int) -> Next:
    """(the next eligible pending candidate or None, those after it, the skipped ones):
    the first in the queue's order, or for an exclusive item the highest-ranked (§10.3),
    the other eligible ones after it by rank."""
    if ranking.exclusive(item.contract):
        return _highest_ranked_in_queue(item, context, ttl)
    skipped: list[JsonObject] = []
    for index, agent_id in enumerate(item.offer_queue):
        candidate = context.candidates.get(agent_id)
        reasons = (["member"] if candidate is None else
                   ranking.ineligibility(item.contract, candidate, context.now, ttl))
        if not reasons:
            return agent_id, list(item.offer_queue[index + 1:]), skipped
        skipped.append({"agentId": agent_id, "failedRules": reasons})
    return None, [], skipped


def _highest_ranked_in_queue(item: WorkItem, context: base.Context, ttl: int) -> Next:
    known = [context.candidates[a] for a in item.offer_queue if a in context.candidates]
    order = [e["agentId"] for e in ranking.rank(item.contract, known, context.now, ttl)]
    skipped = [{"agentId": agent_id,
                "failedRules": (["member"] if agent_id not in context.candidates else
                                ranking.ineligibility(item.contract,
                                                      context.candidates[agent_id],
                                                      context.now, ttl))}
               for agent_id in item.offer_queue if agent_id not in order]
    if not order:
        return None, [], skipped
    return order[0], order[1:], skipped
