"""One process's fan-out: which local connections subscribe to which Group, and the
one Redis subscription that feeds them.

A commit costs one PUBLISH (apps/ledger/publish.py). Each web process holds a single
pattern subscription to `mw:events:*` and `mw:members:*`; a message for a Group with no
local subscriber is dropped unread, otherwise it is parsed and framed once and handed
to every local connection's queue. Without Redis (embedded, one process) publish.py
calls `events` here directly. Redis is a hint: a connection that sees a gap fills it
from PostgreSQL, and after a lost Redis connection every subscription catches up.
"""

import asyncio
import json
import logging
import os
from collections import defaultdict

from mission_weave.runtime import redis_connections

log = logging.getLogger(__name__)

EVENTS, MEMBERS = "mw:events:", "mw:members:"
READY_TIMEOUT = 5  # seconds a SUBSCRIBE waits for the Redis subscription


def event_frame(document: dict) -> str:
    return json.dumps({"op": "EVENT", "event": document}, separators=(",", ":"))


class Hub:
    def __init__(self) -> None:
        self.local: dict[str, set] = defaultdict(set)  # group id -> connections
        self._listener: asyncio.Task | None = None
        self._ready: asyncio.Event | None = None

    async def add(self, group_id: str, connection) -> None:
        """From now on `connection.push(...)` gets this Group's events; returns once the
        Redis subscription is live, so a replay that follows cannot miss a commit."""
        self.local[group_id].add(connection)
        if redis_connections.configured():
            ready = self._ensure_listener()
            try:
                await asyncio.wait_for(ready.wait(), READY_TIMEOUT)
            except TimeoutError:
                # Redis is down: the replay still comes from the log, and the listener
                # catches every subscription up once it is back.
                log.warning("no Redis subscription yet; live events follow on reconnect")

    def remove(self, group_id: str, connection) -> None:
        connections = self.local.get(group_id)
        if connections is not None:
            connections.discard(connection)
            if not connections:
                del self.local[group_id]

    def events(self, group_id: str, documents: list) -> None:
        connections = self.local.get(group_id)
        if not connections:
            return
        frames = [event_frame(document) for document in documents]
        for connection in list(connections):
            connection.push(group_id, documents, frames)

    def membership_changed(self, group_id: str, principal: str) -> None:
        for connection in list(self.local.get(group_id, ())):
            if connection.principal_id == principal:
                connection.recheck(group_id)

    def _catch_up_all(self) -> None:
        for group_id, connections in list(self.local.items()):
            for connection in list(connections):
                connection.catch_up(group_id)

    def _ensure_listener(self) -> asyncio.Event:
        """The listener running on this loop, started unless it is; answers the Event it
        sets once its Redis subscription is live."""
        loop = asyncio.get_running_loop()
        if self._ready is not None and self._listener is not None \
                and not self._listener.done() and self._listener.get_loop() is loop:
            return self._ready
        self._ready = asyncio.Event()
        self._listener = loop.create_task(self._listen(self._ready))
        return self._ready

    async def _listen(self, ready: asyncio.Event) -> None:
        while True:
            # Named, so that an operator (or a test) can find this process's subscription.
            # A new client each time: through Sentinel, it asks where the primary is now.
            client = redis_connections.async_client(client_name=f"mw-hub-{os.getpid()}")
            try:
                pubsub = client.pubsub()
                await pubsub.psubscribe(EVENTS + "*", MEMBERS + "*")
                # psubscribe returns before Redis confirms: wait for both confirmations.
                confirmed = 0
                while confirmed < 2:
                    message = await pubsub.get_message(timeout=5)
                    if message is None:
                        raise ConnectionError("Redis did not confirm the subscription")
                    confirmed += message["type"] == "psubscribe"
                # Pushes may have been lost while there was no subscription (harmless
                # at the first start: a catch-up sends only what was not sent).
                self._catch_up_all()
                ready.set()
                async for message in pubsub.listen():
                    if message["type"] == "pmessage":
                        self._dispatch(message["channel"], message["data"])
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("the Redis subscription failed; reconnecting", exc_info=True)
                await asyncio.sleep(0.5)
            finally:
                await client.aclose()

    def _dispatch(self, channel: bytes, data: bytes) -> None:
        name = channel.decode()
        try:
            if name.startswith(EVENTS):
                group_id = name[len(EVENTS):]
                if group_id in self.local:
                    self.events(group_id, json.loads(data)["events"])
            elif name.startswith(MEMBERS):
                self.membership_changed(name[len(MEMBERS):], data.decode())
        except Exception:
            log.warning("a pushed message could not be delivered", exc_info=True)


HUB = Hub()
