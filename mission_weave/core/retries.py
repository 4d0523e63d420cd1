"""Retry budgets of §11.4: attempts, backoff, cost and deadline. Pure: `now` is an argument.

An attempt is one Ownership Epoch's use of its grant: the first `work.started` under a new
epoch counts a new attempt; starting again in the same epoch (after a checkpoint, a block or
a session replacement) resumes that attempt and keeps its idempotency key. An epoch whose
owner never started it is an attempt too, counted when its start-by deadline passes
(`work.ownership_expired {reason: "start_by", attempt}`, `missed_start_attempt`): a Worker
that accepts and never starts has used a turn, or automatic re-offers would never end.

"Automatic retries are limited by the Work Contract's attempt, backoff, cost, and deadline
budgets" (§11.4): the budgets hold for what the server does by itself, the sweeper's
automatic dispatch (dispatch.py), not for a Coordinator. `failed` returns control to the
Coordinator (§10.2), and an explicit `work.offer` of a failed item passes at any time,
within the backoff, past the budget or after a permanent failure: the Coordinator decides.

- `work.fail` asks `after_failure` whether the failure may be retried automatically and
  from when (`retryAt`), or why never (`exhaustedBy`);
- automatic dispatch asks `refusal` before it offers a failed item again;
- a timeout is a failed attempt like any other, whichever it is (§11.5 names them
  together: "misses its start deadline or stops renewing a lease"): under automatic
  dispatch the server ends it with its own `work.failed`, whose `retryAt` or
  `exhaustedBy` `after_failure` gives as it does for `work.fail`, so the next automatic
  offer waits out the contract's backoff, and none follows once the budget is spent.

Cost: `retry.maxCost` is compared with the money spent on the WorkItem so far, its
`usage.financial` as `usage.record` charged it (mission_weave/core/budgets.py).
"""

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation

from mission_weave.protocol.timefmt import format_time, parse_time

from .json_types import JsonObject
from .state import WorkItem

DEFAULT_MULTIPLIER = 2


def backoff_seconds(retry: JsonObject, attempt: int) -> int:
    """The wait after the `attempt`-th attempt failed: fixed, or initial × multiplier^(n-1),
    capped at maxSeconds (multiplied step by step, so a huge multiplier cannot overflow)."""
    backoff = retry["backoff"]
    cap: int = backoff["maxSeconds"]
    seconds: float = backoff["initialSeconds"]
    if backoff["strategy"] == "exponential":
        multiplier = backoff.get("multiplier", DEFAULT_MULTIPLIER)
        for _ in range(max(attempt, 1) - 1):
            if seconds >= cap:
                break
            seconds *= multiplier
    return min(math.ceil(seconds), cap)


def cost_exceeded(max_cost: JsonObject | None, spent: JsonObject | None) -> bool:
    if not max_cost or not spent:
        return False
    if spent.get("currency") != max_cost.get("currency"):
        return True  # no exchange rates here: a cost we cannot compare is not within budget
    try:
        return Decimal(spent["amount"]) >= Decimal(max_cost["amount"])
    except (InvalidOperation, KeyError, TypeError):
        return True


def _deadline(retry: JsonObject) -> datetime | None:
    return parse_time(retry["deadline"]) if retry.get("deadline") else None


def epoch_started(item: WorkItem) -> bool:
    """Whether the current Ownership Epoch has started (its attempt is counted)."""
    return item.lease is not None and item.lease.ownership_epoch == item.ownership_epoch


def missed_start_attempt(item: WorkItem) -> int:
    """The attempt a missed start-by deadline of `item` ends, as `item.attempts` will be
    once it is recorded: the epoch's own if it started (a checkpoint, then no restart in
    time), else a new one, never started."""
    return item.attempts if epoch_started(item) else item.attempts + 1


def budget_left(item: WorkItem, now: datetime) -> str | None:
    """Which budget forbids another automatic attempt at `now` (attempts, deadline, cost),
    or None. The attempt that just failed or timed out is counted in `item.attempts`."""
    retry = item.contract["retry"]
    if item.attempts >= retry["maxAttempts"]:
        return "attempts"
    deadline = _deadline(retry)
    if deadline is not None and now >= deadline:
        return "deadline"
    if cost_exceeded(retry.get("maxCost"), item.usage.get("financial")):
        return "cost"
    return None


@dataclass(frozen=True)
class Outcome:
    """What a failure means for retries: from when it may be retried, or why never."""

    retry_at: datetime | None
    exhausted_by: str | None  # attempts | deadline | cost | permanent

    @property
    def exhausted(self) -> bool:
        return self.exhausted_by is not None


def after_failure(item: WorkItem, permanent: bool, now: datetime) -> Outcome:
    if permanent:
        return Outcome(None, "permanent")
    exhausted_by = budget_left(item, now)
    if exhausted_by is not None:
        return Outcome(None, exhausted_by)
    retry = item.contract["retry"]
    retry_at = now + timedelta(seconds=backoff_seconds(retry, item.attempts))
    deadline = _deadline(retry)
    if deadline is not None and retry_at >= deadline:
        return Outcome(None, "deadline")  # the backoff would end past the deadline
    return Outcome(retry_at, None)


def refusal(item: WorkItem, now: datetime) -> JsonObject | None:
    """Why automatic dispatch may not offer the failed `item` again at `now`
    ({reason: attempts|backoff|deadline|cost|permanent, ...}), or None when it may."""
    retry = item.contract["retry"]
    details = {"attempts": item.attempts, "maxAttempts": retry["maxAttempts"]}
    if item.retry_exhausted:
        return {"reason": item.retry_exhausted, **details}
    reason = budget_left(item, now)
    if reason is not None:
        return {"reason": reason, **details, "deadline": retry.get("deadline")}
    if item.retry_at is not None and now < item.retry_at:
        return {"reason": "backoff", **details, "retryAt": format_time(item.retry_at)}
    return None
