"""What a handler gets: `WorkContext`, one WorkItem in one slot under its Execution
Lease (docs/sdk.md, "What a handler gets").

The handler is `async def handle(ctx: WorkContext) -> HandlerResult | None`. Through
`ctx` it reads the contract and reports under the slot's lease: progress, checkpoints,
blocks, Conversation posts, artifacts, a submission of its own, usage charges. Every
command it sends carries the lease (`workItemId`, `ownershipEpoch`, `leaseId`), so a
report from a lease that is gone is refused by the server rather than applied.

With bounded offline execution on (offline_execution.py), reports are buffered while the
Group service cannot be reached, and the actions that cannot be undone (submitting,
publishing, a side effect under the capability token) raise OfflineError instead.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Coroutine, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from mission_weave.protocol.idempotency import idempotency_key
from mission_weave.protocol.json_types import JsonObject
from mission_weave.protocol.timefmt import format_time

from . import offline_buffer
from .client import ApiError, may_have_arrived, utcnow
from .ids import uuid7
from .offline_buffer import OfflineError

if TYPE_CHECKING:
    from .queues import Item
    from .scheduler import Assignment
    from .worker import Worker

log = logging.getLogger("mission_weave.sdk.worker")

# Reports that end the lease: the handler gives the item back (checkpoint) or parks it
# (block), so the measured seconds are charged with them.
RELEASING = frozenset({"work.checkpoint", "work.block"})


class HandlerResult(TypedDict):
    """What a handler returns for the worker to submit (`work.submit`)."""

    evidence: list[JsonObject]  # Evidence items, as ctx.evidence(...) builds them
    artifacts: NotRequired[list[str]]  # content hashes, as ctx.publish_artifact returns


# `async def handle(ctx)`: the worker runs the coroutine it returns in a task of its own.
Handler = Callable[["WorkContext"], Coroutine[Any, Any, HandlerResult | None]]
RefusalHook = Callable[[ApiError, offline_buffer.Buffered], object]


class Preempted(Exception):
    """Raised by `ctx.raise_if_preempted()` after the context checkpointed."""


class WorkContext:
    """What a handler sees of one WorkItem in one slot: its contract, helpers that act
    under the slot's lease, and the preemption flag."""

    def __init__(self, worker: Worker, group_id: str, item: Item,
                 assignment: Assignment, lease_id: str, capability_token: JsonObject | None):
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
        # The lease's expiry as last granted or renewed (set as soon as work.start answers).
        self.lease_expires_at: datetime | None = None
        # Why the lease is no longer this worker's (a refused or failed renewal, or its
        # revocation, expiry or the item's cancellation in the log); None while it holds it.
        self.lease_lost: str | None = None
        self._task: asyncio.Task[Any] | None = None  # the handler's task
        self._releasing = False  # a checkpoint or block is on its way
        self._finishing = False  # the worker is submitting or failing the item itself
        # Bounded offline execution (§11.5): the session the lease was issued under, the
        # usage delta `charge()` accumulated, and the refusals of this item's buffered
        # commands on reconciliation (ApiError; `on_refusal(error, entry)` is called with
        # each too, when the handler sets it). A test's stand-in client may have no session.
        self.session_epoch: int | None = getattr(self.client, "session_epoch", None)
        self.usage = offline_buffer.Usage()
        # The handler's seconds, measured when the worker measures usage; and a
        # usage.record whose answer was lost with the connection, (envelope, delta), until
        # the reconnection tells whether it was charged.
        self.meter = offline_buffer.Meter() if worker.offline.measure_usage else None
        self.unsettled: tuple[JsonObject, JsonObject] | None = None
        self.refusals: list[ApiError] = []
        self.on_refusal: RefusalHook | None = None
        self.submitted = False  # the handler submitted with ctx.submit()

    @property
    def preemption_requested(self) -> bool:
        return self.preemption.is_set()

    @property
    def producer(self) -> str:
        return self.client.principal

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

    def _lease_fields(self) -> JsonObject:
        return {"workItemId": self.work_item_id, "ownershipEpoch": self.ownership_epoch,
                "leaseId": self.lease_id}

    def _expires(self) -> datetime:
        """The lease's expiry; only asked once work.start answered, which sets it."""
        if self.lease_expires_at is None:
            raise RuntimeError(f"the lease of {self.work_item_id} has no expiry yet")
        return self.lease_expires_at

    def idempotency_key(self, operation_id: str) -> str:
        """The §16 key for an external operation of this attempt."""
        return idempotency_key(self.mission_id or "", self.work_item_id, self.ownership_epoch,
                               operation_id)

    def evidence(self, criteria: Iterable[str], method: str, result: str,
                 artifacts: Iterable[str] = (), subject: str | None = None) -> JsonObject:
        return evidence_record(self.producer, self.work_item_id, criteria, method, result,
                               artifacts, subject)

    # --- bounded offline execution (§11.5) ------------------------------------------

    @property
    def offline(self) -> bool:
        """The Group service could not be reached and the worker has not reconciled yet."""
        return self.worker.offline.since is not None

    @property
    def grace_deadline(self) -> datetime:
        """The lease's expiry plus the grace period: the last moment a report may be
        buffered; past it the handler is cancelled."""
        return offline_buffer.grace_deadline(self._expires(),
                                             self.worker.offline.grace_seconds or 0)

    def charge(self, tokens: int = 0, toolCalls: int = 0, sideEffects: int = 0,
               **more: Any) -> None:
        """Add to the usage this handler spent (also `computeSeconds`, `wallClockSeconds`,
        `financial={amount, currency}`). The delta is charged once, with the next command:
        online a `usage.record` sent before it, offline the binding of the buffered
        command that carries it."""
        self.usage.add(tokens=tokens, toolCalls=toolCalls, sideEffects=sideEffects, **more)

    def _measured(self) -> None:
        """Add the handler's measured seconds since the last charge to the usage."""
        if self.meter is not None:
            seconds = self.meter.take()
            self.usage.add(computeSeconds=seconds.get("computeSeconds", 0),
                           wallClockSeconds=seconds.get("wallClockSeconds", 0))

    async def _charge_now(self, final: bool = False) -> None:
        """Charge the usage delta (`usage.record`) before the next command; `final` (the
        lease is being released or the result submitted) adds the measured seconds.
        Online, measured seconds ride on charges only, so reports cost no extra command."""
        if final:
            self._measured()
        if not self.usage:
            return
        delta = self.usage.take()
        envelope: JsonObject = {}
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
            if envelope and may_have_arrived(error):
                self.unsettled = (envelope, delta)  # charged or not: the reconnection tells
            else:
                self.usage.add(**delta)  # never sent: it goes with the next command
            raise
        except ApiError:
            self.usage.add(**delta)  # refused, so not charged: it goes with the next one
            raise

    async def _report(self, type_: str, body: JsonObject) -> JsonObject:
        """Send a report of work under way, or, with offline execution enabled and the
        service unreachable, buffer it (durably, with the binding) until the reconnection."""
        final = type_ in RELEASING
        offline = self.worker.offline
        if not offline.enabled:
            await self._charge_now(final)
            return await self.client.command(self.group_id, type_, body,
                                             **self._lease_fields())
        await offline.until_reconciled()
        if self.offline:
            return offline.buffer_report(self, type_, body)
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
            offline.went_offline(error)
            return offline.buffer_report(self, type_, body, command_id)

    async def _require_online(self, action: str) -> None:
        if self.worker.offline.enabled:
            await self.worker.offline.until_reconciled()
            if self.offline:
                raise OfflineError(f"{action} needs the Group service, which cannot be "
                                   f"reached; only progress and checkpoints are buffered "
                                   f"offline (§11.5)")

    def capability(self, side_effect: bool = True) -> JsonObject | None:
        """The lease's capability token (`{id, bearer, scopes, expiresAt, ...}`) for a
        call to a tool. Offline, a call with a side effect (irreversible or visible
        outside) must wait for the reconnection (§11.5): OfflineError unless the caller
        says it has none (`side_effect=False`: a read, a reversible step)."""
        if side_effect and self.offline:
            raise OfflineError(f"a side effect under {self.work_item_id}'s capability token "
                               f"needs the Group service, which cannot be reached (§11.5); "
                               f"only reversible work goes on offline")
        return self.capability_token

    # --- reports under the lease ------------------------------------------------------

    async def submit(self, evidence: Iterable[JsonObject],
                     artifacts: Iterable[str] = ()) -> JsonObject:
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
            if self.worker.offline.enabled:
                self.worker.offline.went_offline(error)
                raise OfflineError(f"submitting {self.work_item_id}: the Group service "
                                   f"cannot be reached ({error!r})") from error
            raise
        except BaseException:
            self._finishing = False
            raise
        self.submitted = True
        return answer

    async def progress(self, phase: str, **progress: Any) -> JsonObject:
        """Report progress; offline (when enabled) it is buffered, `{"buffered": true,
        ...}` is returned, and it is sent on reconnection."""
        return await self._report("work.progress", {"phase": phase, **progress})

    async def post(self, text: str, kind: str = "message") -> JsonObject:
        """Post to the WorkItem's Conversation (`conversation.post`): a `message`, or an
        `ambiguity` (which blocks acceptance until a revision clears it, §10.1). Offline
        (when enabled) it is buffered like a progress report."""
        return await self._report("conversation.post", {"kind": kind, "text": text})

    async def checkpoint(self, phase: str, state_artifact: str | None = None,
                         **progress: Any) -> JsonObject:
        """Checkpoint and release the lease (the item goes back to `queued`)."""
        body: JsonObject = {"progress": {"phase": phase, **progress}}
        if state_artifact:
            body["stateArtifact"] = state_artifact
        answer = await self._release("work.checkpoint", body)
        self.checkpointed = True
        return answer

    async def _release(self, type_: str, body: JsonObject) -> JsonObject:
        self._releasing = True
        try:
            return await self._report(type_, body)
        finally:
            self._releasing = False

    async def block(self, required_resolution: str, phase: str,
                    state_artifact: str | None = None, blocked_lease_seconds: int | None = None,
                    **progress: Any) -> JsonObject:
        """Block the item (`active` -> `blocked`) until a coordinator resolves
        `required_resolution` (work.unblock); carries a checkpoint like `checkpoint()`
        and releases the lease. Return from the handler after it."""
        checkpoint: JsonObject = {"progress": {"phase": phase, **progress}}
        if state_artifact:
            checkpoint["stateArtifact"] = state_artifact
        body: JsonObject = {"checkpoint": checkpoint, "requiredResolution": required_resolution}
        if blocked_lease_seconds:
            body["blockedLeaseSeconds"] = blocked_lease_seconds
        answer = await self._release("work.block", body)
        self.checkpointed = self.blocked = True
        return answer

    async def raise_if_preempted(self, phase: str, **progress: Any) -> None:
        """At a safe point: checkpoint and stop when a preemption was requested."""
        if self.preemption_requested:
            await self.checkpoint(phase, **progress)
            raise Preempted(self.work_item_id)

    # --- artifacts ----------------------------------------------------------------------

    async def publish_artifact(self, data: bytes, media_type: str, schema: str | None = None,
                               sources: Iterable[str] = (),
                               classification: str = "internal") -> str:
        """Upload the bytes (PUT /blobs, verified by name) and publish their signed
        manifest (`artifact.publish`, §13.1); returns the content hash. Raises
        OfflineError while the service cannot be reached (never published offline)."""
        await self._require_online("publishing an artifact")
        try:
            return await self._publish(data, media_type, schema, sources, classification)
        except offline_buffer.UNREACHABLE as error:
            if not self.worker.offline.enabled:
                raise
            self.worker.offline.went_offline(error)
            raise OfflineError(f"publishing an artifact: the Group service cannot be "
                               f"reached ({error!r})") from error

    async def _publish(self, data: bytes, media_type: str, schema: str | None,
                       sources: Iterable[str], classification: str) -> str:
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


def evidence_record(producer: str, work_item_id: str, criteria: Iterable[str], method: str,
                    result: str, artifacts: Iterable[str] = (),
                    subject: str | None = None) -> JsonObject:
    """One Evidence record (§13.2) by `producer`, about the WorkItem unless `subject` says
    which deliverable, stamped now."""
    return {"id": f"ev-{uuid.uuid4().hex[:16]}",
            "subject": subject or f"workItem:{work_item_id}",
            "criteria": list(criteria), "method": method, "result": result,
            "producer": producer, "timestamp": format_time(utcnow()),
            "artifacts": list(artifacts)}


def _capability_version(contract: JsonObject) -> str | None:
    capabilities = contract.get("capabilities") or []
    version: str | None = capabilities[0]["version"] if capabilities else None
    return version
