"""Django's HTTP handling under ASGI, run the way WSGI runs it.

Every view here is synchronous. Django's own ASGIHandler would wrap each
synchronous middleware in its own thread hop (two per middleware, about a dozen per
request) and start a fresh thread for every request. This handler instead loads the
middleware in synchronous mode and runs the whole request, signals, middleware and view,
in one call on a pool thread; daphne's event loop only moves bytes. WebSockets are not
affected (Channels consumers are mounted beside it in mission_weave/asgi.py).

In a daphne process it also gives every HTTP request a deadline to arrive (see
install_read_deadlines): twisted alone would wait forever for a request trickled in;
and it spares twisted work daphne does not use (install_lean_requests).
"""

import asyncio
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.db import close_old_connections
from django.http import FileResponse
from django.urls import set_script_prefix

from mission_weave.runtime import daphne_blobs, daphne_frames, patches

if TYPE_CHECKING:
    from twisted.internet.task import LoopingCall

# What each patch here was written for (mission_weave/runtime/patches.py), checked as it
# is installed. Read deadlines: twisted's HTTPChannel (its _handlingRequest, the
# dataReceived/rawDataReceived/allHeadersReceived/allContentReceived steps,
# timeoutConnection). Lean requests: twisted's Request._parsePOSTFormSubmission and
# daphne's HTTPFactory.log. The handler: Django's ASGIHandler request cycle (read_body,
# create_request, send_response, chunk_size), whose __call__ it replaces.
READ_DEADLINES_WRITTEN_FOR = {"twisted": ">=26.10,<27"}
LEAN_REQUESTS_WRITTEN_FOR = {"twisted": ">=26.10,<27", "daphne": ">=4.1,<4.3"}
HANDLER_WRITTEN_FOR = {"django": ">=5.2,<5.3"}


def _require(what: str, written_for: dict) -> None:
    for package, versions in written_for.items():
        patches.require(f"{__name__}.{what}", package, versions)


daphne_blobs.install()
daphne_frames.install()


# --- read deadlines: slow-loris requests ------------------------------------------------

_LATE = (b'{"error": {"code": "VALIDATION_ERROR", "message": "the request did not arrive '
         b'in time", "details": {}}}')
TICK_SECONDS = 0.5  # how late past its deadline a request may be closed
TIMED_OUT = (b"HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\n"
             b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(_LATE), _LATE))


def install_read_deadlines() -> None:
    """Patch twisted's HTTP/1.1 channel, once, in a daphne process. Twisted's only timeout
    is an idle one that every byte resets, so a client that trickles a request's headers
    or body a byte at a time holds its connection (and a socket) for ever. Here the
    request line and headers must arrive within MW_HTTP_HEADER_TIMEOUT_SECONDS of their
    first byte, and a body within MW_HTTP_BODY_TIMEOUT_SECONDS plus a second per
    MW_HTTP_BODY_MIN_RATE bytes received (a large upload at a fair rate keeps going);
    a late one gets 408 and the connection is closed. MW_HTTP_IDLE_TIMEOUT_SECONDS is
    twisted's idle timeout. WebSockets leave the channel at their upgrade, unaffected."""
    if "daphne.server" not in sys.modules:  # a test client, a management command
        return
    from twisted.web.http import HTTPChannel as Twisted

    # Patched in place: mypy's view of twisted's class allows neither new attributes nor
    # replacing its methods, so the class is handled as Any here.
    HTTPChannel: Any = Twisted
    if getattr(HTTPChannel, "_mw_deadlines", False):
        return
    _require("install_read_deadlines", READ_DEADLINES_WRITTEN_FOR)
    HTTPChannel._mw_deadlines = True
    HTTPChannel._mw_deadline = None  # while a request is being read: when it must be in
    # The channels reading a request, checked twice a second by one timer: a timer per
    # request (twisted's callLater, then its cancel) cost more than the rest of the check.
    reading: set[Any] = set()  # HTTPChannels, with the attributes set above
    ticking: list[LoopingCall] = []
    made, received, raw, headers, content, lost = (
        HTTPChannel.connectionMade, HTTPChannel.dataReceived, HTTPChannel.rawDataReceived,
        HTTPChannel.allHeadersReceived, HTTPChannel.allContentReceived,
        HTTPChannel.connectionLost)

    def arm(channel, seconds: int) -> None:
        if seconds <= 0:
            return disarm(channel)
        channel._mw_deadline = _now() + seconds
        reading.add(channel)
        if not ticking:
            from twisted.internet.task import LoopingCall

            ticking.append(LoopingCall(check))
            ticking[0].start(TICK_SECONDS, now=False)

    def disarm(channel) -> None:
        channel._mw_deadline = None
        reading.discard(channel)

    def check() -> None:
        now = _now()
        for channel in [c for c in reading if c._mw_deadline <= now]:
            disarm(channel)
            if channel.transport is not None:
                channel.transport.write(TIMED_OUT)
                channel.timeoutConnection()  # close, and abort if the client will not let go

    def connection_made(self):
        self.timeOut = settings.MW_HTTP_IDLE_TIMEOUT_SECONDS or None
        return made(self)

    def data_received(self, data):
        # The first byte of a request (not one pipelined behind a response in progress).
        if self._mw_deadline is None and not self._handlingRequest:
            arm(self, settings.MW_HTTP_HEADER_TIMEOUT_SECONDS)
        return received(self, data)

    def all_headers_received(self):
        if self._mw_deadline is not None:
            arm(self, settings.MW_HTTP_BODY_TIMEOUT_SECONDS)
            self._mw_body_base, self._mw_body_bytes = self._mw_deadline, 0
        return headers(self)

    def raw_data_received(self, data):
        if self._mw_deadline is not None and not self._handlingRequest:
            self._mw_body_bytes += len(data)
            rate = settings.MW_HTTP_BODY_MIN_RATE
            if rate > 0:
                self._mw_deadline = max(self._mw_deadline,
                                        self._mw_body_base + self._mw_body_bytes / rate)
        return raw(self, data)

    def all_content_received(self):
        disarm(self)
        return content(self)

    def connection_lost(self, reason):
        disarm(self)
        return lost(self, reason)

    HTTPChannel.connectionMade = connection_made
    HTTPChannel.dataReceived = data_received
    HTTPChannel.allHeadersReceived = all_headers_received
    HTTPChannel.rawDataReceived = raw_data_received
    HTTPChannel.allContentReceived = all_content_received
    HTTPChannel.connectionLost = connection_lost


