"""Scheduling disclosure (§11.2): what a Worker tells one Group about one of its items.

Pure: `disclose(outlook)` turns an `Outlook` into the `schedule.disclose` body
`{estimatedStart: {from, to}, estimatedCompletion, confidence, capacityStatus,
calculatedAt}`, and `is_material_change(previous, current)` says whether a new one is
worth publishing. The Worker publishes on acceptance and on material changes only.

An `Outlook` is already reduced to the one Group: the item's place in its *own*
Group's queue, the share of decisions its Group gets (a number from weights), when the
Worker's slots are expected to free (times only) and this Group's run durations. It has
no member that could name another Group's Missions, items, assignments or queue length,
so a disclosure cannot expose them (§11.2 MUST NOT).

The estimate: the item starts when its Group has been granted `position + 1` slots,
i.e. after about `(position + 1) / share` decisions overall. Those decisions are
simulated over the slots' free times, refilling each slot as it frees: `from` assumes
its Group wins the next `position` decisions and runs are short (10th percentile of
the durations), the expected start and `to` take the share-based count with typical
(median) and long (90th percentile) runs. Completion is the expected start plus the
median run. Confidence grows with the
number of past runs and shrinks with their spread.
"""

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from fractions import Fraction
from math import ceil

from mission_weave.protocol.json_types import JsonObject
from mission_weave.protocol.timefmt import format_time, parse_time

DEFAULT_RUN_SECONDS = 600  # a run's length when there is no history at all
NO_HISTORY_CONFIDENCE = 0.1
MATERIAL_SECONDS = 300  # a window edge or completion moving further than this is material
MATERIAL_CONFIDENCE = 0.2
DISCLOSURE_KEYS = frozenset({"estimatedStart", "estimatedCompletion", "confidence",
                             "capacityStatus", "calculatedAt"})


@dataclass(frozen=True)
class Outlook:
    """One item's scheduling facts as its own Group may know them."""

    now: datetime
    position: int  # items of the same Group that start before it (0: next)
    group_share: Fraction  # the fraction of slot decisions the Group gets, in (0, 1]
    # when each declared slot is expected to be free (now if free)
    slot_free_at: tuple[datetime, ...]
    durations: tuple[float, ...] = ()  # seconds of this Group's past runs
    started_at: datetime | None = None  # set when the item already runs in a slot
    accepting: bool = True  # False when the Worker takes no new work (draining, offline)


def _quantile(values: Iterable[float], q: float) -> float:
    ordered = sorted(values)
    index = q * (len(ordered) - 1)
    low, high = int(index), min(int(index) + 1, len(ordered) - 1)
    return float(ordered[low] + (ordered[high] - ordered[low]) * (index - low))


def _run_seconds(durations: Sequence[float]) -> tuple[float, float, float]:
    """(short, typical, long) run lengths: the 10th, 50th and 90th percentiles."""
    if not durations:
        return DEFAULT_RUN_SECONDS / 2, DEFAULT_RUN_SECONDS, DEFAULT_RUN_SECONDS * 2
    short, typical, long = (max(1.0, _quantile(durations, q)) for q in (0.1, 0.5, 0.9))
    return short, typical, long


def _confidence(durations: Sequence[float]) -> float:
    if not durations:
        return NO_HISTORY_CONFIDENCE
    short, typical, long = _run_seconds(durations)
    samples = len(durations) / (len(durations) + 3)
    return round(samples / (1 + (long - short) / typical), 2)


def _nth_start(slot_free_at: Iterable[datetime], now: datetime, decisions_before: int,
               run_seconds: float) -> datetime:
    """When decision number `decisions_before` (0-based) gets a slot, if every run lasts
    `run_seconds` and slots are refilled as soon as they free."""
    free = [max(now, moment) for moment in slot_free_at]
    heapq.heapify(free)
    for _ in range(decisions_before):
        heapq.heappush(free, heapq.heappop(free) + timedelta(seconds=run_seconds))
    return free[0]


def disclose(outlook: Outlook) -> JsonObject:
    """The `schedule.disclose` body for the item (PROTOCOL §2), and nothing else."""
    now = outlook.now
    short, typical, long = _run_seconds(outlook.durations)
    if outlook.started_at is not None:
        start_from = start_to = expected = outlook.started_at
        status = "available"
    elif not outlook.slot_free_at or not outlook.accepting:
        # No slot will take it for now: the window is open-ended, say so with low confidence.
        start_from, expected = now, now + timedelta(seconds=typical)
        start_to = now + timedelta(seconds=long * (outlook.position + 1))
        status = "offline"
    else:
        before = ceil(Fraction(outlook.position + 1) / outlook.group_share) - 1
        # Earliest: its Group wins every decision until then and runs are short.
        start_from = _nth_start(outlook.slot_free_at, now, outlook.position, short)
        expected = _nth_start(outlook.slot_free_at, now, before, typical)
        start_to = _nth_start(outlook.slot_free_at, now, before, long)
        status = "available" if any(moment <= now for moment in outlook.slot_free_at) else "busy"
    completion = max(now, expected + timedelta(seconds=typical))
    confidence = _confidence(outlook.durations) if status != "offline" else NO_HISTORY_CONFIDENCE
    return {"estimatedStart": {"from": format_time(_whole(start_from)),
                               "to": format_time(_whole(max(start_from, start_to)))},
            "estimatedCompletion": format_time(_whole(completion)),
            "confidence": confidence, "capacityStatus": status,
            "calculatedAt": format_time(_whole(now))}


def _whole(moment: datetime) -> datetime:
    return moment.replace(microsecond=0)


def is_material_change(previous: JsonObject | None, current: JsonObject,
                       seconds: int = MATERIAL_SECONDS) -> bool:
    """Whether `current` should be published after `previous` (None: nothing published yet).
    Material: the capacity status changed, a window edge or the completion moved by more
    than `seconds`, or the confidence by more than MATERIAL_CONFIDENCE. The calculation
    time alone never is."""
    if previous is None:
        return True
    if previous["capacityStatus"] != current["capacityStatus"]:
        return True
    moved = [(previous["estimatedStart"]["from"], current["estimatedStart"]["from"]),
             (previous["estimatedStart"]["to"], current["estimatedStart"]["to"]),
             (previous["estimatedCompletion"], current["estimatedCompletion"])]
    if any(abs((parse_time(b) - parse_time(a)).total_seconds()) > seconds for a, b in moved):
        return True
    confidence_moved: float = abs(current["confidence"] - previous["confidence"])
    return confidence_moved > MATERIAL_CONFIDENCE
