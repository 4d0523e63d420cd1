"""Bounded offline execution (§11.5), the Agent's half: while the Group service cannot be
reached, a running handler's reports (`work.progress`, `work.checkpoint`, `work.block`,
`conversation.post`) are kept in a durable local buffer with the binding
(`urn:missionweaveprotocol:extension:bounded-offline-execution`, PROTOCOL.md), and on
reconnection they are *rebased* (the new session's `issuedAt`, `sessionEpoch`,
`membershipEpoch`, a fresh signature; the same command id; the binding unchanged) and sent
in `bufferedAt` order.

- `OfflineBuffer`: the buffer, a SQLite file beside the Cursor store (WAL,
  `synchronous=FULL`: a buffered command survives a crash of the worker);
- `binding(...)`: the binding, as PROTOCOL.md pins it;
- `rebase(client, entry, membership_epoch)`: the envelope sent on reconnection;
- `reconcile(client, buffer)`: send every buffered command, in order;
- `Usage`: the usage delta a handler reports with `ctx.charge(...)`, taken once by the
  command that carries it, so that each delta is charged once;
- `Meter`: the compute and wall-clock seconds one slot's handler used, measured, in
  whole seconds, its fractions carried to the next command;
- `OfflineError`: what a handler gets for an action that needs the service (submitting,
  publishing an artifact, starting work) while it is unreachable.

Nothing here talks to Django; worker.py wires it into the handler's context.
"""

from __future__ import annotations

import json
import logging
import time
import types
from collections.abc import Callable, Coroutine, Generator
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

from mission_weave.protocol.json_types import JsonObject
from mission_weave.protocol.timefmt import format_time, parse_time

from .client import ApiError
from .ids import uuid7
from .inbox import durable_sqlite

if TYPE_CHECKING:
    from .client import Client

T = TypeVar("T")

log = logging.getLogger("mission_weave.sdk.offline_buffer")

URN = "urn:missionweaveprotocol:extension:bounded-offline-execution"
# The server's MW_OFFLINE_GRACE_SECONDS default. The server does not advertise its grace
# period, so the SDK assumes this one; a smaller one is always safe (graceDeadline may be
# earlier than the server's, never later).
DEFAULT_GRACE_SECONDS = 300
BUFFERABLE = frozenset({"work.progress", "work.checkpoint", "work.block", "conversation.post"})
COUNTS = ("tokens", "toolCalls", "computeSeconds", "wallClockSeconds", "sideEffects")
# "The Group service cannot be reached": a transport failure, never an HTTP answer.
UNREACHABLE = (httpx.TransportError, OSError, TimeoutError)
# Refusals that are not remembered under the command id and say only that the envelope
# is not the current session's: rebase it again and resend.
REBASE_AGAIN = frozenset({"STALE_SESSION", "CLOCK_SKEW", "STALE_MEMBERSHIP"})


class OfflineError(Exception):
    """The Group service cannot be reached and this action may not be buffered: only
    reports of work under way are (§11.5); submitting, publishing an artifact or starting
    work waits for the reconnection."""


