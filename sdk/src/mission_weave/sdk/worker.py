"""A runnable Worker (§11.1, §11.3):

    python -m mission_weave.sdk.worker --key .mw/agents/worker-1.json --group grp_demo \\
        --handler mission_weave.sdk.demo:handle --url http://127.0.0.1:8000

It opens a session, rebuilds its queues by replaying the Group logs, subscribes to
them (inbox.py), reports Presence, accepts the offers addressed to it that pass its
admission control and declines the others with a reason, lets the Scheduler
(scheduler.py) choose which queued WorkItem starts in which slot, starts it, renews the
lease while the handler runs, and submits the handler's result with its Evidence (or
fails it with Evidence). docs/sdk.md is the newcomer's page.

`Worker` is the entry point and the loop; each part of the job is a module of its own:

- session.py: the session (opened at start, again after a reconnection) and Presence;
- slots.py: the slots, what runs in them, and what the worker has promised;
- offers.py: admission control (admission.py) applied to offers and revised contracts;
- runs.py: one WorkItem's run in a slot, to its `Outcome`;
- leases.py: a run's lease: renewal, loss (the handler is cancelled), preemption;
- handler_context.py: `WorkContext`, what the handler gets;
- offline_execution.py: bounded offline execution (§11.5) around offline_buffer.py;
- worker_cli.py: the command line (`--once`, `--handler module:function`, ...).
"""

from __future__ import annotations

import asyncio
import logging
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path

from mission_weave.protocol.json_types import JsonObject

from . import admission, disclosure, scheduler
from .client import ApiError, Client, utcnow
from .handler_context import Handler, HandlerResult, Preempted, WorkContext
from .inbox import CursorStore, Inbox
from .leases import LEASE_GONE, Leases
from .offers import START_WINDOW_SECONDS, Offers
from .offline_execution import OfflineExecution
from .queues import GroupWork, Item
from .runs import Outcome, Runs
from .session import Session
from .slots import Slots
from .ticks import tick_until_stopped

__all__ = ["DEFAULT_ESTIMATE_SECONDS", "LEASE_GONE", "START_WINDOW_SECONDS", "Handler",
           "HandlerResult", "Outcome", "Preempted", "WorkContext", "Worker"]

log = logging.getLogger("mission_weave.sdk.worker")

DEFAULT_ESTIMATE_SECONDS = 60.0  # a run's duration when the worker has no history yet
RECENT_RUNS = 50  # the runs per Group the estimates and the disclosure look at


