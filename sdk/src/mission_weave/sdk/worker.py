"""A runnable Worker (§11.1, §11.3):

    python -m mission_weave.sdk.worker --key .mw/agents/worker-1.json --group grp_demo \\
        --handler mission_weave.sdk.demo:handle --url http://127.0.0.1:8000

It opens a session, rebuilds its queues by replaying the Group logs, subscribes to
them (inbox.py), reports Presence, accepts the offers addressed to it that pass its
admission control (admission.py: authorization, capability ids and versions,
dependencies, concurrency, queue capacity, deadline and budgets, with the
`estimate_seconds(contract)` / `estimate_cost(contract)` hooks) and declines the others
with a reason, lets the Scheduler (scheduler.py) choose which queued WorkItem starts in
which slot, starts it, renews the lease while the handler runs, and submits the
handler's result with its Evidence (or fails it with Evidence).

The handler runs only while the lease is the worker's: a refused renewal, none that
reaches the server before the lease expires, or the lease closing in the log cancels
the handler's task (asyncio cancellation at its next await) and nothing is submitted
(outcome `lease-lost`). A refused `work.submit` is an error for the caller, and the item
is failed with the refusal as Evidence, unless the refusal says the lease is no longer
the worker's (LEASE_GONE): then it is only reported.

The handler is `async def handle(ctx: WorkContext) -> dict`, returning
`{"evidence": [Evidence], "artifacts": [hash]}`; `ctx.evidence(...)` builds Evidence,
`ctx.publish_artifact(...)` uploads and publishes an artifact, and when
`ctx.preemption_requested` is set it should call `await ctx.checkpoint(...)` at its
next safe point and return. `ctx.block(...)` parks the item until a coordinator
resolves what it needs. docs/sdk.md is the newcomer's page.

With `--once` it processes one WorkItem to its end (submitted, blocked, checkpointed,
or failed) and exits: 0 when it was submitted, blocked or checkpointed, 1 with a
message (naming the server's error code) when the handler failed, the lease was lost or
the server refused one of the commands.
"""

import argparse
import asyncio
import importlib
import inspect
import json
import logging
import math
import os
import statistics
import sys
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Awaitable, Callable, Mapping

import httpx

from mission_weave.protocol.idempotency import idempotency_key
from mission_weave.protocol.timefmt import format_time, parse_time

from . import admission, disclosure, offline_buffer, scheduler
from .client import ApiError, Client, may_have_arrived, utcnow
from .ids import uuid7
from .inbox import CursorStore, Inbox
from .keys import AgentKey
from .offline_buffer import OfflineError
from .queues import GroupWork, Item
from .ticks import stop_on_signals, tick_until_stopped

log = logging.getLogger("mission_weave.sdk.worker")

Handler = Callable[["WorkContext"], Awaitable[dict | None]]

DEFAULT_ESTIMATE_SECONDS = 60.0  # a run's duration when the worker has no history yet
START_WINDOW_SECONDS = 600  # the server's default start window (MW_START_WINDOW_SECONDS)
# Refusals that say the lease (or the ownership, or the session) is no longer this
# worker's: it can neither submit nor fail the item any more.
LEASE_GONE = frozenset({"STALE_LEASE", "LEASE_EXPIRED", "STALE_OWNERSHIP", "OWNER_CHANGED",
                        "STALE_SESSION"})


class Preempted(Exception):
    """Raised by `ctx.raise_if_preempted()` after the context checkpointed."""


@dataclass(frozen=True)
class Outcome:
    """How one WorkItem's run in a slot ended (what `--once` reports)."""

    group_id: str
    work_item_id: str
    state: str  # submitted | blocked | checkpointed | failed | refused | lease-lost | stopped
    ok: bool
    message: str


