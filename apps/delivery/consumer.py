"""The WebSocket endpoint `/ws/v1/` (PROTOCOL §4): SUBSCRIBE, EVENT, ACK, COMMAND,
RESULT, ERROR as text JSON frames.

Authenticated like HTTP, at the handshake: `Authorization: Bearer <token>` or the
Django session of a logged-in human; without valid credentials the handshake is
refused (HTTP 403). Each client frame re-authenticates the bearer token (a superseded
session closes the connection with 4401).

Every Group a connection subscribes to is delivered by one task per connection, in
sequence order: replay from PostgreSQL, then pushed events (apps/delivery/hub.py). The
replay forwards EVENT frames as PostgreSQL writes them (apps/ledger/feed.py), a page
at a time, reading the next page while it sends this one. A pushed event at or below
what was sent is dropped; one ahead of it is preceded by the gap, read from
PostgreSQL. Membership is re-checked before delivering when the last check is older
than MW_WS_MEMBERSHIP_TTL_SECONDS, and at once when the membership changes (a notice
from apps/delivery/signals.py).
"""

import asyncio
import json
import logging
import time
import uuid
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.db import connection
from django.utils import timezone

from apps.identity import principals
from apps.identity.principals import Principal
from apps.ledger import envelope as envelopes
from apps.ledger import feed, pipeline, ports
from mission_weave.protocol.canonical import domain_problem, loads_in_domain
from mission_weave.protocol.errors import ProtocolError
from mission_weave.runtime import rate_limits

from . import cursors
from .hub import HUB

log = logging.getLogger(__name__)

UNAUTHENTICATED_CLOSE = 4401
POLICY_VIOLATION_CLOSE = 1008  # a client that keeps flooding frames past its limit
MAX_QUEUED = 10_000  # pushes queued per connection before it falls back to the log
REPLAY_PAGE = 5000  # events per read while replaying or filling a gap (~4 MB of frames)