def _now() -> float:
    from twisted.internet import reactor

    # Twisted types the reactor by zope Interfaces, whose methods are declared without
    # `self`; mypy reads them without the mypy-zope plugin, which this project does not use.
    return reactor.seconds()  # type: ignore[misc]


install_read_deadlines()


def install_lean_requests() -> None:
    """Stop two things twisted does for every request that daphne never uses: parsing a
    POSTed form or multipart body into `request.args` (a read of the whole body and an
    email-parser pass over its Content-Type; daphne hands the raw body to the app), and
    formatting a combined-log line (daphne writes its own access log, --access-log)."""
    if "daphne.server" not in sys.modules:
        return
    _require("install_lean_requests", LEAN_REQUESTS_WRITTEN_FOR)
    from daphne.http_protocol import HTTPFactory, WebRequest

    # A property, not a False: twisted's Request.__init__ sets the attribute on each
    # instance (True), which would hide a plain class attribute.
    WebRequest._parsePOSTFormSubmission = property(lambda request: False,
                                                   lambda request, value: None)
    HTTPFactory.log = lambda self, request: None


install_lean_requests()


class PooledSyncASGIHandler(ASGIHandler):
    """Django's ASGIHandler with its request cycle replaced by one call on a pool
    thread: the request signals, the request object, the middleware and the view, and for
    a response already whole, its close (request_finished). Django's own cycle hops to a
    thread of asgiref's for each signal and for the close, and runs two tasks per request
    to watch for a disconnect; it measured a third of a command's CPU in this process.
    A view here cannot be cancelled by a disconnect anyway (it runs on its thread to the
    end), so nothing watches for one: the answer to a client that left is dropped."""

    def __init__(self):
        _require("PooledSyncASGIHandler", HANDLER_WRITTEN_FOR)
        super().__init__()
        self.load_middleware(is_async=False)
        self.executor = ThreadPoolExecutor(max_workers=settings.MW_HTTP_THREADS,
                                           thread_name_prefix="mw-http")

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"Django serves HTTP here, not {scope['type']}")
        try:
            body = await self.read_body(receive)
        except RequestAborted:
            return
        loop = asyncio.get_running_loop()
        response = await loop.run_in_executor(self.executor, self._respond, scope, body)
        try:
            await self.send_response(response, send)
        finally:
            if response.streaming:
                await loop.run_in_executor(self.executor, self._close, response, body)

    async def read_body(self, receive):
        # A blob upload arrives as the file daphne holds (mission_weave/runtime/daphne_blobs.py);
        # anything else is spooled by Django as usual, first message included.
        first = await receive()
        handed = daphne_blobs.handed_off(first)
        if handed is not None:
            return handed
        pending = [first]

        async def replay():
            return pending.pop() if pending else await receive()

        return await super().read_body(replay)

    def _respond(self, scope, body):
        # As WSGIHandler does it, on this thread: database connections belong to the
        # thread that uses them, and the request signals hand them back to the pool.
        set_script_prefix(get_script_prefix(scope))
        signals.request_started.send(sender=self.__class__, scope=scope)
        request, response = self.create_request(scope, body)
        if request is not None:
            response = self.get_response(request)
        response._handler_class = self.__class__
        if isinstance(response, FileResponse):
            response.block_size = self.chunk_size
        if response.streaming:  # sent from its file after this thread has moved on
            close_old_connections()
        else:
            self._close(response, body)
        return response

    @staticmethod
    def _close(response, body):
        response.close()
        body.close()