class WorkContext:
    """What a handler sees of one WorkItem in one slot: its contract, helpers that act
    under the slot's lease, and the preemption flag."""

    def __init__(self, worker: "Worker", group_id: str, item: Item,
                 assignment: scheduler.Assignment, lease_id: str, capability_token: dict | None):
        self.worker, self.client = worker, worker.client
        self.group_id, self.work_item_id = group_id, item.id
        self.mission_id = item.mission_id
        self.contract, self.contract_revision = item.contract, item.contract_revision
        self.ownership_epoch, self.lease_id = assignment.ownership_epoch, lease_id
        self.assignment = assignment
        self.capability_token = capability_token
        self.last_checkpoint = item.last_checkpoint
        self.preemption = asyncio.Event()
        self.checkpointed = False  # the lease was released by checkpoint() or block()
        self.blocked = False
        self.lease_expires_at = None  # the lease's expiry as last granted or renewed
        # Why the lease is no longer this worker's (a refused or failed renewal, or its
        # revocation, expiry or the item's cancellation in the log); None while it holds it.
        self.lease_lost: str | None = None
        self._task: asyncio.Task | None = None  # the handler's task
        self._releasing = False  # a checkpoint or block is on its way
        self._finishing = False  # the worker is submitting or failing the item itself
        # Bounded offline execution (§11.5, offline_buffer.py): the session the lease was issued
        # under, the usage delta `charge()` accumulated, and the refusals of this item's
        # buffered commands on reconciliation (ApiError; `on_refusal(error, entry)` is
        # called with each too, when the handler sets it).
        self.session_epoch = getattr(self.client, "session_epoch", None)
        self.usage = offline_buffer.Usage()
        # The handler's seconds, measured when the worker measures usage; and a
        # usage.record whose answer was lost with the connection, (envelope, delta), until
        # the reconnection tells whether it was charged.
        self.meter = offline_buffer.Meter() if worker.measure_usage else None
        self.unsettled: tuple[dict, dict] | None = None
        self.refusals: list[ApiError] = []
        self.on_refusal: Callable | None = None
        self.submitted = False  # the handler submitted with ctx.submit()

    @property
    def preemption_requested(self) -> bool:
        return self.preemption.is_set()

    def _lose_lease(self, why: str, force: bool = False) -> None:
        """The lease is gone: the handler is cancelled (asyncio cancellation at its next
        await) and the worker will not submit for it."""
        if (self.checkpointed or self._releasing or self._finishing) and not force:
            return  # the handler or the worker is releasing the lease (or did): not a loss
        if self.lease_lost is None:
            self.lease_lost = why
            log.warning("lease of %s lost (%s): cancelling its handler", self.work_item_id, why)
        if self._task is not None and not self._task.done():
            self._task.cancel()

    @property
    def producer(self) -> str:
        return self.client.principal

    def _lease_fields(self) -> dict:
        return {"workItemId": self.work_item_id, "ownershipEpoch": self.ownership_epoch,
                "leaseId": self.lease_id}

    def idempotency_key(self, operation_id: str) -> str:
        """The §16 key for an external operation of this attempt."""
        return idempotency_key(self.mission_id or "", self.work_item_id, self.ownership_epoch,
                               operation_id)

    def evidence(self, criteria, method: str, result: str, artifacts=(),
                 subject: str | None = None) -> dict:
        return {"id": f"ev-{uuid.uuid4().hex[:16]}",
                "subject": subject or f"workItem:{self.work_item_id}",
                "criteria": list(criteria), "method": method, "result": result,
                "producer": self.producer, "timestamp": format_time(utcnow()),
                "artifacts": list(artifacts)}

    # --- bounded offline execution (§11.5) ------------------------------------------

    @property
    def offline(self) -> bool:
        """The Group service could not be reached and the worker has not reconciled yet."""
        return self.worker.offline_since is not None

    @property
    def grace_deadline(self):
        """The lease's expiry plus the grace period: the last moment a report may be
        buffered; past it the handler is cancelled."""
        return offline_buffer.grace_deadline(self.lease_expires_at,
                                      self.worker.offline_grace_seconds or 0)

    def charge(self, tokens: int = 0, toolCalls: int = 0, sideEffects: int = 0,  # noqa: N803
               **more) -> None:
        """Add to the usage this handler spent (also `computeSeconds`, `wallClockSeconds`,
        `financial={amount, currency}`). The delta is charged once, with the next command:
        online a `usage.record` sent before it, offline the binding of the buffered
        command that carries it."""
        self.usage.add(tokens=tokens, toolCalls=toolCalls, sideEffects=sideEffects, **more)

    def _measured(self) -> None:
        """Add the handler's measured seconds since the last charge to the usage."""
        if self.meter is not None:
            self.usage.add(**self.meter.take())

    async def _charge_now(self, final: bool = False) -> None:
        """Charge the usage delta (`usage.record`) before the next command; `final` (the
        lease is being released or the result submitted) adds the measured seconds.
        Online, measured seconds ride on charges only, so reports cost no extra command."""
        if final:
            self._measured()
        if not self.usage:
            return
        delta = self.usage.take()
        try:
            for refresh in (False, True):
                member = await self.client.membership(self.group_id, refresh=refresh)
                envelope = self.client.envelope(self.group_id, "usage.record", delta,
                                                member["membershipEpoch"],
                                                **self._lease_fields())
                try:
                    await self.client.send(self.group_id, envelope)
                    return
                except ApiError as error:
                    if error.code != "STALE_MEMBERSHIP" or refresh:
                        raise
        except offline_buffer.UNREACHABLE as error:
            if may_have_arrived(error):
                self.unsettled = (envelope, delta)  # charged or not: the reconnection tells
            else:
                self.usage.add(**delta)  # never sent: it goes with the next command
            raise
        except ApiError:
            self.usage.add(**delta)  # refused, so not charged: it goes with the next one
            raise

    async def _report(self, type_: str, body: dict) -> dict:
        """Send a report of work under way, or, with offline execution enabled and the
        service unreachable, buffer it (durably, with the binding) until the reconnection."""
        final = type_ in RELEASING
        if not self.worker.offline_enabled:
            await self._charge_now(final)
            return await self.client.command(self.group_id, type_, body,
                                             **self._lease_fields())
        await self.worker._until_reconciled()
        if self.offline:
            return self._buffer(type_, body)
        command_id = uuid7()  # kept if it is buffered: a lost answer is not a second report
        try:
            await self._charge_now(final)
            try:
                return await self.client.command(self.group_id, type_, body, id=command_id,
                                                 **self._lease_fields())
            except ApiError as error:
                if error.code != "STALE_MEMBERSHIP":
                    raise
            await self.client.membership(self.group_id, refresh=True)
            command_id = uuid7()
            return await self.client.command(self.group_id, type_, body, id=command_id,
                                             **self._lease_fields())
        except offline_buffer.UNREACHABLE as error:
            self.worker._went_offline(error)
            return self._buffer(type_, body, command_id)

    def _buffer(self, type_: str, body: dict, command_id: str | None = None) -> dict:
        now = utcnow()
        if now > self.grace_deadline:
            raise OfflineError(f"cannot buffer {type_} for {self.work_item_id}: its grace "
                               f"deadline {format_time(self.grace_deadline)} has passed")
        self._measured()  # each buffered command carries the seconds since the one before
        last = self.worker.buffer.last_buffered_at(self.lease_id)
        now = max(now, last) if last else now  # bufferedAt never goes back under a lease
        binding = offline_buffer.binding(
            agent_id=self.client.agent_id, group_id=self.group_id,
            work_item_id=self.work_item_id, session_epoch=self.session_epoch,
            ownership_epoch=self.ownership_epoch, lease_id=self.lease_id,
            disconnected_at=min(self.worker.offline_since, now), buffered_at=now,
            grace_deadline=self.grace_deadline, lease_expires_at=self.lease_expires_at,
            usage=self.usage.take())
        entry = self.worker.buffer.add(self.group_id, type_, body, binding,
                                       {"workItemId": self.work_item_id}, command_id)
        log.info("buffered %s for %s offline (%s)", type_, self.work_item_id, entry.command_id)
        return {"commandId": entry.command_id, "buffered": True,
                "bufferedAt": binding["bufferedAt"], "events": []}

    async def _require_online(self, action: str) -> None:
        if self.worker.offline_enabled:
            await self.worker._until_reconciled()
            if self.offline:
                raise OfflineError(f"{action} needs the Group service, which cannot be "
                                   f"reached; only progress and checkpoints are buffered "
                                   f"offline (§11.5)")

    def capability(self, side_effect: bool = True) -> dict | None:
        """The lease's capability token (`{id, bearer, scopes, expiresAt, ...}`) for a
        call to a tool. Offline, a call with a side effect (irreversible or visible
        outside) must wait for the reconnection (§11.5): OfflineError unless the caller
        says it has none (`side_effect=False`: a read, a reversible step)."""
        if side_effect and self.offline:
            raise OfflineError(f"a side effect under {self.work_item_id}'s capability token "
                               f"needs the Group service, which cannot be reached (§11.5); "
                               f"only reversible work goes on offline")
        return self.capability_token

    async def submit(self, evidence, artifacts=()) -> dict:
        """Submit now, under this lease (else the worker submits what the handler
        returns). Raises OfflineError while the service cannot be reached."""
        await self._require_online(f"submitting {self.work_item_id}")
        self._finishing = True
        try:
            await self._charge_now(final=True)
            answer = await self.client.command(self.group_id, "work.submit", {
                "contractRevision": self.contract_revision, "artifacts": list(artifacts),
                "evidence": list(evidence)}, **self._lease_fields())
        except offline_buffer.UNREACHABLE as error:
            self._finishing = False
            if self.worker.offline_enabled:
                self.worker._went_offline(error)
                raise OfflineError(f"submitting {self.work_item_id}: the Group service "
                                   f"cannot be reached ({error!r})") from error
            raise
        except BaseException:
            self._finishing = False
            raise
        self.submitted = True
        return answer

    async def progress(self, phase: str, **progress) -> dict:
        """Report progress; offline (when enabled) it is buffered, `{"buffered": true,
        ...}` is returned, and it is sent on reconnection."""
        return await self._report("work.progress", {"phase": phase, **progress})

    async def post(self, text: str, kind: str = "message") -> dict:
        """Post to the WorkItem's Conversation (`conversation.post`): a `message`, or an
        `ambiguity` (which blocks acceptance until a revision clears it, §10.1). Offline
        (when enabled) it is buffered like a progress report."""
        return await self._report("conversation.post", {"kind": kind, "text": text})

    async def checkpoint(self, phase: str, state_artifact: str | None = None,
                         **progress) -> dict:
        """Checkpoint and release the lease (the item goes back to `queued`)."""
        body = {"progress": {"phase": phase, **progress}}
        if state_artifact:
            body["stateArtifact"] = state_artifact
        answer = await self._release("work.checkpoint", body)
        self.checkpointed = True
        return answer

    async def _release(self, type_: str, body: dict) -> dict:
        self._releasing = True
        try:
            return await self._report(type_, body)
        finally:
            self._releasing = False

    async def block(self, required_resolution: str, phase: str,
                    state_artifact: str | None = None, blocked_lease_seconds: int | None = None,
                    **progress) -> dict:
        """Block the item (`active` -> `blocked`) until a coordinator resolves
        `required_resolution` (work.unblock); carries a checkpoint like `checkpoint()`
        and releases the lease. Return from the handler after it."""
        checkpoint = {"progress": {"phase": phase, **progress}}
        if state_artifact:
            checkpoint["stateArtifact"] = state_artifact
        body = {"checkpoint": checkpoint, "requiredResolution": required_resolution}
        if blocked_lease_seconds:
            body["blockedLeaseSeconds"] = blocked_lease_seconds
        answer = await self._release("work.block", body)
        self.checkpointed = self.blocked = True
        return answer

    async def raise_if_preempted(self, phase: str, **progress) -> None:
        """At a safe point: checkpoint and stop when a preemption was requested."""
        if self.preemption_requested:
            await self.checkpoint(phase, **progress)
            raise Preempted(self.work_item_id)

    async def publish_artifact(self, data: bytes, media_type: str, schema: str | None = None,
                               sources=(), classification: str = "internal") -> str:
        """Upload the bytes (PUT /blobs, verified by name) and publish their signed
        manifest (`artifact.publish`, §13.1); returns the content hash. Raises
        OfflineError while the service cannot be reached (never published offline)."""
        await self._require_online("publishing an artifact")
        try:
            return await self._publish(data, media_type, schema, sources, classification)
        except offline_buffer.UNREACHABLE as error:
            if not self.worker.offline_enabled:
                raise
            self.worker._went_offline(error)
            raise OfflineError(f"publishing an artifact: the Group service cannot be "
                               f"reached ({error!r})") from error

    async def _publish(self, data, media_type, schema, sources, classification) -> str:
        name = await self.client.put_blob(data)
        card = self.worker.card
        manifest = self.client.key.sign({
            "hash": name, "mediaType": media_type, "schema": schema, "size": len(data),
            "producer": self.client.agent_id, "agentCardVersion": card.get("version"),
            "missionId": self.mission_id, "groupId": self.group_id,
            "workItemId": self.work_item_id, "sources": list(sources),
            "versions": {"tool": "mission_weave.sdk", "model": None,
                         "capability": _capability_version(self.contract)},
            "createdAt": format_time(utcnow()), "classification": classification,
            "uri": f"{self.client.base_url}/api/v1/blobs/{name}"})
        await self.client.command(self.group_id, "artifact.publish", manifest,
                                  **self._lease_fields())
        return name


