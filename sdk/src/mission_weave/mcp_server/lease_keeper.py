"""The Execution Leases (§11.3) this Agent holds while an LLM works: granted by
`work.start`, renewed in the background at a third of their life (the model thinks in
minutes and never renews by itself), and let go when the work is submitted, blocked,
failed or checkpointed. A refused renewal loses the lease: the refusal is kept, and the
next tool call on that WorkItem is answered with it instead of being sent."""

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime

import httpx

from mission_weave.protocol.json_types import JsonObject
from mission_weave.protocol.timefmt import format_time, parse_time
from mission_weave.sdk.client import ApiError, utcnow

from .answers import Refusal

log = logging.getLogger("mission_weave.mcp_server")

# Refusals that say the lease (or the ownership or session under it) is gone for good.
LEASE_GONE = frozenset({"STALE_LEASE", "LEASE_EXPIRED", "STALE_OWNERSHIP", "STALE_SESSION",
                        "OWNER_CHANGED"})
# The commands that end a lease when they succeed.
RELEASING = frozenset({"work.submit", "work.block", "work.fail", "work.checkpoint"})

NO_LEASE = ("This Agent holds no lease on it: work is reported, published and submitted "
            "under the lease start_work takes (accept_offer, then start_work).")

Send = Callable[..., Awaitable[JsonObject]]  # Agent.command(type_, body, **fields)


@dataclass
class HeldLease:
    work_item_id: str
    mission_id: str | None
    lease_id: str
    ownership_epoch: int
    expires_at: datetime
    contract: JsonObject
    contract_revision: int
    published: list[tuple[str, str | None]] = field(default_factory=list)  # (hash, deliverable)
    renewals: int = 0
    lost: ApiError | None = None  # the refusal that lost it
    releasing: bool = False  # a releasing command is on its way: refusals are not losses
    task: asyncio.Task[None] | None = None

    @property
    def fields(self) -> JsonObject:
        return {"workItemId": self.work_item_id, "ownershipEpoch": self.ownership_epoch,
                "leaseId": self.lease_id}

    def summary(self) -> JsonObject:
        return {"leaseId": self.lease_id, "expiresAt": format_time(self.expires_at),
                "renewals": self.renewals, "lost": self.lost is not None}


class LeaseKeeper:
    def __init__(self, send: Send, lease_seconds: int | None):
        self.send = send
        self.lease_seconds = lease_seconds  # None: the server's default
        self.held: dict[str, HeldLease] = {}

    def body(self) -> JsonObject:
        return {"leaseSeconds": self.lease_seconds} if self.lease_seconds else {}

    def hold(self, lease: HeldLease) -> None:
        """Keep `lease` (just granted) alive until released or lost."""
        self.stop(lease.work_item_id)
        self.held[lease.work_item_id] = lease
        lease.task = asyncio.create_task(self._keep(lease), name=f"lease {lease.work_item_id}")

    def current(self, work_item_id: str) -> HeldLease | None:
        """The lease held on the item (None if none); a refusal if it was lost."""
        lease = self.held.get(work_item_id)
        if lease is not None and lease.lost is not None:
            raise Refusal(lease.lost.code, f"the lease {lease.lease_id} on {work_item_id} was "
                          f"lost: {lease.lost.message}",
                          "The WorkItem is no longer yours to work on: stop, and see "
                          "list_my_work and list_offers for what is.")
        return lease

    async def command(self, work_item_id: str, type_: str, body: JsonObject) -> JsonObject:
        """Send a lease holder's command under the item's lease; a refusal that says the
        lease is gone loses it, and a releasing command that succeeds lets it go.
        Without a lease the command goes without one, for the server to decide."""
        lease = self.current(work_item_id)
        if lease is None:
            try:
                return await self.send(type_, body, workItemId=work_item_id)
            except ApiError as error:
                raise Refusal(error.code, error.message, NO_LEASE) from error
        lease.releasing = type_ in RELEASING
        try:
            answer = await self.send(type_, body, **lease.fields)
        except ApiError as error:
            lease.releasing = False
            if error.code in LEASE_GONE:
                self._lose(lease, error)
            raise
        if lease.releasing:
            self.stop(work_item_id)
        return answer

    def stop(self, work_item_id: str) -> None:
        lease = self.held.pop(work_item_id, None)
        if lease is not None and lease.task is not None:
            lease.task.cancel()

    async def close(self) -> None:
        tasks = [lease.task for lease in self.held.values() if lease.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _lose(self, lease: HeldLease, error: ApiError) -> None:
        if lease.lost is None:
            lease.lost = error
            log.warning("lease %s on %s lost: %s %s", lease.lease_id, lease.work_item_id,
                        error.code, error.message)
        if lease.task is not None and lease.task is not asyncio.current_task():
            lease.task.cancel()

    async def _keep(self, lease: HeldLease) -> None:
        while True:
            remaining = (lease.expires_at - utcnow()).total_seconds()
            await asyncio.sleep(max(0.5, remaining / 3))
            try:
                answer = await self.send("lease.renew", self.body(), **lease.fields)
            except ApiError as error:
                if error.status >= 500 or error.status == 429:
                    failure: Exception = error
                elif lease.releasing:
                    return  # the release won the race: nothing was lost
                else:
                    self._lose(lease, error)
                    return
            except (httpx.TransportError, OSError) as error:
                failure = error
            else:
                lease.expires_at = parse_time(answer["events"][0]["data"]["expiresAt"])
                lease.renewals += 1
                continue
            if utcnow() >= lease.expires_at:
                self._lose(lease, ApiError(409, "LEASE_EXPIRED", f"no renewal reached the "
                                           f"server before the lease expired: {failure!r}"))
                return
            log.warning("renewing the lease on %s failed (%r); trying again",
                        lease.work_item_id, failure)
