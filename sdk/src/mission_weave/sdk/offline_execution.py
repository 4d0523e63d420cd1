"""Bounded offline execution (§11.5) in a running Worker: the buffer (offline_buffer.py)
wired to the handlers, the leases and the reconnection.

While the Group service cannot be reached (a transport error, never an HTTP answer) the
worker accepts and starts nothing, buffers its handlers' reports durably with the
binding, and keeps each handler going until its lease's grace deadline. After the
reconnection (session.py opens the new session, which revokes this agent's leases) the
buffered commands are sent in order, rebased, and each running item is started again
under a new lease; only then do reports and submissions go out again. Off (the
default), nothing here is used: a lease whose renewals cannot reach the server is lost
at its expiry.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from mission_weave.protocol.json_types import JsonObject
from mission_weave.protocol.timefmt import format_time

from . import offline_buffer
from .client import ApiError, utcnow
from .offline_buffer import OfflineBuffer, OfflineError, Reconciled

if TYPE_CHECKING:
    from .handler_context import WorkContext
    from .worker import Worker

log = logging.getLogger("mission_weave.sdk.worker")


class OfflineExecution:
    """The worker's offline state: `since` (when the service was found unreachable; None
    online), the buffer, and the `online` event handlers wait on."""

    def __init__(self, worker: Worker, cursor_path: str | Path, grace_seconds: float | None,
                 measure_usage: bool | None):
        self.worker = worker
        self.grace_seconds = grace_seconds
        self.enabled = grace_seconds is not None
        # Measured seconds are what an offline binding must carry, so measuring is on
        # with offline execution unless the caller says otherwise.
        self.measure_usage = self.enabled if measure_usage is None else measure_usage
        path = OfflineBuffer.path_beside(cursor_path)
        self.buffer = OfflineBuffer(path) if self.enabled else None
        self.since: datetime | None = None
        self.reconnecting = False  # a new session is open, its reconciliation not finished
        self.online = asyncio.Event()
        self.online.set()
        self.reconciled: list[Reconciled] = []  # every answer, for tests and logs

    def _buffer(self) -> OfflineBuffer:
        # Only reached with offline execution on: nothing goes offline otherwise.
        if self.buffer is None:
            raise OfflineError("offline execution is off (Worker(offline_grace_seconds=None))")
        return self.buffer

    def went_offline(self, error: BaseException) -> None:
        """The service cannot be reached: reports are buffered from now on, nothing new
        is accepted or started, and a reconnection is tried until it succeeds."""
        if self.since is not None:
            return
        self.since = utcnow()
        self.online.clear()
        log.warning("the Group service cannot be reached (%r): buffering progress and "
                    "checkpoints until each lease's grace deadline", error)
        self.worker.session.start_reconnecting()

    async def until_reconciled(self, ctx: WorkContext | None = None) -> bool:
        """Without `ctx`: wait while a reconnection's reconciliation is under way (a
        report buffered after the new session would be OUTSIDE_GRACE_WINDOW). With it:
        wait, while offline, for the reconciliation until ctx's grace deadline; past it
        the handler is cancelled and False returned."""
        if ctx is None:
            if self.reconnecting:
                await self.online.wait()
            return True
        if self.since is None:
            return True
        timeout = max((ctx.grace_deadline - utcnow()).total_seconds(), 0)
        try:
            await asyncio.wait_for(self.online.wait(), timeout)
            return True
        except TimeoutError:
            ctx._lose_lease(f"its grace deadline {format_time(ctx.grace_deadline)} passed "
                            "while the Group service could not be reached", force=True)
            return False

    def buffer_report(self, ctx: WorkContext, type_: str, body: JsonObject,
                      command_id: str | None = None) -> JsonObject:
        """Keep one report of ctx's durably, with the binding of its lease, for the
        reconnection; answered as `{"buffered": true, ...}`."""
        now = utcnow()
        if now > ctx.grace_deadline:
            raise OfflineError(f"cannot buffer {type_} for {ctx.work_item_id}: its grace "
                               f"deadline {format_time(ctx.grace_deadline)} has passed")
        ctx._measured()  # each buffered command carries the seconds since the one before
        buffer = self._buffer()
        last = buffer.last_buffered_at(ctx.lease_id)
        now = max(now, last) if last else now  # bufferedAt never goes back under a lease
        if ctx.session_epoch is None:
            raise OfflineError(f"cannot buffer {type_} for {ctx.work_item_id}: its lease "
                               "was issued under no session")
        binding = offline_buffer.binding(
            agent_id=ctx.client.agent_id, group_id=ctx.group_id,
            work_item_id=ctx.work_item_id, session_epoch=ctx.session_epoch,
            ownership_epoch=ctx.ownership_epoch, lease_id=ctx.lease_id,
            # `since` is set: a report is buffered only after went_offline
            disconnected_at=min(self.since or now, now), buffered_at=now,
            grace_deadline=ctx.grace_deadline, lease_expires_at=ctx._expires(),
            usage=ctx.usage.take())
        entry = buffer.add(ctx.group_id, type_, body, binding,
                           {"workItemId": ctx.work_item_id}, command_id)
        log.info("buffered %s for %s offline (%s)", type_, ctx.work_item_id, entry.command_id)
        return {"commandId": entry.command_id, "buffered": True,
                "bufferedAt": binding["bufferedAt"], "events": []}

    # --- at start ------------------------------------------------------------------------

    async def reconcile_leftovers(self) -> None:
        """What an earlier run buffered and could not send before it ended: reconciled
        before anything else starts."""
        if self.buffer is not None and len(self.buffer):
            self.take_reconciled(await offline_buffer.reconcile(self.worker.client,
                                                                self.buffer))

    # --- after the reconnection ------------------------------------------------------

    async def reconcile(self) -> None:
        """Under the new session (which revoked this agent's leases): every buffered
        command rebased and sent in order, then each running handler's item started again
        under a new lease; only then are reports sent, and submissions made, again."""
        worker = self.worker
        self.reconnecting = True
        for ctx in worker.slots.contexts():
            await self.settle(ctx)
        results = await offline_buffer.reconcile(worker.client, self._buffer())
        self.take_reconciled(results)
        await self.seen(results)
        for ctx in worker.slots.contexts():
            await worker.leases.resume(ctx)
        log.info("reconnected (session %s) and reconciled; offline since %s",
                 worker.client.session_epoch, format_time(self.since or utcnow()))
        self.since, self.reconnecting = None, False
        self.online.set()
        worker.wake.set()

    async def seen(self, results: list[Reconciled], timeout: float = 10.0) -> None:
        """Wait (bounded) until the Inbox has folded in the reconciled commands' events,
        so that what starts next starts from them: a buffered checkpoint is where the
        owner's next run begins (ctx.last_checkpoint)."""
        heads: dict[str, int] = {}
        for result in results:
            for event in (result.answer or {}).get("events", []):
                heads[event["groupId"]] = max(heads.get(event["groupId"], 0),
                                              event["sequence"])
        work = self.worker.work
        deadline = asyncio.get_running_loop().time() + timeout
        while any(work[g].applied < head for g, head in heads.items() if g in work):
            if asyncio.get_running_loop().time() > deadline:
                log.warning("the reconciled events were not seen within %.0f s; going on",
                            timeout)
                return
            await asyncio.sleep(0.05)

    def take_reconciled(self, results: list[Reconciled]) -> None:
        """Each refusal goes to the handler of its item (ctx.refusals, ctx.on_refusal);
        OWNER_CHANGED also cancels it (its buffer was dropped)."""
        self.reconciled.extend(results)
        running = {(ctx.group_id, ctx.work_item_id): ctx
                   for ctx in self.worker.slots.contexts()}
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

    async def settle(self, ctx: WorkContext) -> None:
        """A usage.record whose answer the disconnection lost, sent again as it was
        before anything buffered: answered as a duplicate, it was charged; refused
        (STALE_SESSION: it never will be), its delta goes into the binding of the first
        command buffered under that lease, else with ctx's next command under the new
        lease. So each delta is charged once."""
        if ctx.unsettled is None:
            return
        (envelope, delta), ctx.unsettled = ctx.unsettled, None
        try:
            await self.worker.client.send(ctx.group_id, envelope)
            return
        except ApiError as error:
            if error.status >= 500 or error.status == 429:
                ctx.unsettled = (envelope, delta)
                raise
        if self._buffer().add_usage(ctx.group_id, ctx.work_item_id, envelope["leaseId"],
                                    delta):
            return
        if ctx.checkpointed or ctx.lease_lost is not None:
            log.warning("usage of %s not charged: %s went with the connection and its lease "
                        "has ended", ctx.work_item_id, delta)
            return
        ctx.usage.add(**delta)
