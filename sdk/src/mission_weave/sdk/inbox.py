"""Per-Group inbox (PROTOCOL §4): every event of the Agent's Groups processed exactly
once after deduplication, in sequence order, across disconnects and restarts.

- `GroupStream` is the pure part: dedupe by Event ID (and by sequence), buffer events
  that arrive ahead of a gap, hand out the next one in order, check the hash chain.
- `CursorStore` is the durable Cursor, a SQLite file: the last processed sequence and
  that event's hash. It only ever moves one sequence at a time (never over a gap),
  except when a verified snapshot resets it or the inbox starts over (below).
- `Inbox` runs the transport: the WebSocket (`SUBSCRIBE` with `afterSequence` = the
  Cursor, `ACK` after the application processed the events), HTTP paging
  (`GET /events?after=`) for catch-up and gap filling, and CURSOR_TOO_OLD recovery
  from the authority-signed snapshot. Without a WebSocket endpoint it polls over HTTP.

A stored Cursor that no longer belongs to the Group's log (the server's database was
reset, or the file came from another server) is detected when the inbox starts and after
every outage: the Group's head is below the Cursor, or the event at the Cursor's
sequence has another hash than the one stored with it. The inbox then logs one warning,
forgets the Cursor, tells the application (`on_restart(group_id)`, to drop what it
folded from the old log) and replays the Group from sequence 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sqlite3
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import websockets
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from mission_weave.protocol import canonical
from mission_weave.protocol.json_types import JsonObject

from .client import ApiError, Client

if TYPE_CHECKING:
    from websockets.asyncio.client import ClientConnection

log = logging.getLogger("mission_weave.sdk.inbox")

EventHandler = Callable[[JsonObject], Awaitable[None]]
SnapshotHandler = Callable[[str, JsonObject], Awaitable[None]]
RestartHandler = Callable[[str], Awaitable[None]]


# At most one ACK frame per this many seconds (the server's MW_WS_FRAME_RATE is per
# connection; a burst of events must not spend it).
ACK_SECONDS = 0.1

class CursorGap(Exception):
    """An attempt to move a Cursor by more than one sequence."""


class IntegrityError(Exception):
    """An event or snapshot that does not verify; the inbox stops rather than guess."""


def event_hash_ok(event: JsonObject) -> bool:
    return canonical.content_hash(canonical.without(event, "hash")) == event.get("hash")


def durable_sqlite(path: str | Path) -> sqlite3.Connection:
    """A SQLite file whose every write is on disk when the call returns (WAL,
    synchronous=FULL, autocommit); its folder is made if needed."""
    if str(path) != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    return db


class CursorStore:
    """Durable Cursors, one row per Group, in a SQLite file (WAL, synchronous=FULL)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.db = durable_sqlite(path)
        self.db.execute("CREATE TABLE IF NOT EXISTS cursors (group_id TEXT PRIMARY KEY, "
                        "sequence INTEGER NOT NULL, hash TEXT)")
        columns = {row[1] for row in self.db.execute("PRAGMA table_info(cursors)")}
        if "hash" not in columns:  # a store written before the hash was kept
            self.db.execute("ALTER TABLE cursors ADD COLUMN hash TEXT")

    def get(self, group_id: str) -> tuple[int, str | None]:
        row = self.db.execute("SELECT sequence, hash FROM cursors WHERE group_id = ?",
                              (group_id,)).fetchone()
        return (row[0], row[1]) if row else (0, None)

    def advance(self, group_id: str, sequence: int, event_hash: str | None) -> None:
        current, _ = self.get(group_id)
        if sequence != current + 1:
            raise CursorGap(f"cursor of {group_id} is at {current}; refusing to move to "
                            f"{sequence}")
        self._write(group_id, sequence, event_hash)

    def reset(self, group_id: str, sequence: int, event_hash: str | None = None) -> None:
        """Only for a verified snapshot: the state at `sequence` replaces the history."""
        self._write(group_id, sequence, event_hash)

    def remember_hash(self, group_id: str, sequence: int, event_hash: str) -> None:
        """Fill in the hash of a Cursor stored without one (an older store)."""
        self.db.execute("UPDATE cursors SET hash = ? WHERE group_id = ? AND sequence = ? "
                        "AND hash IS NULL", (event_hash, group_id, sequence))

    def forget(self, group_id: str) -> None:
        """Back to sequence 0: the stored Cursor belongs to another log."""
        self.db.execute("DELETE FROM cursors WHERE group_id = ?", (group_id,))

    def _write(self, group_id: str, sequence: int, event_hash: str | None) -> None:
        self.db.execute("INSERT INTO cursors (group_id, sequence, hash) VALUES (?, ?, ?) "
                        "ON CONFLICT(group_id) DO UPDATE SET sequence = excluded.sequence, "
                        "hash = excluded.hash", (group_id, sequence, event_hash))

    def close(self) -> None:
        self.db.close()