class Worker:
    def __init__(self, client: Client, groups: list[str], handler: Handler,
                 cursor_path: str | Path, *, transport: str = "auto",
                 presence_seconds: float = 30.0, lease_seconds: int | None = None,
                 tick_seconds: float = 1.0, once: bool = False,
                 capability_ranges: Mapping[str, str] | None = None,
                 needs: Mapping[str, Sequence[str]] | None = None,
                 queue_capacity: int | None = None,
                 start_window_seconds: int = START_WINDOW_SECONDS,
                 estimate_seconds: Callable[[JsonObject], float] | None = None,
                 estimate_cost: Callable[[JsonObject], JsonObject] | None = None,
                 offline_grace_seconds: float | None = None,
                 measure_usage: bool | None = None):
        """Admission control (admission.py) takes: `capability_ranges` ({capability id:
        version range} this worker accepts besides the card's exact versions), `needs`
        ({"tools"|"data"|"operations": names} its handler uses, which a contract's
        `allowed` must include), `queue_capacity` (most accepted items waiting for a
        slot; default the slots), `start_window_seconds` (the server's start window, for
        offers that set none) and the two estimates, which replace the methods
        `estimate_seconds(contract)` and `estimate_cost(contract)`.

        `offline_grace_seconds` enables bounded offline execution (§11.5,
        offline_execution.py): while the server cannot be reached, progress and
        checkpoints are buffered in a SQLite file beside the Cursors until each lease's
        expiry plus this grace (`offline_buffer.DEFAULT_GRACE_SECONDS`, the server's
        default, is what to pass unless the server is configured otherwise: it does not
        advertise its own). None (the default) keeps the plain behaviour: the lease is
        lost when renewals cannot reach the server before it expires.

        `measure_usage` (default: on with offline execution) charges each run's measured
        compute and wall-clock seconds (offline_buffer.Meter) with its usage: offline on
        every buffered command, online with the charge before its checkpoint, block,
        submission or failure."""
        self.client, self.groups, self.handler = client, groups, handler
        # The estimates' hooks: given, they answer instead of the methods below.
        self._estimate_seconds, self._estimate_cost = estimate_seconds, estimate_cost
        # once: one slot, and stop after the first WorkItem's run ends (self.outcome).
        self.once = once
        self.outcome: Outcome | None = None
        self._stop: asyncio.Event | None = None
        self.cursor_path, self.transport = cursor_path, transport
        self.tick_seconds = tick_seconds
        # The worker's view of each Group, folded from its log.
        self.work = {g: GroupWork(g) for g in groups}
        self.facts = {g: admission.AdmissionView() for g in groups}  # offer windows, usage
        self.card: JsonObject = {}
        self.submitted: list[tuple[str, str]] = []  # (group, item) it submitted, for tests/logs
        # (group, item, epoch) -> the last schedule disclosure published
        self.disclosed: dict[tuple[str, str, int], JsonObject] = {}
        self.wake = asyncio.Event()
        self.inbox: Inbox | None = None
        self.ready = asyncio.Event()
        # The parts, each a module; they reach each other through the worker.
        self.session = Session(self, presence_seconds)
        self.slots = Slots(self)
        self.offers = Offers(self, capability_ranges=capability_ranges, needs=needs,
                             queue_capacity=queue_capacity,
                             start_window_seconds=start_window_seconds)
        self.leases = Leases(self, lease_seconds)
        self.runs = Runs(self)
        self.offline = OfflineExecution(self, cursor_path, offline_grace_seconds, measure_usage)

    @property
    def agent_id(self) -> str:
        return self.client.agent_id

    # --- start-up ----------------------------------------------------------------------

    async def run(self, stop: asyncio.Event | None = None) -> None:
        stop = self._stop = stop or asyncio.Event()
        await self.session.open()
        self.slots.declare(1 if self.once else max(1, int(self.card.get("maxConcurrency", 1))))
        await self.offline.reconcile_leftovers()
        await self._rebuild()
        self.inbox = Inbox(self.client, self.groups, self._on_event,
                           CursorStore(self.cursor_path), self._on_snapshot,
                           on_restart=self._on_restart, transport=self.transport)
        tasks: list[asyncio.Task[None]] = [
            asyncio.create_task(self.inbox.run(stop)),
            asyncio.create_task(self.session.presence_loop(stop))]
        self.ready.set()
        try:
            await tick_until_stopped(self._tick, self.wake, stop, self.tick_seconds, tasks)
        finally:
            tasks += self.session.background()
            runs = [task for task, _ in self.slots.running.values()]
            for task in tasks + runs:
                task.cancel()
            await asyncio.gather(*tasks, *runs, return_exceptions=True)
            await self.session.report_presence("offline")

    async def _rebuild(self) -> None:
        """Queues rebuilt by replaying every Group's log (a snapshot where archived)."""
        async def apply(event: JsonObject) -> None:
            self._fold(event)
        replay = Inbox(self.client, self.groups, apply, CursorStore(":memory:"),
                       self._on_snapshot, transport="http")
        for group_id in self.groups:
            await replay.catch_up(group_id)

    async def _on_restart(self, group_id: str) -> None:
        """The stored Cursor was from another log (a reset server): forget this Group's
        view; the inbox replays its log from sequence 1 and the view is folded anew."""
        self.work[group_id] = GroupWork(group_id)
        self.facts[group_id] = admission.AdmissionView()
        self.slots.forget_group(group_id)
        self.disclosed = {k: v for k, v in self.disclosed.items() if k[0] != group_id}

    async def _on_snapshot(self, group_id: str, document: JsonObject) -> None:
        work = self.work[group_id]
        if document["sequence"] <= work.applied:
            return  # the replay at start already went further: never step back
        work.load_snapshot(document["sequence"], document["state"].get("workItems", []))
        self.facts[group_id].load_snapshot(document["sequence"],
                                           document["state"].get("workItems", []))

    # --- events ------------------------------------------------------------------------

    def _fold(self, event: JsonObject) -> None:
        self.work[event["groupId"]].apply(event)
        self.facts[event["groupId"]].apply(event)

    async def _on_event(self, event: JsonObject) -> None:
        self._fold(event)
        self.leases.on_event(event)
        self.wake.set()

    # --- decisions ---------------------------------------------------------------------

    async def _tick(self) -> None:
        if self.once and self._stop is not None and self._stop.is_set():
            return  # --once: its WorkItem ended; take nothing more
        if self.offline.since is not None:
            return  # nothing new is accepted or started before the reconciliation
        now = utcnow()
        self.slots.forget_accepted()
        for group_id, work in self.work.items():
            for item in work.live_offers(self.agent_id, now):
                key = (group_id, item.id, item.ownership_epoch)
                if key in self.slots.accepting or self.slots.refused_now(group_id, item.id):
                    continue
                await self.offers.consider(group_id, item)
            for item in work.owned(self.agent_id, ("queued",)):
                if item.accepted_revision != item.contract_revision \
                        and not self.slots.refused_now(group_id, item.id):
                    await self.offers.accept_revision(group_id, item)
        await self._disclose(now)  # on acceptance, before it may start
        await self._schedule(now)

    async def _schedule(self, now: datetime) -> None:
        started = self.slots.choose(now)
        for assignment in started:
            self.runs.start(assignment)
        if started:
            await self.session.report_presence()

    def ended(self, outcome: Outcome) -> None:
        """One WorkItem's run ended; with `once`, that ends the worker."""
        if self.outcome is None or not self.once:
            self.outcome = outcome
        if self.once and self._stop is not None:
            self._stop.set()

    # --- admission control (§10.3; offers.py, admission.py) ---------------------------

    def estimate_seconds(self, contract: JsonObject) -> float:
        """This worker's estimate of how long running `contract` takes, for the deadline
        check. Default: the median of its last runs (all Groups), else 60 seconds.
        Override it (or pass `estimate_seconds=`) when the handler knows better."""
        if self._estimate_seconds is not None:
            return self._estimate_seconds(contract)
        runs = [d for group in self.slots.durations.values() for d in group[-RECENT_RUNS:]]
        return statistics.median(runs) if runs else DEFAULT_ESTIMATE_SECONDS

    def estimate_cost(self, contract: JsonObject) -> JsonObject:
        """This worker's estimate of what running `contract` uses, a six-dimension delta
        (`financial` `{amount, currency}`, `tokens`, `toolCalls`, `computeSeconds`,
        `wallClockSeconds`, `sideEffects`; absent means none), for the budget check.
        Default: its duration estimate as `wallClockSeconds`. Override it (or pass
        `estimate_cost=`) when the handler spends tokens, money or side effects."""
        if self._estimate_cost is not None:
            return self._estimate_cost(contract)
        return {"wallClockSeconds": math.ceil(self.estimate_seconds(contract))}

    def admission_facts(self, group_id: str, item: Item, now: datetime, *,
                        revision: bool = False) -> admission.Facts:
        """What admission control decides an offer (or a revised contract) on."""
        return self.offers.facts(group_id, item, now, revision=revision)

    # --- scheduling disclosure (§11.2) ------------------------------------------------

    async def _disclose(self, now: datetime) -> None:
        """Tell each Group when its queued items should start and finish: on acceptance
        (the first disclosure) and on material changes only. scheduler.outlook reduces
        the facts to the item's own Group, so nothing of another Group leaks into it."""
        queues = {g: w.queue(self.agent_id, now) for g, w in self.work.items()}
        for group_id, items in queues.items():
            for queued in items:
                if (group_id, queued.work_item_id) in self.slots.running:
                    continue
                key = (group_id, queued.work_item_id, queued.ownership_epoch)
                body = disclosure.disclose(scheduler.outlook(
                    group_id, queued.work_item_id, self.slots.table, queues, {}, now,
                    durations=self.slots.durations[group_id][-RECENT_RUNS:]))
                if not disclosure.is_material_change(self.disclosed.get(key), body):
                    continue
                self.disclosed[key] = body  # refused or not: again only on a material change
                try:
                    await self.client.command(group_id, "schedule.disclose", body,
                                              workItemId=queued.work_item_id,
                                              ownershipEpoch=queued.ownership_epoch)
                except ApiError as error:
                    log.info("disclosure for %s refused: %s", queued.work_item_id, error.code)


if __name__ == "__main__":
    from .worker_cli import main

    main()
