"""Execution Leases (§11.3) of the items the Worker runs: granted by `work.start`,
renewed at a third of their remaining time while the handler runs, and lost when a
renewal is refused, when none reaches the server before the lease expires, or when the
Group's log says the lease was revoked or expired or the item cancelled. A lost lease
cancels the handler's task (ctx._lose_lease) and nothing is submitted for it: the item
is no longer this worker's. A coordinator's preemption request reaches the handler as
`ctx.preemption`. After a reconnection (§11.5) each running item is started again under
a new lease, so its handler may go on.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import httpx

from mission_weave.protocol.json_types import JsonObject
from mission_weave.protocol.timefmt import format_time, parse_time

from .client import ApiError, utcnow

if TYPE_CHECKING:
    from .handler_context import WorkContext
    from .worker import Worker

log = logging.getLogger("mission_weave.sdk.worker")

# Refusals that say the lease (or the ownership, or the session) is no longer this
# worker's: it can neither submit nor fail the item any more.
LEASE_GONE = frozenset({"STALE_LEASE", "LEASE_EXPIRED", "STALE_OWNERSHIP", "OWNER_CHANGED",
                        "STALE_SESSION"})
# Events of the Group's log that end a lease while its handler may still be running.
LEASE_CLOSED = ("lease.revoked", "lease.expired", "work.cancelled")


@dataclass(frozen=True)
class Grant:
    """A lease as `work.start` granted it."""

    lease_id: str
    capability_token: JsonObject
    expires_at: datetime

    @property
    def credential(self) -> str | None:
        """The capability token's id, which the slot's assignment is bound to."""
        credential: str | None = self.capability_token.get("id")
        return credential


class Leases:
    def __init__(self, worker: Worker, lease_seconds: int | None):
        self.worker = worker
        self.lease_seconds = lease_seconds  # None: the server's default

    def _body(self) -> JsonObject:
        return {"leaseSeconds": self.lease_seconds} if self.lease_seconds else {}

    async def start(self, group_id: str, item_id: str, ownership_epoch: int) -> Grant:
        """`work.start` (ApiError when refused): the lease it grants."""
        answer = await self.worker.client.command(group_id, "work.start", self._body(),
                                                  workItemId=item_id,
                                                  ownershipEpoch=ownership_epoch)
        started = next(e for e in answer["events"] if e["type"] == "work.started")["data"]
        return Grant(started["leaseId"], started.get("capabilityToken") or {},
                     parse_time(started["expiresAt"]))

    async def keep(self, ctx: WorkContext) -> None:
        """Renew at a third of the lease's remaining time while the handler runs. A
        refused renewal, or none that reaches the server before the lease expires, loses
        the lease: the handler is cancelled (ctx._lose_lease)."""
        offline = self.worker.offline
        while ctx.lease_lost is None and not ctx.checkpointed:
            if offline.since is not None:  # §11.5: until reconciled or the deadline
                if not await offline.until_reconciled(ctx):
                    return
                continue
            remaining = (ctx._expires() - utcnow()).total_seconds()
            await asyncio.sleep(max(0.5, remaining / 3) if remaining > 0 else 0)
            if ctx.checkpointed:
                return  # the handler released the lease
            remaining = (ctx._expires() - utcnow()).total_seconds()
            failure: Exception
            try:
                # No answer past the lease's expiry is as good as none.
                answer = await asyncio.wait_for(
                    self.worker.client.command(ctx.group_id, "lease.renew", self._body(),
                                               **ctx._lease_fields()),
                    timeout=max(remaining, 0.5))
            except ApiError as error:
                if error.status < 500 and error.status != 429:
                    ctx._lose_lease(f"the server refused lease.renew: {error.code} "
                                    f"{error.message}")
                    return
                failure = error
            except (TimeoutError, httpx.TransportError, OSError) as error:
                failure = error
                if offline.enabled:
                    offline.went_offline(error)
                    continue
            else:
                renewed = answer["events"][0]["data"]
                ctx.lease_expires_at = parse_time(renewed["expiresAt"])
                ctx.capability_token = renewed.get("capabilityToken") or ctx.capability_token
                continue
            if utcnow() >= ctx._expires():
                ctx._lose_lease(f"lease.renew did not reach the server before the lease "
                                f"expired at {format_time(ctx._expires())}: {failure!r}")
                return
            log.warning("renewing %s failed (%r); trying again before the lease expires at %s",
                        ctx.work_item_id, failure, format_time(ctx._expires()))

    def on_event(self, event: JsonObject) -> None:
        """What the Group's log says of the leases held: a preemption request for one
        (the handler sees ctx.preemption), or one closed (its handler is cancelled)."""
        running = self.worker.slots.running
        if event["type"] == "work.preemption_requested":
            for (_, item_id), (_, ctx) in running.items():
                if ctx is not None and ctx.lease_id == event["data"].get("leaseId"):
                    log.info("preemption requested for %s", item_id)
                    ctx.preemption.set()
        elif event["type"] in LEASE_CLOSED and self.worker.offline.since is None:
            # Offline, the reconnection decides: it starts the item again or learns it lost.
            for key, (_, ctx) in list(running.items()):
                if ctx is not None and ctx.lease_id == event["data"].get("leaseId", ctx.lease_id) \
                        and key == (event["groupId"], event.get("workItemId")):
                    ctx._lose_lease(f"{event['type']} in the log"
                                    + (f" ({event['data']['reason']})"
                                       if event["data"].get("reason") else ""))

    async def resume(self, ctx: WorkContext) -> None:
        """The reconnection revoked ctx's lease: start the item again (same ownership
        epoch, `resumed: true`) so that its handler may go on and submit."""
        if ctx.lease_lost is not None or ctx.checkpointed or ctx.submitted:
            return
        try:
            grant = await self.start(ctx.group_id, ctx.work_item_id, ctx.ownership_epoch)
        except ApiError as error:
            if error.status >= 500 or error.status == 429:
                raise
            ctx._lose_lease(f"starting it again after the reconnection was refused: "
                            f"{error.code} {error.message}", force=True)
            return
        ctx.lease_id, ctx.capability_token = grant.lease_id, grant.capability_token
        ctx.lease_expires_at = grant.expires_at
        ctx.session_epoch = self.worker.client.session_epoch
        self.worker.slots.leased(ctx.assignment, grant.lease_id, grant.credential)
        log.info("started %s again under lease %s after the reconnection", ctx.work_item_id,
                 ctx.lease_id)
