"""What the ledger's pipeline and the delivery consumer report (ledger ports.Observer),
turned into metrics and log lines."""

import asyncio
import logging
import time

from django.conf import settings

from apps.ledger import ports
from apps.ledger.pipeline import Answer
from mission_weave.protocol.errors import ProtocolError

from . import fastdb, metrics
from .logs import REQUEST_ID, printable

log = logging.getLogger("mw.command")  # the command lines (docs/operations.md, Logs)
trouble = logging.getLogger(__name__)

LAG_REFRESH_SECONDS = 5  # how often each process works out its connections' delivery lag
MAX_TEXT = 200  # longest id or type a log line repeats from a client


def outcome_code(outcome) -> str:
    """OK for an acceptance, DUPLICATE for a command id answered before, else the code."""
    if isinstance(outcome, Answer):
        if outcome.repeat:
            return "DUPLICATE"
        if outcome.status == 200:
            return "OK"
        return outcome.body["error"]["code"]
    if isinstance(outcome, ProtocolError):
        return outcome.code
    return "INTERNAL_ERROR"


def _text(value) -> str | None:
    return value[:MAX_TEXT] if isinstance(value, str) else None


class Observer(ports.Observer):
    def __init__(self):
        self.connections = Connections()

    def command(self, group_id, envelope, principal, started, outcome) -> None:
        try:
            milliseconds = (time.perf_counter() - started) * 1000
            code = outcome_code(outcome)
            metrics.COMMANDS.labels(metrics.command_type(envelope), code).inc()
            if settings.MW_REQUEST_LOG:
                fields = envelope if isinstance(envelope, dict) else {}
                type_ = _text(fields.get("type"))
                log.info("command %s %s", printable(type_ or "?"), code, extra={
                    "requestId": REQUEST_ID.get(), "groupId": _text(group_id),
                    "commandId": _text(fields.get("id")),
                    "commandType": type_,
                    "actor": getattr(principal, "id", None), "code": code,
                    "durationMs": round(milliseconds, 2)})
        except Exception:  # the command is answered; its account must not undo that
            trouble.exception("could not account for a command")

    def appended(self, seconds: float) -> None:
        metrics.APPEND_SECONDS.observe(seconds)

    def lock_waited(self, seconds: float) -> None:
        metrics.LOCK_WAIT_SECONDS.observe(seconds)

    def batched(self, size: int) -> None:
        metrics.GROUP_COMMIT_SIZE.observe(size)

    def connection_opened(self, connection) -> None:
        self.connections.opened(connection)

    def connection_closed(self, connection) -> None:
        self.connections.closed(connection)


class Connections:
    """This process's open WebSocket connections, and, every LAG_REFRESH_SECONDS while
    there are any, how far each subscription is behind its Group's head in PostgreSQL
    (a connection's `subscriptions`: Group id -> Subscription with `sent`)."""

    def __init__(self) -> None:
        self.open: set = set()
        self._task: asyncio.Task | None = None

    def opened(self, connection) -> None:
        self.open.add(connection)
        metrics.WEBSOCKET_CONNECTIONS.inc()
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._task = loop.create_task(self._refresh_while_open())

    def closed(self, connection) -> None:
        if connection in self.open:
            self.open.discard(connection)
            metrics.WEBSOCKET_CONNECTIONS.dec()

    async def _refresh_while_open(self) -> None:
        while True:
            await asyncio.sleep(LAG_REFRESH_SECONDS)
            try:
                await self.refresh()  # with none open: zeros
            except Exception:  # PostgreSQL unavailable: try again next time
                trouble.warning("could not work out the WebSocket delivery lag",
                                exc_info=True)
            if not self.open:  # checked after the last await: opened() cannot slip in
                return

    async def refresh(self) -> None:
        """Set the subscription and lag gauges from the open connections now."""
        sent = [(group_id, subscription.sent) for connection in list(self.open)
                for group_id, subscription in list(getattr(connection, "subscriptions",
                                                           {}).items())]
        heads = await asyncio.to_thread(fastdb.group_heads, {g for g, _ in sent}) \
            if sent else {}
        lags = [max(heads.get(group_id, last) - last, 0) for group_id, last in sent]
        metrics.WEBSOCKET_SUBSCRIPTIONS.set(len(sent))
        metrics.DELIVERY_LAG_MAX.set(max(lags, default=0))
        metrics.DELIVERY_LAG_TOTAL.set(sum(lags))
