"""Django's HTTP handling under ASGI, run the way WSGI runs it.

Every view here is synchronous. Django's own ASGIHandler would wrap each
synchronous middleware in its own thread hop (two per middleware, about a dozen per
request) and start a fresh thread for every request. This handler instead loads the
middleware in synchronous mode and runs the whole request, middleware and view, in
one call on a pool thread; daphne's event loop only moves bytes. WebSockets are not
affected (Channels consumers are mounted beside it in mission_weave/asgi.py).

In a daphne process it also gives every HTTP request a deadline to arrive (see
install_read_deadlines): twisted alone would wait forever for a request trickled in.
"""

import asyncio
import sys
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.core.handlers.asgi import ASGIHandler
from django.db import close_old_connections
from django.http import FileResponse

from mission_weave import daphne_blobs, daphne_frames

daphne_blobs.install()
daphne_frames.install()


# --- read deadlines: slow-loris requests ------------------------------------------------

_LATE = (b'{"error": {"code": "VALIDATION_ERROR", "message": "the request did not arrive '
         b'in time", "details": {}}}')
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
    from twisted.web.http import HTTPChannel

    if getattr(HTTPChannel, "_mw_deadlines", False):
        return
    HTTPChannel._mw_deadlines = True
    HTTPChannel._mw_call = None  # the pending check while a request is being read
    made, received, raw, headers, content, lost = (
        HTTPChannel.connectionMade, HTTPChannel.dataReceived, HTTPChannel.rawDataReceived,
        HTTPChannel.allHeadersReceived, HTTPChannel.allContentReceived,
        HTTPChannel.connectionLost)

    def arm(channel, seconds: int) -> None:
        disarm(channel)
        if seconds > 0:
            channel._mw_deadline = _now() + seconds
            channel._mw_call = channel.callLater(seconds, lambda: check(channel))

    def disarm(channel) -> None:
        if channel._mw_call is not None:
            if channel._mw_call.active():
                channel._mw_call.cancel()
            channel._mw_call = None

    def check(channel) -> None:
        channel._mw_call = None
        left = channel._mw_deadline - _now()
        if left > 0:  # the body earned more time since
            channel._mw_call = channel.callLater(left, lambda: check(channel))
            return
        if channel.transport is not None:
            channel.transport.write(TIMED_OUT)
            channel.timeoutConnection()  # close, and abort if the client will not let go

    def connection_made(self):
        self.timeOut = settings.MW_HTTP_IDLE_TIMEOUT_SECONDS or None
        return made(self)

    def data_received(self, data):
        # The first byte of a request (not one pipelined behind a response in progress).
        if self._mw_call is None and not self._handlingRequest:
            arm(self, settings.MW_HTTP_HEADER_TIMEOUT_SECONDS)
        return received(self, data)

    def all_headers_received(self):
        if self._mw_call is not None:
            arm(self, settings.MW_HTTP_BODY_TIMEOUT_SECONDS)
            self._mw_body_base, self._mw_body_bytes = self._mw_deadline, 0
        return headers(self)

    def raw_data_received(self, data):
        if self._mw_call is not None and not self._handlingRequest:
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

    return reactor.seconds()


install_read_deadlines()


class PooledSyncASGIHandler(ASGIHandler):
    def __init__(self):
        super().__init__()
        self.load_middleware(is_async=False)
        self.executor = ThreadPoolExecutor(max_workers=settings.MW_HTTP_THREADS,
                                           thread_name_prefix="mw-http")

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"Django serves HTTP here, not {scope['type']}")
        # No ThreadSensitiveContext: nothing thread-sensitive runs per request but the
        # request signals, which may share one thread.
        await self.handle(scope, receive, send)

    async def read_body(self, receive):
        # A blob upload arrives as the file daphne holds (mission_weave/daphne_blobs.py);
        # anything else is spooled by Django as usual, first message included.
        first = await receive()
        handed = daphne_blobs.handed_off(first)
        if handed is not None:
            return handed
        pending = [first]

        async def replay():
            return pending.pop() if pending else await receive()

        return await super().read_body(replay)

    async def run_get_response(self, request):
        loop = asyncio.get_running_loop()
        response = await loop.run_in_executor(self.executor, self._respond, request)
        response._handler_class = self.__class__
        if isinstance(response, FileResponse):
            response.block_size = self.chunk_size
        return response

    def _respond(self, request):
        # Database connections belong to the thread that uses them: hand them back to
        # the pool here, around the request, as Django's request signals would.
        close_old_connections()
        try:
            return self.get_response(request)
        finally:
            close_old_connections()
