"""The Worker's slots and what it has promised (§11.1): how many WorkItems it runs at
once (the Agent Card's `maxConcurrency`, one with `--once`), which run where, the
offers it accepted whose acceptance it has not seen in the log yet, and the items it
tried and was refused at the Group's current sequence (not tried again until the log
moves). The counts here are what admission control (offers.py) and Presence read, and
`choose` asks the Scheduler (scheduler.py) which queued item starts in which free slot.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import TYPE_CHECKING

from . import scheduler

if TYPE_CHECKING:
    from .handler_context import WorkContext
    from .worker import Worker

ItemKey = tuple[str, str]  # (Group, WorkItem)


class Slots:
    def __init__(self, worker: Worker):
        self.worker = worker
        self.capacity = 1
        self.table = scheduler.declare_slots(0, 0)
        self.fairness = scheduler.Fairness()
        # Each run in a slot: its task, and its context once work.start answered.
        self.running: dict[ItemKey, tuple[asyncio.Task[None], WorkContext | None]] = {}
        self.accepting: set[tuple[str, str, int]] = set()  # (group, item, epoch) accepted
        self.refused: dict[ItemKey, int] = {}  # -> the Group's sequence when last refused
        # Seconds of past runs per Group: the duration estimate and the disclosure use them.
        self.durations: dict[str, list[float]] = {g: [] for g in worker.groups}

    def declare(self, capacity: int) -> None:
        """`capacity` isolated slots (the card's maxConcurrency, or one with --once)."""
        self.capacity = capacity
        self.table = scheduler.declare_slots(capacity, capacity)

    def contexts(self) -> list[WorkContext]:
        """The contexts of the runs whose lease was granted."""
        return [ctx for _, ctx in self.running.values() if ctx is not None]

    def owned_count(self) -> int:
        """The items this agent owns (queued or active, all Groups), counting accepted
        offers whose acceptance the log has not shown yet."""
        agent_id = self.worker.agent_id
        owned = sum(len(w.owned(agent_id)) for w in self.worker.work.values())
        return owned + len(self.accepting)

    def waiting_count(self) -> int:
        """Accepted items not running yet: the accepted offers and the queued items."""
        agent_id = self.worker.agent_id
        return len(self.accepting) + sum(
            1 for g, w in self.worker.work.items() for i in w.owned(agent_id, ("queued",))
            if (g, i.id) not in self.running)

    def forget_accepted(self) -> None:
        """Accepted offers the log shows as no longer `offered` are owned (or lost) now:
        owned_count counts them from the log."""
        work = self.worker.work
        self.accepting = {k for k in self.accepting if work[k[0]].items[k[1]].state == "offered"}

    def refuse(self, group_id: str, item_id: str) -> None:
        """Not tried again until the Group's log moves on."""
        self.refused[(group_id, item_id)] = self.worker.work[group_id].applied

    def refused_now(self, group_id: str, item_id: str) -> bool:
        return self.refused.get((group_id, item_id)) == self.worker.work[group_id].applied

    def forget_group(self, group_id: str) -> None:
        """The Group's log was replaced (a reset server): what was promised there goes."""
        self.accepting = {k for k in self.accepting if k[0] != group_id}
        self.refused = {k: v for k, v in self.refused.items() if k[0] != group_id}

    def choose(self, now: datetime) -> list[scheduler.Assignment]:
        """The Scheduler's decision: which queued items (not running, not refused now)
        start in which free slots; the slots are taken by it."""
        agent_id = self.worker.agent_id
        queues = {g: [q for q in w.queue(agent_id, now)
                      if (g, q.work_item_id) not in self.running
                      and not self.refused_now(g, q.work_item_id)]
                  for g, w in self.worker.work.items()}
        decision = scheduler.schedule(self.table, queues, {}, {}, now, self.fairness)
        self.table, self.fairness = decision.slots, decision.fairness
        return list(decision.started)

    def leased(self, assignment: scheduler.Assignment, lease_id: str,
               credential: str | None) -> None:
        """The slot's assignment now holds this lease and capability token."""
        self.table = self.table.update(assignment.with_lease(lease_id, credential))

    def release(self, assignment: scheduler.Assignment) -> None:
        self.running.pop((assignment.group_id, assignment.work_item_id), None)
        self.table = self.table.release(assignment.slot_id)