RELEASING = frozenset({"work.checkpoint", "work.block"})  # reports that end the lease


def _capability_version(contract: dict) -> str | None:
    capabilities = contract.get("capabilities") or []
    return capabilities[0]["version"] if capabilities else None


class Worker:
    def __init__(self, client: Client, groups: list[str], handler: Handler,
                 cursor_path: str | Path, *, transport: str = "auto",
                 presence_seconds: float = 30.0, lease_seconds: int | None = None,
                 tick_seconds: float = 1.0, once: bool = False,
                 capability_ranges: Mapping[str, str] | None = None,
                 needs: Mapping[str, list] | None = None, queue_capacity: int | None = None,
                 start_window_seconds: int = START_WINDOW_SECONDS,
                 estimate_seconds: Callable[[dict], float] | None = None,
                 estimate_cost: Callable[[dict], dict] | None = None,
                 offline_grace_seconds: float | None = None,
                 measure_usage: bool | None = None):
        """Admission control (admission.py) takes: `capability_ranges` ({capability id:
        version range} this worker accepts besides the card's exact versions), `needs`
        ({"tools"|"data"|"operations": names} its handler uses, which a contract's
        `allowed` must include), `queue_capacity` (most accepted items waiting for a
        slot; default the slots), `start_window_seconds` (the server's start window, for
        offers that set none) and the two estimates, which replace the methods
        `estimate_seconds(contract)` and `estimate_cost(contract)`.

        `offline_grace_seconds` enables bounded offline execution (§11.5, offline_buffer.py):
        while the server cannot be reached, progress and checkpoints are buffered in
        a SQLite file beside the Cursors until each lease's expiry plus this grace
        (`offline_buffer.DEFAULT_GRACE_SECONDS`, the server's default, is what to pass unless
        the server is configured otherwise: it does not advertise its own). None (the
        default) keeps the plain behaviour: the lease is lost when renewals cannot reach
        the server before it expires.

        `measure_usage` (default: on with offline execution) charges each run's measured
        compute and wall-clock seconds (offline_buffer.Meter) with its usage: offline on every
        buffered command, online with the charge before its checkpoint, block, submission
        or failure."""
        self.client, self.groups, self.handler = client, groups, handler
        self.capability_ranges = dict(capability_ranges or {})
        for spec in self.capability_ranges.values():
            admission.parse_spec(spec)  # a bad range is an error now, not at the first offer
        self.needs = {kind: tuple(names) for kind, names in (needs or {}).items()}
        self.queue_capacity, self.start_window_seconds = queue_capacity, start_window_seconds
        if estimate_seconds is not None:
            self.estimate_seconds = estimate_seconds
        if estimate_cost is not None:
            self.estimate_cost = estimate_cost
        # once: one slot, and stop after the first WorkItem's run ends (self.outcome).
        self.once = once
        self.outcome: Outcome | None = None
        self._stop: asyncio.Event | None = None
        self.cursor_path, self.transport = cursor_path, transport
        self.presence_seconds, self.lease_seconds = presence_seconds, lease_seconds
        self.tick_seconds = tick_seconds
        self.work = {g: GroupWork(g) for g in groups}
        self.facts = {g: admission.AdmissionView() for g in groups}  # offer windows, usage
        self.roles: dict[str, frozenset] = {}  # Group -> this agent's roles there
        self.card: dict = {}
        self.capacity = 1
        self.slots = scheduler.declare_slots(0, 0)
        self.fairness = scheduler.Fairness()
        self.running: dict[tuple, tuple[asyncio.Task, WorkContext | None]] = {}
        self.accepting: set = set()  # (group, item, epoch) accepted, event not seen yet
        self.refused: dict = {}  # (group, item) -> the Group's sequence when last refused
        self.submitted: list = []  # (group, item) this worker submitted, for tests/logs
        self.durations: dict[str, list] = {g: [] for g in groups}  # seconds of past runs
        self.disclosed: dict = {}  # (group, item, epoch) -> the last body published
        self.wake = asyncio.Event()
        self.inbox: Inbox | None = None
        self.ready = asyncio.Event()
        self.offline_grace_seconds = offline_grace_seconds
        self.offline_enabled = offline_grace_seconds is not None
        self.measure_usage = self.offline_enabled if measure_usage is None else measure_usage
        buffer_path = offline_buffer.OfflineBuffer.path_beside(cursor_path)
        self.buffer = offline_buffer.OfflineBuffer(buffer_path) if self.offline_enabled else None
        self.offline_since = None  # when the service was found unreachable; None online
        self.reconnecting = False  # a new session is open, its reconciliation not finished
        self.online = asyncio.Event()
        self.online.set()
        self.reconnect_seconds = 0.5
        self.reconciled: list[offline_buffer.Reconciled] = []  # every answer, for tests and logs
        self._reconnector: asyncio.Task | None = None

    @property
    def agent_id(self) -> str:
        return self.client.agent_id

    # --- start-up ----------------------------------------------------------------------

    async def run(self, stop: asyncio.Event | None = None) -> None:
        stop = self._stop = stop or asyncio.Event()
        await self.client.open_session()  # revokes our old leases: those items are queued
        for group_id in self.groups:
            member = await self.client.membership(group_id)
            self.card = member.get("agentCard") or {}
            self.roles[group_id] = frozenset(member.get("roles") or ())
        self.capacity = 1 if self.once else max(1, int(self.card.get("maxConcurrency", 1)))
        self.slots = scheduler.declare_slots(self.capacity, self.capacity)
        if self.buffer is not None and len(self.buffer):
            # Buffered by an earlier run that ended offline: reconciled before anything.
            self._take_reconciled(await offline_buffer.reconcile(self.client, self.buffer))
        await self._rebuild()
        self.inbox = Inbox(self.client, self.groups, self._on_event, CursorStore(self.cursor_path),
                           self._on_snapshot, on_restart=self._on_restart,
                           transport=self.transport)
        tasks = [asyncio.create_task(self.inbox.run(stop)),
                 asyncio.create_task(self._presence_loop(stop))]
        self.ready.set()
        try:
            await tick_until_stopped(self._tick, self.wake, stop, self.tick_seconds, tasks)
        finally:
            if self._reconnector is not None:
                tasks.append(self._reconnector)
            for task in tasks + [t for t, _ in self.running.values()]:
                task.cancel()
            await asyncio.gather(*tasks, *(t for t, _ in self.running.values()),
                                 return_exceptions=True)
            await self._report_presence("offline")

    async def _rebuild(self) -> None:
        """Queues rebuilt by replaying every Group's log (a snapshot where archived)."""
        async def apply(event):
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
        self.accepting = {k for k in self.accepting if k[0] != group_id}
        self.refused = {k: v for k, v in self.refused.items() if k[0] != group_id}
        self.disclosed = {k: v for k, v in self.disclosed.items() if k[0] != group_id}

    async def _on_snapshot(self, group_id: str, document: dict) -> None:
        work = self.work[group_id]
        if document["sequence"] <= work.applied:
            return  # the replay at start already went further: never step back
        work.load_snapshot(document["sequence"], document["state"].get("workItems", []))
        self.facts[group_id].load_snapshot(document["sequence"],
                                           document["state"].get("workItems", []))

    # --- events ------------------------------------------------------------------------

    def _fold(self, event: dict) -> None:
        self.work[event["groupId"]].apply(event)
        self.facts[event["groupId"]].apply(event)

    async def _on_event(self, event: dict) -> None:
        self._fold(event)
        if event["type"] == "work.preemption_requested":
            for (group_id, item_id), (_, ctx) in self.running.items():
                if ctx is not None and ctx.lease_id == event["data"].get("leaseId"):
                    log.info("preemption requested for %s", item_id)
                    ctx.preemption.set()
        elif event["type"] in ("lease.revoked", "lease.expired", "work.cancelled") \
                and self.offline_since is None:  # offline, the reconnection decides
            for key, (_, ctx) in list(self.running.items()):
                if ctx is not None and ctx.lease_id == event["data"].get("leaseId", ctx.lease_id) \
                        and key == (event["groupId"], event.get("workItemId")):
                    ctx._lose_lease(f"{event['type']} in the log"
                                    + (f" ({event['data']['reason']})"
                                       if event["data"].get("reason") else ""))
        self.wake.set()

    # --- decisions ---------------------------------------------------------------------

    def _owned_count(self) -> int:
        owned = sum(len(w.owned(self.agent_id)) for w in self.work.values())
        return owned + len(self.accepting)

    async def _tick(self) -> None:
        if self.once and self._stop is not None and self._stop.is_set():
            return  # --once: its WorkItem ended; take nothing more
        if self.offline_since is not None:
            return  # nothing new is accepted or started before the reconciliation
        now = utcnow()
        self.accepting = {k for k in self.accepting
                          if self.work[k[0]].items[k[1]].state == "offered"}
        for group_id, work in self.work.items():
            for item in work.live_offers(self.agent_id, now):
                key = (group_id, item.id, item.ownership_epoch)
                if key in self.accepting or self._refused_now(group_id, item.id):
                    continue
                await self._consider_offer(group_id, item)
            for item in work.owned(self.agent_id, ("queued",)):
                if item.accepted_revision != item.contract_revision \
                        and not self._refused_now(group_id, item.id):
                    await self._accept_revision(group_id, item)
        await self._disclose(now)  # on acceptance, before it may start
        await self._schedule(now)

    def _refused_now(self, group_id: str, item_id: str) -> bool:
        return self.refused.get((group_id, item_id)) == self.work[group_id].applied

    # --- admission control (§10.3; admission.py) -------------------------------------

    def estimate_seconds(self, contract: dict) -> float:
        """This worker's estimate of how long running `contract` takes, for the deadline
        check. Default: the median of its last runs (all Groups), else 60 seconds.
        Override it (or pass `estimate_seconds=`) when the handler knows better."""
        runs = [d for group in self.durations.values() for d in group[-50:]]
        return statistics.median(runs) if runs else DEFAULT_ESTIMATE_SECONDS

    def estimate_cost(self, contract: dict) -> dict:
        """This worker's estimate of what running `contract` uses, a six-dimension delta
        (`financial` `{amount, currency}`, `tokens`, `toolCalls`, `computeSeconds`,
        `wallClockSeconds`, `sideEffects`; absent means none), for the budget check.
        Default: its duration estimate as `wallClockSeconds`. Override it (or pass
        `estimate_cost=`) when the handler spends tokens, money or side effects."""
        return {"wallClockSeconds": math.ceil(self.estimate_seconds(contract))}

    def _roles(self, group_id: str) -> frozenset | None:
        known = getattr(self.client, "known_membership", None)
        member = known(group_id) if known else None
        if member is not None and member.get("roles") is not None:
            return frozenset(member["roles"])
        return self.roles.get(group_id)

    def admission_facts(self, group_id: str, item: Item, now, *,
                        revision: bool = False) -> admission.Facts:
        """What admission control decides an offer (or a revised contract) on."""
        owned = self._owned_count()
        waiting = len(self.accepting) + sum(
            1 for g, w in self.work.items() for i in w.owned(self.agent_id, ("queued",))
            if (g, i.id) not in self.running)
        slots = max(1, self.capacity)
        ahead = max(0, owned - slots + 1)  # items before this one when every slot is taken
        typical = self.estimate_seconds(item.contract)
        window = self.facts[group_id].start_within.get(item.id) or self.start_window_seconds
        return admission.Facts(
            now=now, card=self.card, roles=self._roles(group_id), needs=self.needs,
            capability_ranges=self.capability_ranges,
            dependencies_met=self.work[group_id].dependencies_met(item),
            slots=self.capacity, owned=owned, waiting=waiting,
            queue_capacity=self.queue_capacity, check_capacity=not revision,
            start_delay_seconds=0.0 if revision else math.ceil(ahead / slots) * typical,
            start_by=None if revision else now + timedelta(seconds=window),
            estimate_seconds=self.estimate_seconds(item.contract),
            usage=self.facts[group_id].usage.get(item.id, {}),
            estimate_cost=self.estimate_cost(item.contract))

    async def _consider_offer(self, group_id: str, item: Item) -> None:
        decline = admission.admit(item.contract, self.admission_facts(group_id, item, utcnow()))
        if decline is not None:
            await self._decline(group_id, item, decline)
            return
        try:
            await self.client.command(group_id, "work.accept_offer",
                                      {"contractRevision": item.contract_revision},
                                      workItemId=item.id)
            self.accepting.add((group_id, item.id, item.ownership_epoch))
            log.info("accepted %s", item.id)
        except ApiError as error:  # another worker won, the offer moved on, ...
            log.info("accepting %s refused: %s", item.id, error.code)
            self.refused[(group_id, item.id)] = self.work[group_id].applied

    async def _accept_revision(self, group_id: str, item: Item) -> None:
        """A contract revised before we started it must be accepted again (§10.2). There
        is no offer to decline: a revision admission control refuses is left unaccepted
        (the item stays gated; the coordinator sees it never starts)."""
        decline = admission.admit(item.contract, self.admission_facts(group_id, item, utcnow(),
                                                                      revision=True))
        if decline is not None:
            log.warning("not accepting revision %s of %s: %s (%s)", item.contract_revision,
                        item.id, decline.reason, decline.detail)
            self.refused[(group_id, item.id)] = self.work[group_id].applied
            return
        try:
            await self.client.command(group_id, "work.accept_offer",
                                      {"contractRevision": item.contract_revision},
                                      workItemId=item.id)
            log.info("accepted revision %s of %s", item.contract_revision, item.id)
        except ApiError as error:
            log.info("accepting revision of %s refused: %s", item.id, error.code)
        self.refused[(group_id, item.id)] = self.work[group_id].applied

    async def _decline(self, group_id: str, item: Item, decline: admission.Decline) -> None:
        log.info("declining %s: %s (%s)", item.id, decline.reason, decline.detail)
        try:
            await self.client.command(group_id, "work.decline_offer", decline.body(),
                                      workItemId=item.id)
        except ApiError as error:
            log.info("declining %s refused: %s", item.id, error.code)
        self.refused[(group_id, item.id)] = self.work[group_id].applied

    async def _schedule(self, now) -> None:
        queues = {g: [q for q in w.queue(self.agent_id, now)
                      if (g, q.work_item_id) not in self.running
                      and not self._refused_now(g, q.work_item_id)]
                  for g, w in self.work.items()}
        decision = scheduler.schedule(self.slots, queues, {}, {}, now, self.fairness)
        self.slots, self.fairness = decision.slots, decision.fairness
        for assignment in decision.started:
            key = (assignment.group_id, assignment.work_item_id)
            task = asyncio.create_task(self._run(assignment))
            self.running[key] = (task, None)
        if decision.started:
            await self._report_presence()

    # --- scheduling disclosure (§11.2) ------------------------------------------------

    async def _disclose(self, now) -> None:
        """Tell each Group when its queued items should start and finish: on acceptance
        (the first disclosure) and on material changes only. scheduler.outlook reduces
        the facts to the item's own Group, so nothing of another Group leaks into it."""
        queues = {g: w.queue(self.agent_id, now) for g, w in self.work.items()}
        for group_id, items in queues.items():
            for queued in items:
                if (group_id, queued.work_item_id) in self.running:
                    continue
                key = (group_id, queued.work_item_id, queued.ownership_epoch)
                body = disclosure.disclose(scheduler.outlook(
                    group_id, queued.work_item_id, self.slots, queues, {}, now,
                    durations=self.durations[group_id][-50:]))
                if not disclosure.is_material_change(self.disclosed.get(key), body):
                    continue
                self.disclosed[key] = body  # refused or not: again only on a material change
                try:
                    await self.client.command(group_id, "schedule.disclose", body,
                                              workItemId=queued.work_item_id,
                                              ownershipEpoch=queued.ownership_epoch)
                except ApiError as error:
                    log.info("disclosure for %s refused: %s", queued.work_item_id, error.code)

    # --- one WorkItem in one slot ------------------------------------------------------

    async def _run(self, assignment: scheduler.Assignment) -> None:
        group_id, item_id = assignment.group_id, assignment.work_item_id
        key = (group_id, item_id)
        try:
            item = self.work[group_id].items[item_id]
            body = {"leaseSeconds": self.lease_seconds} if self.lease_seconds else {}
            try:
                answer = await self.client.command(group_id, "work.start", body,
                                                   workItemId=item_id,
                                                   ownershipEpoch=assignment.ownership_epoch)
            except ApiError as error:
                log.info("starting %s refused: %s", item_id, error.code)
                self.refused[key] = self.work[group_id].applied
                self._ended(Outcome(group_id, item_id, "refused", False,
                                    f"the server refused work.start for {item_id}: {error}"))
                return
            started = next(e for e in answer["events"] if e["type"] == "work.started")["data"]
            token = started.get("capabilityToken") or {}
            self.slots = self.slots.update(assignment.with_lease(started["leaseId"],
                                                                 token.get("id")))
            ctx = WorkContext(self, group_id, item, assignment, started["leaseId"], token)
            ctx.lease_expires_at = parse_time(started["expiresAt"])
            self.running[key] = (self.running[key][0], ctx)
            began = utcnow()
            ended = await self._execute(ctx)
            if not ctx.checkpointed and ctx.lease_lost is None:
                self.durations[group_id].append((utcnow() - began).total_seconds())
            self._ended(ended)
        except asyncio.CancelledError:
            self._ended(Outcome(group_id, item_id, "stopped", False,
                                f"{item_id} was stopped before it ended (the worker is "
                                "stopping)"))
            raise
        except ApiError as error:
            log.warning("running %s: the server refused: %s", item_id, error)
            self._ended(Outcome(group_id, item_id, "refused", False,
                                f"the server refused a command on {item_id}: {error}"))
        except Exception as error:
            log.exception("running %s failed", item_id)
            self._ended(Outcome(group_id, item_id, "failed", False,
                                f"running {item_id} failed: {error!r}"))
        finally:
            self.running.pop(key, None)
            self.slots = self.slots.release(assignment.slot_id)
            self.wake.set()
            await self._report_presence()

    async def _execute(self, ctx: WorkContext) -> Outcome:
        """Run the handler in its own task beside the lease renewal, then submit its
        result (or fail the item with Evidence). When the lease is lost meanwhile the
        renewal (or the log) cancels the handler's task and nothing is submitted.
        Offline (§11.5), a handler that ended waits for the reconciliation, then its result
        is submitted under the lease the reconnection started again."""

        def outcome(state: str, ok: bool, message: str) -> Outcome:
            return Outcome(ctx.group_id, ctx.work_item_id, state, ok, message)

        def released() -> Outcome:
            if ctx.blocked:
                return outcome("blocked", True, f"blocked {ctx.work_item_id}")
            return outcome("checkpointed", True, f"checkpointed {ctx.work_item_id}; it is "
                           "queued again")

        def lost() -> Outcome:
            log.error("%s: the lease is gone (%s); the handler was cancelled and nothing "
                      "was submitted", ctx.work_item_id, ctx.lease_lost)
            return outcome("lease-lost", False, f"the lease of {ctx.work_item_id} is gone "
                           f"({ctx.lease_lost}); its handler was cancelled and nothing was "
                           "submitted")

        renewal = asyncio.create_task(self._renew(ctx))
        run = self.handler(ctx)
        task = ctx._task = asyncio.create_task(ctx.meter.run(run) if ctx.meter else run)
        try:
            try:
                await asyncio.wait({task})
            except asyncio.CancelledError:  # the worker is stopping
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                raise
        finally:
            renewal.cancel()
            await asyncio.gather(renewal, return_exceptions=True)
        if ctx.lease_lost is None and not ctx.submitted:
            await self._until_reconciled(ctx)
        lease = ctx._lease_fields()  # the lease the reconnection started again, if it did
        if ctx.lease_lost is not None:
            if not task.cancelled() and task.exception() is not None \
                    and not isinstance(task.exception(), Preempted):
                log.info("the handler of %s raised after its lease was lost: %r",
                         ctx.work_item_id, task.exception())
            return lost()  # even if the handler ignored the cancellation and returned
        ctx._finishing = True  # from here on the worker submits or fails the item itself
        if task.cancelled():  # cancelled by the handler's own code, not by the worker
            return outcome("stopped", False, f"the handler of {ctx.work_item_id} was "
                           "cancelled; nothing was submitted, the item stays active until "
                           "its lease expires")
        try:
            result = task.result()
        except Preempted:
            log.info("%s checkpointed after a preemption request", ctx.work_item_id)
            return released()
        except Exception as error:
            if ctx.checkpointed:
                return released()
            if isinstance(error, ApiError) and error.code in LEASE_GONE:
                ctx.lease_lost = f"the server refused a command: {error.code} {error.message}"
                return lost()  # the handler met the loss first: it cannot be failed by us
            log.warning("handler failed on %s: %r", ctx.work_item_id, error)
            criteria = [c["id"] for c in ctx.contract.get("acceptanceCriteria", [])]
            evidence = ctx.evidence(criteria, "handler", f"failed: {error!r}"[:9000])
            await self._charge_before_failing(ctx)
            await self.client.command(ctx.group_id, "work.fail",
                                      {"evidence": [evidence], "reason": str(error)[:9000]
                                       or type(error).__name__}, **lease)
            return outcome("failed", False, f"the handler failed on {ctx.work_item_id}: "
                           f"{error!r}; the WorkItem was failed with that as its Evidence")
        if ctx.checkpointed:
            return released()
        if ctx.submitted:
            self.submitted.append((ctx.group_id, ctx.work_item_id))
            return outcome("submitted", True, f"submitted {ctx.work_item_id}")
        if result is None:
            return outcome("refused", False, f"the handler returned nothing for "
                           f"{ctx.work_item_id} and did not checkpoint or block it; it stays "
                           "active until its lease expires")
        try:
            await ctx._charge_now(final=True)
            await self.client.command(ctx.group_id, "work.submit", {
                "contractRevision": ctx.contract_revision,
                "artifacts": list(result.get("artifacts", [])),
                "evidence": list(result["evidence"])}, **lease)
        except ApiError as error:
            if error.status >= 500 or error.status == 429:
                raise  # not an answer: whether it was submitted is unknown
            return await self._submission_refused(ctx, error, outcome)
        self.submitted.append((ctx.group_id, ctx.work_item_id))
        log.info("submitted %s", ctx.work_item_id)
        return outcome("submitted", True, f"submitted {ctx.work_item_id}")

    async def _charge_before_failing(self, ctx: WorkContext) -> None:
        """A failed attempt cost what it cost; a refused charge does not stop the failure."""
        try:
            await ctx._charge_now(final=True)
        except ApiError as error:
            log.warning("charging %s before failing it was refused: %s", ctx.work_item_id,
                        error)

    async def _submission_refused(self, ctx: WorkContext, error: ApiError, outcome) -> Outcome:
        """The server refused `work.submit`: an error for the caller, and the item is
        failed with the refusal as Evidence rather than left `active` until its lease
        runs out, unless the refusal says the lease is no longer ours (then we cannot)."""
        said = f"the server refused work.submit for {ctx.work_item_id}: {error.code} " \
               f"{error.message}"
        log.error("%s", said)
        if error.code in LEASE_GONE:
            return outcome("refused", False, f"{said}; the lease is no longer this "
                           "worker's, so it cannot fail the item")
        criteria = [c["id"] for c in ctx.contract.get("acceptanceCriteria", [])]
        evidence = ctx.evidence(criteria, "submission-refused",
                                f"fail: {error.code} {error.message}"[:9000])
        await self._charge_before_failing(ctx)
        try:
            await self.client.command(ctx.group_id, "work.fail", {
                "evidence": [evidence], "reason": f"submission refused: {error.code}"},
                **ctx._lease_fields())
        except ApiError as fail_error:
            log.error("failing %s after the refused submission was refused too: %s",
                      ctx.work_item_id, fail_error)
            return outcome("refused", False, f"{said}; failing it was refused too: "
                           f"{fail_error.code} {fail_error.message}")
        return outcome("refused", False, f"{said}; the WorkItem was failed with that as its "
                       "Evidence")

    def _ended(self, outcome: Outcome) -> None:
        """One WorkItem's run ended; with `once`, that ends the worker."""
        if self.outcome is None or not self.once:
            self.outcome = outcome
        if self.once and self._stop is not None:
            self._stop.set()

    async def _renew(self, ctx: WorkContext) -> None:
        """Renew at a third of the lease's remaining time while the handler runs. A
        refused renewal, or none that reaches the server before the lease expires, loses
        the lease: the handler is cancelled (ctx._lose_lease)."""
        while ctx.lease_lost is None and not ctx.checkpointed:
            if self.offline_since is not None:  # §11.5: until reconciled or the deadline
                if not await self._until_reconciled(ctx):
                    return
                continue
            remaining = (ctx.lease_expires_at - utcnow()).total_seconds()
            await asyncio.sleep(max(0.5, remaining / 3) if remaining > 0 else 0)
            if ctx.checkpointed:
                return  # the handler released the lease
            body = {"leaseSeconds": self.lease_seconds} if self.lease_seconds else {}
            remaining = (ctx.lease_expires_at - utcnow()).total_seconds()
            try:
                # No answer past the lease's expiry is as good as none.
                answer = await asyncio.wait_for(
                    self.client.command(ctx.group_id, "lease.renew", body,
                                        **ctx._lease_fields()), timeout=max(remaining, 0.5))
            except ApiError as error:
                if error.status < 500 and error.status != 429:
                    ctx._lose_lease(f"the server refused lease.renew: {error.code} "
                                    f"{error.message}")
                    return
                failure: Exception = error
            except (httpx.TransportError, OSError, asyncio.TimeoutError) as error:
                failure = error
                if self.offline_enabled:
                    self._went_offline(error)
                    continue
            else:
                renewed = answer["events"][0]["data"]
                ctx.lease_expires_at = parse_time(renewed["expiresAt"])
                ctx.capability_token = renewed.get("capabilityToken") or ctx.capability_token
                continue
            if utcnow() >= ctx.lease_expires_at:
                ctx._lose_lease(f"lease.renew did not reach the server before the lease "
                                f"expired at {format_time(ctx.lease_expires_at)}: {failure!r}")
                return
            log.warning("renewing %s failed (%r); trying again before the lease expires at %s",
                        ctx.work_item_id, failure, format_time(ctx.lease_expires_at))

    # --- bounded offline execution (§11.5, offline_buffer.py) ---------------------------------

    def _contexts(self) -> list[WorkContext]:
        return [ctx for _, ctx in self.running.values() if ctx is not None]

    def _went_offline(self, error: BaseException) -> None:
        """The service cannot be reached: reports are buffered from now on, nothing new
        is accepted or started, and a reconnection is tried until it succeeds."""
        if self.offline_since is not None:
            return
        self.offline_since = utcnow()
        self.online.clear()
        log.warning("the Group service cannot be reached (%r): buffering progress and "
                    "checkpoints until each lease's grace deadline", error)
        self._reconnector = asyncio.create_task(self._reconnect_loop())

    async def _until_reconciled(self, ctx: WorkContext | None = None) -> bool:
        """Without `ctx`: wait while a reconnection's reconciliation is under way (a
        report buffered after the new session would be OUTSIDE_GRACE_WINDOW). With it:
        wait, while offline, for the reconciliation until ctx's grace deadline; past it
        the handler is cancelled and False returned."""
        if ctx is None:
            if self.reconnecting:
                await self.online.wait()
            return True
        if self.offline_since is None:
            return True
        timeout = max((ctx.grace_deadline - utcnow()).total_seconds(), 0)
        try:
            await asyncio.wait_for(self.online.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            ctx._lose_lease(f"its grace deadline {format_time(ctx.grace_deadline)} passed "
                            "while the Group service could not be reached", force=True)
            return False

    async def _reconnect_loop(self) -> None:
        delay = self.reconnect_seconds
        while self.offline_since is not None:
            await asyncio.sleep(delay)
            try:
                await self._reconnect()
            except offline_buffer.UNREACHABLE as error:
                log.info("still cannot reach the Group service: %r", error)
            except ApiError as error:
                log.warning("reconnecting: the server answered %s", error)
            delay = min(delay * 2, 5.0)

    async def _reconnect(self) -> None:
        """A new session (it revokes this agent's leases), every buffered command rebased
        and sent in order, then each running handler's item started again under a new
        lease; only then are reports sent, and submissions made, again."""
        await self.client.open_session()
        self.reconnecting = True
        for ctx in self._contexts():
            await self._settle(ctx)
        results = await offline_buffer.reconcile(self.client, self.buffer)
        self._take_reconciled(results)
        await self._seen(results)
        for ctx in self._contexts():
            await self._resume(ctx)
        log.info("reconnected (session %s) and reconciled; offline since %s",
                 self.client.session_epoch, format_time(self.offline_since))
        self.offline_since, self.reconnecting = None, False
        self.online.set()
        self.wake.set()

    async def _seen(self, results: list, timeout: float = 10.0) -> None:
        """Wait (bounded) until the Inbox has folded in the reconciled commands' events,
        so that what starts next starts from them: a buffered checkpoint is where the
        owner's next run begins (ctx.last_checkpoint)."""
        heads = {}
        for result in results:
            for event in (result.answer or {}).get("events", []):
                heads[event["groupId"]] = max(heads.get(event["groupId"], 0),
                                              event["sequence"])
        deadline = asyncio.get_running_loop().time() + timeout
        while any(self.work[g].applied < head for g, head in heads.items() if g in self.work):
            if asyncio.get_running_loop().time() > deadline:
                log.warning("the reconciled events were not seen within %.0f s; going on",
                            timeout)
                return
            await asyncio.sleep(0.05)

    def _take_reconciled(self, results: list) -> None:
        """Each refusal goes to the handler of its item (ctx.refusals, ctx.on_refusal);
        OWNER_CHANGED also cancels it (its buffer was dropped)."""
        self.reconciled.extend(results)
        running = {(ctx.group_id, ctx.work_item_id): ctx for ctx in self._contexts()}
        for result in results:
            ctx = running.get((result.entry.group_id, result.entry.work_item_id))
            if result.error is None or ctx is None:
                continue
            ctx.refusals.append(result.error)
            if ctx.on_refusal is not None:
                try:
                    ctx.on_refusal(result.error, result.entry)
                except Exception:
                    log.exception("on_refusal of %s raised", ctx.work_item_id)
            if result.error.code == "OWNER_CHANGED":
                ctx._lose_lease(f"buffered {result.entry.type} refused: OWNER_CHANGED "
                                f"{result.error.message}", force=True)

    async def _settle(self, ctx: WorkContext) -> None:
        """A usage.record whose answer the disconnection lost, sent again as it was
        before anything buffered: answered as a duplicate, it was charged; refused
        (STALE_SESSION: it never will be), its delta goes into the binding of the first
        command buffered under that lease, else with ctx's next command under the new
        lease. So each delta is charged once."""
        if ctx.unsettled is None:
            return
        (envelope, delta), ctx.unsettled = ctx.unsettled, None
        try:
            await self.client.send(ctx.group_id, envelope)
            return
        except ApiError as error:
            if error.status >= 500 or error.status == 429:
                ctx.unsettled = (envelope, delta)
                raise
        if self.buffer.add_usage(ctx.group_id, ctx.work_item_id, envelope["leaseId"], delta):
            return
        if ctx.checkpointed or ctx.lease_lost is not None:
            log.warning("usage of %s not charged: %s went with the connection and its lease "
                        "has ended", ctx.work_item_id, delta)
            return
        ctx.usage.add(**delta)

    async def _resume(self, ctx: WorkContext) -> None:
        """The reconnection revoked ctx's lease: start the item again (same ownership
        epoch, `resumed: true`) so that its handler may go on and submit."""
        if ctx.lease_lost is not None or ctx.checkpointed or ctx.submitted:
            return
        body = {"leaseSeconds": self.lease_seconds} if self.lease_seconds else {}
        try:
            answer = await self.client.command(ctx.group_id, "work.start", body,
                                               workItemId=ctx.work_item_id,
                                               ownershipEpoch=ctx.ownership_epoch)
        except ApiError as error:
            if error.status >= 500 or error.status == 429:
                raise
            ctx._lose_lease(f"starting it again after the reconnection was refused: "
                            f"{error.code} {error.message}", force=True)
            return
        started = next(e for e in answer["events"] if e["type"] == "work.started")["data"]
        token = started.get("capabilityToken") or {}
        ctx.lease_id, ctx.capability_token = started["leaseId"], token
        ctx.lease_expires_at = parse_time(started["expiresAt"])
        ctx.session_epoch = self.client.session_epoch
        self.slots = self.slots.update(ctx.assignment.with_lease(started["leaseId"],
                                                                 token.get("id")))
        log.info("started %s again under lease %s after the reconnection", ctx.work_item_id,
                 ctx.lease_id)

    # --- Presence ----------------------------------------------------------------------

    async def _presence_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self._report_presence()
            try:
                await asyncio.wait_for(stop.wait(), timeout=self.presence_seconds)
            except asyncio.TimeoutError:
                pass

    async def _report_presence(self, status: str | None = None) -> None:
        free = max(0, self.capacity - self._owned_count()) if self.capacity else 0
        try:
            # Going offline is said once: the server may be the one shutting down.
            await self.client.presence(free, status or ("available" if free else "busy"),
                                       retry=status != "offline")
        except (ApiError, OSError, httpx.TransportError) as error:
            log.info("Presence report failed: %r", error)


class HandlerError(ImportError):
    """The --handler spec names nothing importable, or not an async function."""


def load_handler(spec: str) -> Handler:
    """`module:function` (or `module.function`), e.g. `myworker:handle` for the file
    myworker.py in the current folder or on PYTHONPATH; raises HandlerError with a
    message that says what to do."""
    module_name, _, name = spec.partition(":")
    if not name:
        module_name, _, name = spec.rpartition(".")
    if not module_name or not name:
        raise HandlerError(f"handler {spec!r} is not module:function (e.g. myworker:handle)")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        top = module_name.split(".")[0]
        if error.name and (module_name == error.name or module_name.startswith(error.name + ".")):
            where = f"{top}.py" if top == module_name else f"the package {top}/"
            hint = f"run from the folder that holds {where}, or put it on PYTHONPATH"
        else:
            hint = f"{module_name} imports {error.name}: is it installed in this environment?"
        raise HandlerError(f"cannot import handler {spec!r}: {error} ({hint})") from error
    except Exception as error:  # the module itself raised while being imported
        raise HandlerError(f"cannot import handler {spec!r}: importing {module_name} raised "
                           f"{error!r}") from error
    handler = getattr(module, name, None)
    if handler is None:
        raise HandlerError(f"cannot import handler {spec!r}: {module_name} "
                           f"({getattr(module, '__file__', '?')}) has no {name!r}")
    if not (inspect.iscoroutinefunction(handler)
            or inspect.iscoroutinefunction(getattr(handler, "__call__", None))):
        raise HandlerError(f"handler {spec!r} must be an async function: "
                           f"async def {name}(ctx) -> dict")
    return handler


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m mission_weave.sdk.worker",
                                     description="Run a MissionWeave Worker.")
    parser.add_argument("--key", required=True, help="the agent key file (.mw/agents/*.json)")
    parser.add_argument("--group", action="append", help="a Group to work for (repeatable; "
                        "default: the key file's groupId)")
    parser.add_argument("--handler", default="mission_weave.sdk.demo:handle",
                        help="module:function, an async function(ctx) -> result; the module "
                        "is looked up in the current folder too")
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--cursors", help="the SQLite Cursor file (default: beside the key)")
    parser.add_argument("--transport", choices=("auto", "ws", "http"), default="auto")
    parser.add_argument("--once", action="store_true",
                        help="process one WorkItem to its end (submitted, blocked, checkpointed "
                        "or failed) and exit: 0 unless the handler failed or the server refused")
    parser.add_argument("--capability-range", action="append", default=[],
                        metavar="ID=RANGE", help="also accept contracts requiring these "
                        "versions of capability ID, e.g. summarize='>=1,<3' (repeatable; the "
                        "Agent Card keeps exact versions)")
    parser.add_argument("--queue-capacity", type=int, help="at most this many accepted "
                        "WorkItems waiting for a slot (default: maxConcurrency)")
    parser.add_argument("--offline-grace", type=float, metavar="SECONDS",
                        help="bounded offline execution (§11.5): buffer progress and "
                        "checkpoints while the server is unreachable until each lease's "
                        f"expiry plus SECONDS (the server's default is "
                        f"{offline_buffer.DEFAULT_GRACE_SECONDS}); off by default")
    args = parser.parse_args(argv)
    ranges = {}
    for given in args.capability_range:
        capability, _, spec = given.partition("=")
        try:
            admission.parse_spec(spec)
        except admission.VersionSpecError as error:
            parser.error(f"--capability-range {given!r}: {error}")
        if not capability:
            parser.error(f"--capability-range {given!r}: write ID=RANGE, e.g. summarize='>=1,<3'")
        ranges[capability] = spec
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # `--handler myworker:handle` beside myworker.py
    try:
        handler = load_handler(args.handler)
        key = AgentKey.load(args.key)
    except HandlerError as error:
        raise SystemExit(str(error))
    except (OSError, ValueError, KeyError) as error:
        raise SystemExit(f"cannot read the key file {args.key}: {error!r} (make one with "
                         "python -m mission_weave.sdk.keys new AGENT_ID)")
    groups = args.group or ([key.group_id] if key.group_id else None)
    if not groups:
        raise SystemExit(f"no Group to work for: pass --group (the key file {args.key} "
                         "names none)")
    cursors = args.cursors or str(Path(args.key).with_suffix("")) + ".cursors.sqlite3"
    try:
        outcome = asyncio.run(_serve(args.url, key, groups, handler, cursors, args.transport,
                                     args.once, capability_ranges=ranges,
                                     queue_capacity=args.queue_capacity,
                                     offline_grace_seconds=args.offline_grace))
    except ApiError as error:
        raise SystemExit(f"the server at {args.url} refused: {error}{_hint(error, key, groups)}")
    except httpx.TransportError as error:
        raise SystemExit(f"cannot reach the server at {args.url}: {error!r} (is it running? "
                         "`make run` serves the demo on http://127.0.0.1:8000)")
    if args.once:
        if outcome is None:
            raise SystemExit("--once: stopped before a WorkItem was processed")
        print(json.dumps({"groupId": outcome.group_id, "workItemId": outcome.work_item_id,
                          "outcome": outcome.state}))
        if not outcome.ok:
            raise SystemExit(f"--once: {outcome.message}")


def _hint(error: ApiError, key: AgentKey, groups: list) -> str:
    if error.code in ("UNAUTHENTICATED", "INVALID_SIGNATURE"):
        return (f" (is agent {key.agent_id} registered with this key? `python manage.py "
                f"mw_register_agent {key.agent_id} --public-key=...` prints its keyId, which "
                f"must be the key file's, now {key.key_id})")
    if error.code == "NOT_A_MEMBER":
        return (f" (admit it: `python manage.py mw_add_member {groups[0]} "
                f"agent:{key.agent_id} --roles worker`)")
    return ""


async def _serve(url, key, groups, handler, cursors, transport, once=False,
                 **options) -> Outcome | None:
    stop = stop_on_signals()
    async with Client(url, key) as client:
        worker = Worker(client, groups, handler, cursors, transport=transport, once=once,
                        **options)
        await worker.run(stop)
        return worker.outcome


if __name__ == "__main__":
    main()
