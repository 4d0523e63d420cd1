"""Blob bodies through daphne with memory flat in their size, both ways.

Upload: twisted (under daphne) receives a large request body into a temporary file.
Daphne then copies all of it into the ASGI receive queue in 8 KiB messages at once (the
queue is unbounded, so the process grows by the whole body) and Django's ASGIHandler
copies the messages into a second spooled file before the view runs. For PUT
/api/v1/blobs/... daphne instead sends one empty message carrying that file, and
PooledSyncASGIHandler.read_body (mission_weave/runtime/http_handler.py) gives Django a
duplicate of its descriptor: memory stays flat and the bytes are copied once less.

Download: daphne writes every body message to the socket's user-space buffer without
waiting for it to drain, so a response produced faster than the client reads it piles
up in memory. For GET /api/v1/blobs/... the response registers a push producer with
twisted, and the application's `send` waits while twisted says its buffer is full.

Every other request is left exactly as daphne handles it."""

import asyncio
import io
import os
import sys

from mission_weave.runtime import patches

BLOB_PATH = b"/api/v1/blobs/"
# What the patch was written for (mission_weave/runtime/patches.py): daphne's WebRequest
# (process, handle_reply) and Server.handle_reply; twisted's Request keeping a large body
# in a temporary file (`content`) and its producer registration.
WRITTEN_FOR = {"daphne": ">=4.1,<4.3", "twisted": ">=26.10,<27"}


def install() -> None:
    """Patch daphne, once, in a daphne process (anywhere else this does nothing)."""
    protocol = sys.modules.get("daphne.http_protocol")  # loaded by daphne's server
    server = sys.modules.get("daphne.server")
    if protocol is None or server is None or getattr(protocol, "_mw_blobs", False):
        return
    for package, written_for in WRITTEN_FOR.items():
        patches.require(__name__, package, written_for)
    _patch_request(protocol.WebRequest)
    _patch_server(server.Server)
    setattr(protocol, "_mw_blobs", True)  # a mark on a module mypy knows as a ModuleType


# --- upload: hand over the file ----------------------------------------------------------


class FileBody(bytes):
    """An empty body chunk carrying the open file that holds the whole body."""

    file = None


class _HandOff:
    """Stands in for the request's content file inside daphne's WebRequest.process: its
    one read gives the FileBody, which daphne sends as the last (and only) chunk."""

    def __init__(self, content):
        self._content = content
        self._given = False

    @property
    def closed(self):
        return self._content.closed

    def read(self, size=-1):
        if self._given:
            return b""
        self._given = True
        chunk = FileBody(b"")
        chunk.file = self._content
        return chunk

    def __getattr__(self, name):  # seek, close, ... on the real file
        return getattr(self._content, name)


def handed_off(message: dict):
    """The body file a message hands over, as a file Django may own and close (twisted
    closes its own when the response ends or the client goes away), else None."""
    body = message.get("body")
    if not isinstance(body, FileBody) or body.file is None:
        return None
    # A duplicate descriptor shares the file offset: rewind it for the reader.
    file = os.fdopen(os.dup(body.file.fileno()), "rb")
    file.seek(0)
    return file


# --- download: wait for the socket ---------------------------------------------------------


class _Gate:
    """A twisted push producer that is an asyncio Event: open while twisted can take
    more. Twisted calls it from the reactor, which runs on the asyncio loop."""

    def __init__(self):
        self.open = asyncio.Event()
        self.open.set()

    def pauseProducing(self):  # twisted's interface
        self.open.clear()

    def resumeProducing(self):
        self.open.set()

    def stopProducing(self):  # the connection is going: never block on it
        self.open.set()


def _is_blob(request, method: bytes) -> bool:
    return request.method == method and request.path.startswith(BLOB_PATH)


def _patch_request(WebRequest) -> None:
    process, handle_reply = WebRequest.process, WebRequest.handle_reply

    def patched_process(self):
        content = getattr(self, "content", None)
        if (_is_blob(self, b"PUT") and content is not None
                and not isinstance(content, io.BytesIO)):  # small bodies stay in memory
            self.content = _HandOff(content)
        return process(self)

    def patched_handle_reply(self, message):
        live = not self.finished and self.channel is not None
        if live and message.get("type") == "http.response.start" and _is_blob(self, b"GET"):
            self._mw_gate = _Gate()
            self.registerProducer(self._mw_gate, True)
        elif (message.get("type") == "http.response.body" and not message.get("more_body")
              and getattr(self, "_mw_gate", None) is not None):
            # Unregistered before daphne finishes the response, as twisted requires.
            if live and self.producer is not None:
                self.unregisterProducer()
            self._mw_gate.open.set()
            self._mw_gate = None
        return handle_reply(self, message)

    WebRequest.process = patched_process
    WebRequest.handle_reply = patched_handle_reply


def _patch_server(Server) -> None:
    handle_reply = Server.handle_reply

    async def patched_handle_reply(self, protocol, message):
        await handle_reply(self, protocol, message)
        gate = getattr(protocol, "_mw_gate", None)
        if gate is not None:
            await gate.open.wait()

    Server.handle_reply = patched_handle_reply