class GroupStream:
    """One Group's ordering buffer. `done` is the last processed sequence."""

    SEEN_IDS = 10_000  # ids remembered for dedupe beyond the sequence check

    def __init__(self, group_id: str, done: int = 0, last_hash: str | None = None):
        self.group_id = group_id
        self.done = done
        self.last_hash = last_hash
        self.pending: dict[int, JsonObject] = {}
        self.seen: OrderedDict[str, None] = OrderedDict()
        self.duplicates = 0

    def add(self, event: JsonObject) -> bool:
        """Buffer an event; False for a duplicate (or one already processed)."""
        sequence = event["sequence"]
        if event["id"] in self.seen or sequence <= self.done or sequence in self.pending:
            self.duplicates += 1
            return False
        if not event_hash_ok(event):
            raise IntegrityError(f"event {event['id']} of {self.group_id} fails its hash")
        self.pending[sequence] = event
        self.seen[event["id"]] = None
        if len(self.seen) > self.SEEN_IDS:
            self.seen.popitem(last=False)
        return True

    def next_ready(self) -> JsonObject | None:
        event = self.pending.get(self.done + 1)
        if event is not None and self.last_hash is not None \
                and event["prevHash"] != self.last_hash:
            raise IntegrityError(f"event {event['sequence']} of {self.group_id} does not "
                                 f"chain to the previous one")
        return event

    def processed(self, event: JsonObject) -> None:
        assert event["sequence"] == self.done + 1, "processed out of order"
        del self.pending[event["sequence"]]
        self.done, self.last_hash = event["sequence"], event["hash"]

    @property
    def has_gap(self) -> bool:
        return bool(self.pending) and (self.done + 1) not in self.pending

    def reset(self, sequence: int, last_hash: str | None) -> None:
        self.done, self.last_hash = sequence, last_hash
        self.pending = {s: e for s, e in self.pending.items() if s > sequence}

    def restart(self) -> None:
        """Forget everything: the next event to process is sequence 1 of the log."""
        self.done, self.last_hash = 0, None
        self.pending.clear()
        self.seen.clear()


