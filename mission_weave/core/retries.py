"""Retry budgets of §11.4: attempts, backoff, cost and deadline. Pure: `now` is an argument.

An attempt is one Ownership Epoch's execution: the first `work.started` under a new epoch
counts a new attempt; starting again in the same epoch (after a checkpoint, a block or a
session replacement) resumes that attempt and keeps its idempotency key.

`work.fail` asks `after_failure` whether the failure may be retried and from when; a
later `work.offer` of the failed item (a coordinator's or the sweeper's) asks
`refusal`, and is refused with BUDGET_EXCEEDED {reason: attempts|backoff|deadline|cost|
permanent} while the budget does not allow it.

Cost: `retry.maxCost` is compared with the money spent on the WorkItem so far, its
`usage.financial` as `usage.record` charged it (mission_weave/core/budgets.py).
"""

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation

from mission_weave.protocol.errors import ProtocolError
from mission_weave.protocol.timefmt import format_time, parse_time

from .state import WorkItem

DEFAULT_MULTIPLIER = 2


def backoff_seconds(retry: dict, attempt: int) -> int:
    """The wait after the `attempt`-th attempt failed: fixed, or initial × multiplier^(n-1),
    capped at maxSeconds (multiplied step by step, so a huge multiplier cannot overflow)."""
    backoff = retry["backoff"]
    initial, cap = backoff["initialSeconds"], backoff["maxSeconds"]
    seconds = initial
    if backoff["strategy"] == "exponential":
        multiplier = backoff.get("multiplier", DEFAULT_MULTIPLIER)
        for _ in range(max(attempt, 1) - 1):
            if seconds >= cap:
                break
            seconds *= multiplier
    return min(math.ceil(seconds), cap)


def cost_exceeded(max_cost: dict | None, spent: dict | None) -> bool:
    if not max_cost or not spent:
        return False
    if spent.get("currency") != max_cost.get("currency"):
        return True  # no exchange rates here: a cost we cannot compare is not within budget
    try:
        return Decimal(spent["amount"]) >= Decimal(max_cost["amount"])
    except (InvalidOperation, KeyError, TypeError):
        return True


def _deadline(retry: dict) -> datetime | None:
    return parse_time(retry["deadline"]) if retry.get("deadline") else None


def budget_left(item: WorkItem, now: datetime) -> str | None:
    """Which budget forbids another attempt at `now` (attempts, deadline, cost), or None."""
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


def refusal(item: WorkItem, now: datetime) -> dict | None:
    """Why the failed `item` may not be offered again at `now`, or None when it may."""
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


def check_retry(item: WorkItem, now: datetime) -> None:
    refused = refusal(item, now)
    if refused is not None:
        why = _EXPLAIN[refused["reason"]]
        raise ProtocolError("BUDGET_EXCEEDED", f"WorkItem {item.id} may not be retried now: {why}",
                            refused)


_EXPLAIN = {
    "attempts": "its attempts are exhausted",
    "deadline": "the retry deadline has passed",
    "cost": "its retry cost budget is spent",
    "backoff": "its backoff has not ended",
    "permanent": "its failure was permanent",
}