class Usage:
    """A usage delta accumulated by `ctx.charge(...)`; `take()` hands it to one command
    and starts again from zero, so that no delta is charged twice."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.money: tuple[Decimal, str] | None = None

    def add(self, tokens: int = 0, toolCalls: int = 0, sideEffects: int = 0,
            computeSeconds: int = 0, wallClockSeconds: int = 0,
            financial: JsonObject | None = None) -> None:
        for name, value in (("tokens", tokens), ("toolCalls", toolCalls),
                            ("sideEffects", sideEffects), ("computeSeconds", computeSeconds),
                            ("wallClockSeconds", wallClockSeconds)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, not {value!r}")
            if value:
                self.counts[name] = self.counts.get(name, 0) + value
        if financial:
            amount, currency = Decimal(str(financial["amount"])), financial["currency"]
            if amount < 0:
                raise ValueError("financial.amount must not be negative")
            if self.money and self.money[1] != currency:
                raise ValueError(f"cannot add {currency} to {self.money[1]}")
            self.money = ((self.money[0] if self.money else Decimal(0)) + amount, currency)

    def __bool__(self) -> bool:
        return bool(self.counts) or bool(self.money and self.money[0])

    def peek(self) -> JsonObject:
        delta: JsonObject = dict(self.counts)
        if self.money and self.money[0]:
            delta["financial"] = {"amount": str(self.money[0]), "currency": self.money[1]}
        return delta

    def take(self) -> JsonObject:
        delta = self.peek()
        self.counts, self.money = {}, None
        return delta


class Meter:
    """The seconds one slot's handler used, for its usage delta (§11.5): wall-clock from
    the start of the run, and compute as the CPU time of the event loop's thread while the
    handler's own coroutine ran (`run` steps it; work it hands to other threads or
    processes is not seen: charge that with `ctx.charge(computeSeconds=...)`). `take()`
    gives the whole seconds since the last take; the fractions wait for the next one, so
    the deltas of a run add up to its measured total, rounded down."""

    def __init__(self, wall: Callable[[], float] = time.monotonic,
                 cpu: Callable[[], float] = time.thread_time):
        self._wall, self._cpu = wall, cpu
        self.started = wall()
        self.cpu_seconds = 0.0
        self._taken = {"computeSeconds": 0, "wallClockSeconds": 0}

    def take(self) -> dict[str, int]:
        totals = {"computeSeconds": int(self.cpu_seconds),
                  "wallClockSeconds": int(self._wall() - self.started)}
        delta = {name: totals[name] - self._taken[name] for name in totals}
        self._taken = totals
        return {name: value for name, value in delta.items() if value > 0}

    @types.coroutine
    def run(self, coroutine: Coroutine[Any, Any, T]) -> Generator[Any, Any, T]:
        """Await `coroutine`, adding the CPU time of each of its steps to `cpu_seconds`.
        What it awaits (futures, cancellation) passes through unchanged."""
        send: Any = None
        error: BaseException | None = None
        while True:
            started = self._cpu()
            try:
                yielded = coroutine.throw(error) if error is not None else coroutine.send(send)
            except StopIteration as stop:
                value: T = stop.value  # what the coroutine returned
                return value
            finally:
                self.cpu_seconds += self._cpu() - started
            try:
                send, error = (yield yielded), None
            except BaseException as thrown:  # a cancellation, into the handler's await
                send, error = None, thrown


def binding(*, agent_id: str, group_id: str, work_item_id: str, session_epoch: int,
            ownership_epoch: int, lease_id: str, disconnected_at: datetime,
            buffered_at: datetime, grace_deadline: datetime, lease_expires_at: datetime,
            usage: JsonObject | None = None) -> JsonObject:
    """The binding of one buffered command: the historical values, never to change."""
    return {"critical": True, "agentId": agent_id, "groupId": group_id,
            "workItemId": work_item_id, "sessionEpoch": session_epoch,
            "ownershipEpoch": ownership_epoch, "leaseId": lease_id,
            "disconnectedAt": format_time(disconnected_at),
            "bufferedAt": format_time(buffered_at),
            "graceDeadline": format_time(grace_deadline),
            "leaseExpiresAt": format_time(lease_expires_at), "usage": dict(usage or {})}


def grace_deadline(lease_expires_at: datetime, grace_seconds: float) -> datetime:
    return lease_expires_at + timedelta(seconds=grace_seconds)


@dataclass
class Buffered:
    """One buffered command: its id (kept when it is rebased), type, body, the envelope's
    own fields (workItemId, ...) and the binding; `rebased` is the last envelope sent."""

    seq: int
    group_id: str
    work_item_id: str
    lease_id: str
    command_id: str
    type: str
    body: JsonObject
    fields: JsonObject
    binding: JsonObject
    rebased: JsonObject | None = None

    @property
    def buffered_at(self) -> datetime:
        return parse_time(self.binding["bufferedAt"])


class OfflineBuffer:
    """The durable buffer of commands per (Group, WorkItem, lease), in one SQLite file.
    Every write is committed with `synchronous=FULL` before the call returns."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.db = durable_sqlite(path)
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS buffered (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
            "group_id TEXT NOT NULL, work_item_id TEXT NOT NULL, lease_id TEXT NOT NULL, "
            "command_id TEXT NOT NULL UNIQUE, type TEXT NOT NULL, body TEXT NOT NULL, "
            "fields TEXT NOT NULL, binding TEXT NOT NULL, buffered_ts REAL NOT NULL, "
            "rebased TEXT)")

    @staticmethod
    def path_beside(cursor_path: str | Path) -> str:
        """Where a worker whose Cursors are in `cursor_path` keeps its buffer."""
        if str(cursor_path) == ":memory:":
            return ":memory:"
        path = Path(cursor_path)
        return str(path.with_name(path.stem + ".offline" + (path.suffix or ".sqlite3")))

    def add(self, group_id: str, type_: str, body: JsonObject, binding_: JsonObject,
            fields: JsonObject,
            command_id: str | None = None) -> Buffered:
        if type_ not in BUFFERABLE:
            raise OfflineError(f"{type_} cannot be buffered offline (only "
                               f"{', '.join(sorted(BUFFERABLE))})")
        command_id = command_id or uuid7()
        cursor = self.db.execute(
            "INSERT INTO buffered (group_id, work_item_id, lease_id, command_id, type, body, "
            "fields, binding, buffered_ts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (group_id, binding_["workItemId"], binding_["leaseId"], command_id, type_,
             json.dumps(body), json.dumps(fields), json.dumps(binding_),
             parse_time(binding_["bufferedAt"]).timestamp()))
        if cursor.lastrowid is None:  # sqlite3 sets it after every INSERT
            raise RuntimeError("the buffered row was given no sequence")
        return Buffered(cursor.lastrowid, group_id, binding_["workItemId"],
                        binding_["leaseId"], command_id, type_, body, fields, binding_)

    def pending(self, group_id: str | None = None, work_item_id: str | None = None
                ) -> list[Buffered]:
        """Buffered commands in `bufferedAt` order (then the order they were buffered)."""
        where: list[str] = []
        args: list[str] = []
        for column, value in (("group_id", group_id), ("work_item_id", work_item_id)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        rows = self.db.execute(
            "SELECT seq, group_id, work_item_id, lease_id, command_id, type, body, fields, "
            "binding, rebased FROM buffered" + (" WHERE " + " AND ".join(where) if where else "")
            + " ORDER BY buffered_ts, seq", args).fetchall()
        return [Buffered(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6]), json.loads(r[7]),
                         json.loads(r[8]), json.loads(r[9]) if r[9] else None) for r in rows]

    def last_buffered_at(self, lease_id: str) -> datetime | None:
        row = self.db.execute("SELECT binding FROM buffered WHERE lease_id = ? "
                              "ORDER BY buffered_ts DESC, seq DESC LIMIT 1",
                              (lease_id,)).fetchone()
        return parse_time(json.loads(row[0])["bufferedAt"]) if row else None

    def add_usage(self, group_id: str, work_item_id: str, lease_id: str,
                  delta: JsonObject) -> bool:
        """Add `delta` to the binding of the first command buffered under the lease that
        was never sent (a binding the server has seen cannot change); False if none."""
        row = self.db.execute(
            "SELECT seq, binding FROM buffered WHERE group_id = ? AND work_item_id = ? AND "
            "lease_id = ? AND rebased IS NULL ORDER BY buffered_ts, seq LIMIT 1",
            (group_id, work_item_id, lease_id)).fetchone()
        if row is None:
            return False
        binding_ = json.loads(row[1])
        usage = Usage()
        usage.add(**binding_["usage"])
        usage.add(**delta)
        binding_["usage"] = usage.peek()
        self.db.execute("UPDATE buffered SET binding = ? WHERE seq = ?",
                        (json.dumps(binding_), row[0]))
        return True

    def mark_rebased(self, entry: Buffered, envelope: JsonObject) -> None:
        """Kept before it is sent: after a crash the same envelope is resent (a duplicate
        if it was decided), not a new one (which would be IDEMPOTENCY_MISMATCH)."""
        self.db.execute("UPDATE buffered SET rebased = ? WHERE seq = ?",
                        (json.dumps(envelope), entry.seq))
        entry.rebased = envelope

    def remove(self, entry: Buffered) -> None:
        self.db.execute("DELETE FROM buffered WHERE seq = ?", (entry.seq,))

    def drop(self, group_id: str, work_item_id: str) -> int:
        """Forget every buffered command of one WorkItem (OWNER_CHANGED)."""
        return self.db.execute("DELETE FROM buffered WHERE group_id = ? AND work_item_id = ?",
                               (group_id, work_item_id)).rowcount

    def __len__(self) -> int:
        count: int = self.db.execute("SELECT count(*) FROM buffered").fetchone()[0]
        return count

    def close(self) -> None:
        self.db.close()