class Inbox:
    """Deliver the events of `groups` to `handle(event)`, one at a time per Group, in
    order. `on_snapshot(group_id, document)` receives a verified snapshot when the
    Cursor fell below the online log (CURSOR_TOO_OLD); the inbox resumes after it.
    `on_restart(group_id)` is called when the stored Cursor turned out not to belong to
    the Group's log: the application drops its state of that Group, and the inbox then
    hands it every event again from sequence 1."""

    def __init__(self, client: Client, groups: list[str], handle: EventHandler,
                 store: CursorStore, on_snapshot: SnapshotHandler | None = None, *,
                 on_restart: RestartHandler | None = None,
                 transport: str = "auto", poll_seconds: float = 1.0,
                 gap_seconds: float = 2.0, page: int = 1000):
        assert transport in ("auto", "ws", "http")
        self.client, self.handle, self.store = client, handle, store
        self.on_snapshot, self.on_restart = on_snapshot, on_restart
        self.transport, self.poll_seconds, self.gap_seconds = transport, poll_seconds, gap_seconds
        self.page = page
        self.streams = {g: GroupStream(g, *store.get(g)) for g in groups}
        self.connected = asyncio.Event()  # set while a WebSocket subscription is live
        self.caught_up = asyncio.Event()  # set after the first catch-up of every Group
        self._ws: ClientConnection | None = None
        self._unacked: set[str] = set()  # Groups processed since the last ACK frame
        self._acking: asyncio.Task[None] | None = None
        self.received = {"ws": 0, "http": 0}  # events taken in from each transport
        # Groups whose stored Cursor is checked against the log at the next catch-up: all
        # of them at start, and again after any outage (the server may have been reset).
        self.unchecked = set(groups)
        self.restarts = 0  # times a Group started over from sequence 0

    def cursor(self, group_id: str) -> int:
        return self.streams[group_id].done

    # --- the loop --------------------------------------------------------------------

    async def run(self, stop: asyncio.Event | None = None) -> None:
        stop = stop or asyncio.Event()
        for group_id in self.streams:
            await self.catch_up(group_id)
        self.caught_up.set()
        backoff = 0.2
        while not stop.is_set():
            if self.transport != "http":
                try:
                    await self._websocket(stop)
                    backoff = 0.2
                    continue
                except websockets.InvalidStatus as error:
                    status = error.response.status_code
                    if self.transport == "auto" and status == 404:
                        log.warning("no WebSocket endpoint (404): polling over HTTP")
                        self.transport = "http"
                        continue
                    log.warning("WebSocket refused: %s", status)
                except (TimeoutError, OSError, websockets.ConnectionClosed,
                        websockets.InvalidHandshake, httpx.TransportError, ApiError) as error:
                    log.info("WebSocket lost: %r; reconnecting", error)
                finally:
                    self.connected.clear()
                    self._ws = None
                    self.unchecked.update(self.streams)
                await _sleep_or_stop(stop, backoff)
                backoff = min(backoff * 2, 5.0)
                for group_id in self.streams:  # what was missed comes over HTTP first
                    await self._safe_catch_up(group_id)
            else:
                for group_id in self.streams:
                    await self._safe_catch_up(group_id)
                await _sleep_or_stop(stop, self.poll_seconds)

    async def _safe_catch_up(self, group_id: str) -> None:
        try:
            await self.catch_up(group_id)
        except (OSError, httpx.TransportError, ApiError) as error:  # down: try again later
            log.info("catch-up of %s failed: %r", group_id, error)
            self.unchecked.add(group_id)

    async def _websocket(self, stop: asyncio.Event) -> None:
        headers = self.client.auth_headers()
        async with websockets.connect(self.client.ws_url, additional_headers=headers,
                                      open_timeout=10, max_size=None) as ws:
            self._ws = ws
            for group_id, stream in self.streams.items():
                await self._subscribe(ws, group_id, stream.done)
            self.connected.set()
            log.info("subscribed over the WebSocket to %s", ", ".join(self.streams))
            while not stop.is_set():
                try:
                    text = await asyncio.wait_for(ws.recv(), timeout=self.gap_seconds)
                except TimeoutError:
                    await self._fill_gaps()
                    continue
                await self._frame(ws, json.loads(text))

    async def _subscribe(self, ws: ClientConnection, group_id: str, after: int) -> None:
        await ws.send(json.dumps({"op": "SUBSCRIBE", "groupId": group_id,
                                  "afterSequence": after}))

    async def _frame(self, ws: ClientConnection, frame: JsonObject) -> None:
        op = frame.get("op")
        if op == "EVENT":
            event = frame["event"]
            stream = self.streams.get(event.get("groupId"))
            if stream is None:
                return
            self.received["ws"] += stream.add(event)
            if await self._deliver(stream):
                await self._ack(stream)
        elif op == "ERROR":
            group_id = frame.get("groupId")
            if frame.get("code") == "CURSOR_TOO_OLD" and group_id in self.streams:
                await self._recover(group_id, frame.get("details") or {})
                await self._subscribe(ws, group_id, self.streams[group_id].done)
            else:
                log.warning("server ERROR frame: %s %s", frame.get("code"), frame.get("message"))

    async def _ack(self, stream: GroupStream) -> None:
        """ACK what was processed, coalesced: one frame per ACK_SECONDS at most, naming
        every Group that moved (the server limits a connection's frames per second)."""
        self._unacked.add(stream.group_id)
        if self._acking is None or self._acking.done():
            self._acking = asyncio.create_task(self._send_acks())

    async def _send_acks(self) -> None:
        await asyncio.sleep(ACK_SECONDS)
        ws, groups, self._unacked = self._ws, self._unacked, set()
        if ws is None or not groups:
            return  # the connection went: the next subscription says where we are
        with contextlib.suppress(websockets.ConnectionClosed):
            await ws.send(json.dumps({"op": "ACK", "cursors": [
                {"groupId": g, "sequence": self.streams[g].done} for g in sorted(groups)]}))

    async def _fill_gaps(self) -> None:
        for group_id, stream in self.streams.items():
            if stream.has_gap:
                log.info("gap after %s in %s: filling over HTTP", stream.done, group_id)
                await self.catch_up(group_id)

    # --- processing ------------------------------------------------------------------

    async def _deliver(self, stream: GroupStream) -> int:
        """Process every buffered event that is next in order; returns how many. The
        Cursor is written after the application handled the event."""
        count = 0
        while (event := stream.next_ready()) is not None:
            await self.handle(event)
            self.store.advance(stream.group_id, event["sequence"], event["hash"])
            stream.processed(event)
            count += 1
        return count

    async def catch_up(self, group_id: str) -> None:
        """Page over HTTP from the Cursor to the head (also fills gaps). First, when due,
        check that the stored Cursor belongs to the Group's log (`check_cursor`)."""
        if group_id in self.unchecked:
            await self.check_cursor(group_id)
            self.unchecked.discard(group_id)
        stream = self.streams[group_id]
        while True:
            try:
                answer = await self.client.events(group_id, stream.done, self.page)
            except ApiError as error:
                if error.code != "CURSOR_TOO_OLD":
                    raise
                await self._recover(group_id, error.details)
                continue
            if answer["headSequence"] < stream.done:  # found without asking: a reset log
                await self._start_over(group_id, answer["headSequence"],
                                       "the head is below the cursor")
                continue
            for event in answer["events"]:
                self.received["http"] += stream.add(event)
            delivered = await self._deliver(stream)
            if delivered:
                await self._ack(stream)
            if not answer["events"] or stream.done >= answer["headSequence"]:
                return
            if not delivered:
                raise IntegrityError(f"HTTP paging of {group_id} made no progress at "
                                     f"{stream.done}")

    # --- a stored Cursor from another log ----------------------------------------------

    async def check_cursor(self, group_id: str) -> None:
        """Start over from sequence 0 when the stored Cursor does not match the Group's
        log: the head is below it, or the event at its sequence has another hash than
        the one stored with it (a Cursor stored without a hash takes the server's)."""
        stream = self.streams[group_id]
        if stream.done == 0:
            return
        try:
            answer = await self.client.events(group_id, stream.done - 1, 1)
        except ApiError as error:
            if error.code != "CURSOR_TOO_OLD":
                raise
            # The event at the Cursor is archived; the snapshot at the online floor
            # still names its hash when the floor is the Cursor (else catch_up recovers).
            snapshot = (error.details or {}).get("snapshot") or {}
            if snapshot.get("sequence") == stream.done and stream.last_hash is not None \
                    and snapshot.get("hash") != stream.last_hash:
                await self._start_over(
                    group_id, f"at least {stream.done}",
                    f"the snapshot at sequence {stream.done} has hash "
                    f"{_short(snapshot.get('hash'))}, the cursor's is {_short(stream.last_hash)}")
            return
        head = answer["headSequence"]
        event = next((e for e in answer["events"] if e["sequence"] == stream.done), None)
        if head < stream.done:
            await self._start_over(group_id, head, "the head is below the cursor")
        elif event is None or not event_hash_ok(event):
            raise IntegrityError(f"{group_id}: the server did not return a valid event "
                                 f"{stream.done} (head {head})")
        elif stream.last_hash is None:
            stream.last_hash = event["hash"]
            self.store.remember_hash(group_id, stream.done, event["hash"])
        elif event["hash"] != stream.last_hash:
            await self._start_over(group_id, head, f"its event {stream.done} has hash "
                                   f"{_short(event['hash'])}, the cursor's is "
                                   f"{_short(stream.last_hash)}")

    async def _start_over(self, group_id: str, head: int | str, mismatch: str) -> None:
        """`head`: the server's head sequence, or what is known of it (for the log)."""
        stream = self.streams[group_id]
        log.warning("Group %s: the stored cursor (sequence %s, in %s) does not match the "
                    "server's log, whose head is %s: %s (was the server's database reset?); "
                    "starting over from the log at sequence 0", group_id, stream.done,
                    self.store.path, head, mismatch)
        self.store.forget(group_id)
        stream.restart()
        self.restarts += 1
        if self.on_restart is not None:
            await self.on_restart(group_id)

    # --- CURSOR_TOO_OLD ----------------------------------------------------------------

    async def _recover(self, group_id: str, details: JsonObject) -> None:
        reference = details.get("snapshot")
        if not isinstance(reference, dict):
            raise IntegrityError(f"CURSOR_TOO_OLD for {group_id} without a snapshot reference")
        document = await fetch_snapshot(self.client, reference)
        if self.on_snapshot is None:
            raise IntegrityError(f"{group_id}: the Cursor is below the online log and no "
                                 "snapshot handler is installed")
        await self.on_snapshot(group_id, document)
        self.store.reset(group_id, reference["sequence"], document["hash"])
        self.streams[group_id].reset(reference["sequence"], document["hash"])
        log.info("%s resumed from snapshot %s at %s", group_id, reference.get("id"),
                 reference["sequence"])


