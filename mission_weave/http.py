"""Django's HTTP handling under ASGI, run the way WSGI runs it.

Every view here is synchronous. Django's own ASGIHandler would wrap each
synchronous middleware in its own thread hop (two per middleware, about a dozen per
request) and start a fresh thread for every request. This handler instead loads the
middleware in synchronous mode and runs the whole request, middleware and view, in
one call on a pool thread; daphne's event loop only moves bytes. WebSockets are not
affected (Channels consumers are mounted beside it in mission_weave/asgi.py).
"""

import asyncio
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.core.handlers.asgi import ASGIHandler
from django.db import close_old_connections
from django.http import FileResponse

from mission_weave import daphne_blobs

daphne_blobs.install()


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
