"""The Worker's session with the Group service (§1): opened at start, where it also
reads what the membership says of this agent (its Agent Card, its roles in each Group);
opened again after the service could not be reached; and kept visible with Presence.

Opening a session supersedes the agent's previous one, and the server revokes that
session's leases: at start those items are simply `queued` again; after a reconnection
offline_execution.py reconciles the buffer and starts the running items again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

import httpx

from . import offline_buffer
from .client import ApiError

if TYPE_CHECKING:
    from .worker import Worker

log = logging.getLogger("mission_weave.sdk.worker")

LONGEST_RECONNECT_DELAY = 5.0  # seconds: the backoff between reconnection attempts stops here


class Session:
    def __init__(self, worker: Worker, presence_seconds: float):
        self.worker, self.client = worker, worker.client
        self.presence_seconds = presence_seconds
        self.reconnect_seconds = 0.5  # the first wait before trying to reconnect
        self.roles: dict[str, frozenset[str]] = {}  # Group -> this agent's roles there
        self._reconnector: asyncio.Task[None] | None = None

    async def open(self) -> None:
        """A new session (it revokes our old leases: those items are queued), then this
        agent's membership of every Group: the Agent Card and the roles."""
        await self.client.open_session()
        for group_id in self.worker.groups:
            member = await self.client.membership(group_id)
            self.worker.card = member.get("agentCard") or {}
            self.roles[group_id] = frozenset(member.get("roles") or ())

    def roles_in(self, group_id: str) -> frozenset[str] | None:
        """This agent's roles in the Group as the client last read them (a refreshed
        membership may have changed them since start), else as read at start."""
        known = getattr(self.client, "known_membership", None)  # a test's stand-in may lack it
        member = known(group_id) if known else None
        if member is not None and member.get("roles") is not None:
            return frozenset(member["roles"])
        return self.roles.get(group_id)

    # --- reconnection (§11.5) ---------------------------------------------------------

    def start_reconnecting(self) -> None:
        """Try to reconnect in the background until it succeeds (offline.since is None)."""
        self._reconnector = asyncio.create_task(self._reconnect_loop())

    def background(self) -> list[asyncio.Task[None]]:
        """The reconnection's task, if one was started: the worker cancels it on stop."""
        return [self._reconnector] if self._reconnector is not None else []

    async def _reconnect_loop(self) -> None:
        offline = self.worker.offline
        delay = self.reconnect_seconds
        while offline.since is not None:
            await asyncio.sleep(delay)
            try:
                await self.reconnect()
            except offline_buffer.UNREACHABLE as error:
                log.info("still cannot reach the Group service: %r", error)
            except ApiError as error:
                log.warning("reconnecting: the server answered %s", error)
            delay = min(delay * 2, LONGEST_RECONNECT_DELAY)

    async def reconnect(self) -> None:
        """A new session (it revokes this agent's leases), then the reconciliation."""
        await self.client.open_session()
        await self.worker.offline.reconcile()

    # --- Presence ----------------------------------------------------------------------

    async def presence_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.report_presence()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.presence_seconds)

    async def report_presence(self, status: str | None = None) -> None:
        slots = self.worker.slots
        free = max(0, slots.capacity - slots.owned_count()) if slots.capacity else 0
        try:
            # Going offline is said once: the server may be the one shutting down.
            await self.client.presence(free, status or ("available" if free else "busy"),
                                       retry=status != "offline")
        except (ApiError, OSError, httpx.TransportError) as error:
            log.info("Presence report failed: %r", error)