async def fetch_snapshot(client: Client, reference: JsonObject) -> JsonObject:
    """The snapshot document at `reference.url`, verified: its hash is the reference's
    and its signature is the Group Authority's (GET /api/v1/authority)."""
    document = await client.get(reference["url"])
    verify_snapshot(reference, document, await client.authority_keys())
    return document


def verify_snapshot(reference: JsonObject, document: JsonObject,
                    authority_keys: Mapping[str, Ed25519PublicKey]) -> None:
    """The document is signed by an authority key, and is the one the reference names:
    same id, Group, sequence and `hash` (the chain hash of the event at `sequence`, so
    the next event's prevHash must equal it; the inbox checks that as it resumes)."""
    key_id = canonical.signature_key_id(document)
    key = authority_keys.get(key_id) if key_id is not None else None
    if key is None or not canonical.verify(document, key):
        raise IntegrityError(f"snapshot {reference.get('id')} is not signed by the authority")
    for member in ("id", "groupId", "sequence", "hash"):
        if member in reference and document.get(member) != reference[member]:
            raise IntegrityError(f"snapshot {reference.get('id')}: its {member} is not the "
                                 "one CURSOR_TOO_OLD named")
    if reference.get("signature") not in (None, document["signature"]):
        raise IntegrityError(f"snapshot {reference.get('id')}: the reference's signature is "
                             "not the document's")


def _short(event_hash: str | None) -> str:
    return f"{event_hash[:19]}…" if event_hash else "none"


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)