def in_thread(function):
    """Database work off the event loop, on a pool thread, so that connections work
    concurrently. The database connection goes back to the pool after each call."""
    def call(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        finally:
            connection.close()
    return sync_to_async(call, thread_sensitive=False)


@dataclass
class Subscription:
    sent: int  # the highest sequence sent on this connection
    checked_at: float  # when membership was last confirmed (monotonic seconds)


def error_frame(code: str, message: str, details: dict | None = None, **ids) -> str:
    frame = {"op": "ERROR", "code": code, **{k: v for k, v in ids.items() if v is not None},
             "message": message, "details": details or {}}
    return json.dumps(frame, separators=(",", ":"))


class DeliveryConsumer(AsyncWebsocketConsumer):
    # No channel layer: pushes come from this process's hub (apps/delivery/hub.py), so a
    # Redis restart must not close the socket (Channels ends a consumer whose layer fails).
    channel_layer_alias = None
    principal: Principal | None = None
    token: str | None = None

    # -- connection ---------------------------------------------------------------

    async def connect(self) -> None:
        self.subscriptions: dict[str, Subscription] = {}
        self.in_hub: set = set()  # Groups the hub pushes to us (a superset of the above)
        self.queue: asyncio.Queue = asyncio.Queue()
        self.overflowed: set = set()
        self.subscribed: set = set()  # Groups asked for and not ended (MW_WS_MAX_SUBSCRIPTIONS)
        self.frames_key = uuid.uuid4().hex  # this connection's frame count (MW_WS_FRAME_RATE)
        try:
            self.principal = await self._authenticate()
        except ProtocolError:
            self.principal = None
        if self.principal is None:
            await self.close(code=UNAUTHENTICATED_CLOSE)  # before accept: HTTP 403
            return
        self.principal_id = self.principal.id
        self.pump = asyncio.get_running_loop().create_task(self._pump())
        await self.accept()
        ports.plugged.observer.connection_opened(self)  # metrics: connections, delivery lag

    async def _authenticate(self) -> Principal | None:
        headers = dict(self.scope.get("headers", ()))
        authorization = headers.get(b"authorization", b"").decode("latin1")
        if authorization.startswith("Bearer "):
            self.token = authorization[len("Bearer "):].strip()
            return await in_thread(principals.authenticate_bearer)(self.token, timezone.now())
        user = self.scope.get("user")
        if user is not None and user.is_authenticated:
            return Principal(f"user:{user.get_username()}")
        return None

    async def disconnect(self, code):
        ports.plugged.observer.connection_closed(self)
        for group_id in getattr(self, "in_hub", ()):
            HUB.remove(group_id, self)
        pump = getattr(self, "pump", None)
        if pump is not None:
            pump.cancel()

    # -- client frames ------------------------------------------------------------

    async def receive(self, text_data=None, bytes_data=None):
        if not await self._within_frame_rate():
            return
        frame = {}
        try:
            frame = self._parse(text_data)
            if self.token is not None:  # the session may have been superseded since
                try:
                    await in_thread(principals.authenticate_bearer)(self.token, timezone.now())
                except ProtocolError as error:
                    await self.send(text_data=error_frame(error.code, error.message,
                                                          error.details))
                    await self.close(code=UNAUTHENTICATED_CLOSE)
                    return
            op = frame["op"]
            if op == "SUBSCRIBE":
                await self._subscribe(frame)
            elif op == "ACK":
                await in_thread(cursors.acknowledge)(self.principal,
                                                     cursors.parse(frame.get("cursors")))
            elif op == "COMMAND":
                await self._command(frame)
            else:
                raise ProtocolError("VALIDATION_ERROR", f"unknown op {op!r}: expected "
                                    "SUBSCRIBE, ACK or COMMAND")
        except ProtocolError as error:
            await self.send(text_data=error_frame(error.code, error.message, error.details,
                                                  groupId=self._group_of(frame)))
        except Exception:
            log.exception("a WebSocket frame failed")
            await self.send(text_data=error_frame("INTERNAL_ERROR", "the server failed to "
                                                  "handle this frame"))

    async def _within_frame_rate(self) -> bool:
        """Counted before the frame is parsed or the token re-checked, so a flood is cheap:
        over the rate an ERROR, and a client that keeps on at twice it is disconnected."""
        try:
            rate_limits.check_frame(self.frames_key)
            return True
        except ProtocolError as error:
            if rate_limits.refused_too_often(self.frames_key):
                await self.close(code=POLICY_VIOLATION_CLOSE)
            else:
                await self.send(text_data=error_frame(error.code, error.message, error.details))
            return False

    @staticmethod
    def _parse(text_data) -> dict:
        if text_data is None:
            raise ProtocolError("VALIDATION_ERROR", "frames are text JSON, not binary")
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE  # the HTTP body limit, MW_MAX_BODY_BYTES
        if len(text_data) > limit or (len(text_data) > limit // 4
                                      and len(text_data.encode()) > limit):
            raise ProtocolError("PAYLOAD_TOO_LARGE", f"a frame may carry at most {limit} bytes")
        # orjson where it gives what json.loads gives, walked only where its bytes do not
        # prove it within the domain (canonical.loads_in_domain): the same refusals.
        parsed = loads_in_domain(text_data, settings.MW_MAX_JSON_DEPTH)
        if parsed is None:
            frame, proven = _loads_frame(text_data), False
        else:
            frame, proven = parsed
        if not isinstance(frame, dict) or not isinstance(frame.get("op"), str):
            raise ProtocolError("VALIDATION_ERROR", "a frame is a JSON object with an op")
        problem = None if proven else domain_problem(frame, settings.MW_MAX_JSON_DEPTH)
        if problem is not None:
            raise ProtocolError("VALIDATION_ERROR", f"the frame at {problem[0]}: {problem[1]}",
                                {"path": problem[0]})
        return frame

    @staticmethod
    def _group_of(frame: dict):
        if frame.get("op") == "SUBSCRIBE" and isinstance(frame.get("groupId"), str):
            return frame["groupId"]
        return None

    async def _subscribe(self, frame: dict) -> None:
        group_id, after = frame.get("groupId"), frame.get("afterSequence", 0)
        if not cursors.is_group_id(group_id):
            raise ProtocolError("VALIDATION_ERROR", "groupId must be a Group id")
        if not cursors.is_sequence(after):
            raise ProtocolError("VALIDATION_ERROR",
                                "afterSequence must be a non-negative integer")
        most = settings.MW_WS_MAX_SUBSCRIPTIONS
        if group_id not in self.subscribed and len(self.subscribed) >= most:
            raise ProtocolError("PAYLOAD_TOO_LARGE", f"a connection may subscribe to at most "
                                f"{most} Groups; open another connection",
                                {"maxSubscriptions": most})
        await in_thread(principals.membership)(group_id, self.principal)
        self.subscribed.add(group_id)
        self.queue.put_nowait(("subscribe", group_id, after))

    async def _command(self, frame: dict) -> None:
        command = frame.get("command")
        command_id = command.get("id") if isinstance(command, dict) else None
        command_id = command_id if isinstance(command_id, str) else None
        try:
            if not isinstance(command, dict):
                raise ProtocolError("VALIDATION_ERROR", "command must be a signed envelope")
            group_id = command.get("groupId")
            if not isinstance(group_id, str) or not group_id:
                raise ProtocolError("VALIDATION_ERROR", "command.groupId must be a Group id")
            answer = await in_thread(self._submit)(group_id, command)
        except ProtocolError as error:
            await self.send(text_data=error_frame(error.code, error.message, error.details,
                                                  commandId=command_id))
            return
        if answer.status == 200:
            await self.send(text_data=json.dumps({"op": "RESULT", **answer.body},
                                                 separators=(",", ":")))
        else:  # a remembered rejection: the HTTP error envelope as an ERROR frame
            refused = answer.body["error"]
            await self.send(text_data=error_frame(refused["code"], refused["message"],
                                                  refused["details"], commandId=command_id))

    def _submit(self, group_id: str, command: dict):
        # The same limits as POST .../commands: this address and this principal.
        principal = self.principal
        if principal is None:  # not reached: connect() closes an unauthenticated socket
            raise ProtocolError("UNAUTHENTICATED", "this connection has not authenticated")
        client = self.scope.get("client") or ("unknown",)
        rate_limits.check("commands", ip=client[0], principal=principal.id)
        # Its frame was found within the domain (_parse), one level up: not walked again.
        with envelopes.domain_checked(command, settings.MW_MAX_JSON_DEPTH - 1):
            return pipeline.submit(group_id, command, principal)

    # -- delivery (the hub calls these on this loop) ---------------------------------

    def push(self, group_id: str, documents: list, frames: list) -> None:
        if group_id in self.overflowed:
            return
        if self.queue.qsize() >= MAX_QUEUED:  # a slow reader: read the log later instead
            self.overflowed.add(group_id)
            self.queue.put_nowait(("catch_up", group_id, None))
            return
        self.queue.put_nowait(("push", group_id, (documents, frames)))

    def recheck(self, group_id: str) -> None:
        self.queue.put_nowait(("recheck", group_id, None))

    def catch_up(self, group_id: str) -> None:
        self.queue.put_nowait(("catch_up", group_id, None))

    async def _pump(self) -> None:
        ttl = settings.MW_WS_MEMBERSHIP_TTL_SECONDS  # read once: this loop runs per event
        while True:
            kind, group_id, payload = await self.queue.get()
            try:
                if kind == "subscribe":
                    # Registered before the replay reads, so no commit falls between.
                    self.in_hub.add(group_id)
                    await HUB.add(group_id, self)
                    self.subscriptions[group_id] = Subscription(payload, time.monotonic())
                    await self._fill(group_id, None)
                    continue
                subscription = self.subscriptions.get(group_id)
                if subscription is None:
                    continue
                due = kind == "recheck" or time.monotonic() - subscription.checked_at > ttl
                if due and not await self._still_member(group_id, subscription):
                    continue
                if kind == "push":
                    await self._deliver(group_id, subscription, *payload)
                elif kind == "catch_up":
                    self.overflowed.discard(group_id)
                    await self._fill(group_id, None)
            except ProtocolError as error:  # e.g. CURSOR_TOO_OLD: the subscription ends
                self._end(group_id)
                await self.send(text_data=error_frame(error.code, error.message,
                                                      error.details, groupId=group_id))
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("delivering events failed; the subscription ends")
                self._end(group_id)
                await self.send(text_data=error_frame(
                    "INTERNAL_ERROR", "delivery failed; subscribe again with afterSequence",
                    groupId=group_id))

    async def _still_member(self, group_id: str, subscription: Subscription) -> bool:
        try:
            await in_thread(principals.membership)(group_id, self.principal)
        except ProtocolError as error:
            self._end(group_id)
            await self.send(text_data=error_frame(error.code, error.message, error.details,
                                                  groupId=group_id))
            return False
        subscription.checked_at = time.monotonic()
        return True

    def _end(self, group_id: str) -> None:
        self.subscribed.discard(group_id)
        self.subscriptions.pop(group_id, None)
        self.in_hub.discard(group_id)
        HUB.remove(group_id, self)

    async def _deliver(self, group_id: str, subscription: Subscription, documents: list,
                       frames: list) -> None:
        for document, frame in zip(documents, frames):
            sequence = document["sequence"]
            if sequence <= subscription.sent:
                continue  # already sent (by the replay or a gap fill)
            if sequence > subscription.sent + 1:
                await self._fill(group_id, sequence - 1)  # Redis is a hint; the log rules
            await self.send(text_data=frame)
            subscription.sent = sequence

    async def _fill(self, group_id: str, up_to: int | None) -> None:
        """Send the log from what was sent up to `up_to` (or the head), page by page;
        the next page is read while this one is sent."""
        subscription = self.subscriptions.get(group_id)
        if subscription is None:
            return
        read = in_thread(feed.event_frames_after)

        def read_after(after: int):
            limit = REPLAY_PAGE if up_to is None else min(REPLAY_PAGE, up_to - after)
            return asyncio.ensure_future(read(group_id, after, limit)), limit

        if up_to is not None and subscription.sent >= up_to:
            return
        pending, limit = read_after(subscription.sent)
        try:
            while True:
                rows = await pending
                pending = None
                if not rows:
                    return
                if rows[0][0] != subscription.sent + 1:  # the log is gapless
                    raise RuntimeError(f"the log after {subscription.sent} starts at "
                                       f"{rows[0][0]}")
                last = rows[-1][0]
                more = len(rows) == limit and (up_to is None or last < up_to)
                if more:
                    pending, limit = read_after(last)
                await self._send_frames(subscription, rows)
                if not more:
                    return
        finally:
            if pending is not None:  # ended early (an error, a cancelled pump)
                pending.cancel()

    async def _send_frames(self, subscription: Subscription, rows: list) -> None:
        """(sequence, frame) rows in order, each counted as sent once it is."""
        for sequence, frame in rows:
            await self.send(text_data=frame)
            subscription.sent = sequence


def _loads_frame(text_data: str):
    try:
        return json.loads(text_data, parse_constant=_refuse_constant)
    except ValueError as error:
        raise ProtocolError("VALIDATION_ERROR",
                            f"the frame is not valid JSON: {error}") from None
    except RecursionError:
        raise ProtocolError("VALIDATION_ERROR", "the frame is nested too deeply") from None


def _refuse_constant(name):
    raise ValueError(f"{name} is not JSON")