def rebase(client: Client, entry: Buffered, membership_epoch: int) -> JsonObject:
    """The envelope of `entry` under the client's current session: a new `issuedAt`,
    `sessionEpoch`, `membershipEpoch` and signature; the same id, body and binding."""
    return client.envelope(entry.group_id, entry.type, entry.body, membership_epoch,
                           id=entry.command_id, extensions={URN: entry.binding},
                           **entry.fields)


@dataclass
class Reconciled:
    """What the server answered one buffered command: its answer, or the refusal."""

    entry: Buffered
    answer: JsonObject | None = None
    error: ApiError | None = None
    dropped: int = 0  # further commands of the item dropped with it (OWNER_CHANGED)


async def reconcile(client: Client, buffer: OfflineBuffer, group_id: str | None = None
                    ) -> list[Reconciled]:
    """Send every buffered command (of `group_id`, or all), rebased, in `bufferedAt`
    order; each is removed from the buffer once the server decided it. A refusal is
    returned with its code; OWNER_CHANGED also drops the rest of that item's buffer.
    IDEMPOTENCY_MISMATCH means the command reached the server before the connection was
    lost (sent without the binding under the same id): it is applied already, once.
    A transport error propagates with the rest kept for the next reconnection."""
    results: list[Reconciled] = []
    dropped: set[tuple[str, str]] = set()
    for entry in buffer.pending(group_id):
        if (entry.group_id, entry.work_item_id) in dropped:
            continue
        # The envelope last sent, if any, goes again as it was: a duplicate if the server
        # decided it, else STALE_SESSION (not remembered), and then it is rebased anew.
        envelope = entry.rebased or await _rebased(client, buffer, entry)
        try:
            try:
                answer = await client.send(entry.group_id, envelope)
            except ApiError as error:
                if error.code not in REBASE_AGAIN:
                    raise
                refresh = error.code == "STALE_MEMBERSHIP"
                answer = await client.send(entry.group_id,
                                           await _rebased(client, buffer, entry, refresh))
        except ApiError as error:
            if error.status >= 500 or error.status == 429:
                raise  # not an answer: kept for the next attempt
            buffer.remove(entry)
            if error.code == "IDEMPOTENCY_MISMATCH":
                log.info("buffered %s %s had reached the server before it was buffered",
                         entry.type, entry.command_id)
                results.append(Reconciled(entry, answer={"events": [], "duplicate": True}))
                continue
            result = Reconciled(entry, error=error)
            if error.code == "OWNER_CHANGED":
                result.dropped = buffer.drop(entry.group_id, entry.work_item_id)
                dropped.add((entry.group_id, entry.work_item_id))
            log.warning("buffered %s for %s refused on reconciliation: %s %s%s", entry.type,
                        entry.work_item_id, error.code, error.message,
                        f" ({result.dropped} more dropped)" if result.dropped else "")
            results.append(result)
            continue
        buffer.remove(entry)
        results.append(Reconciled(entry, answer=answer))
    return results


async def _rebased(client: Client, buffer: OfflineBuffer, entry: Buffered,
                   refresh: bool = False) -> JsonObject:
    member = await client.membership(entry.group_id, refresh=refresh)
    envelope = rebase(client, entry, member["membershipEpoch"])
    buffer.mark_rebased(entry, envelope)
    return envelope
