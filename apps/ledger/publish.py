"""Push committed events to the channel layer, without making the request wait.

Redis is a hint, PostgreSQL the record: a lost push is filled from the log by
sequence, so a failure here is logged, never raised. The push runs on the server's
own event loop when daphne serves us (so the in-memory layer reaches consumers),
otherwise on one background loop per process (management commands, Celery).
"""

import asyncio
import logging
import threading

from channels.layers import get_channel_layer

log = logging.getLogger(__name__)

_server_loop: asyncio.AbstractEventLoop | None = None
_background_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()


def channel_group(group_id: str) -> str:
    return f"mw.group.{group_id}"


def remember_server_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Called by the ASGI application on its loop (mission_weave/asgi.py)."""
    global _server_loop
    _server_loop = loop


def _loop() -> asyncio.AbstractEventLoop:
    global _background_loop
    if _server_loop is not None and _server_loop.is_running():
        return _server_loop
    with _lock:
        if _background_loop is None:
            _background_loop = asyncio.new_event_loop()
            threading.Thread(target=_background_loop.run_forever, name="mw-publish",
                             daemon=True).start()
    return _background_loop


def events(group_id: str, documents: list) -> None:
    layer = get_channel_layer()
    if layer is None or not documents:
        return
    message = {"type": "group.events", "groupId": group_id,
               "headSequence": documents[-1]["sequence"], "events": documents}
    future = asyncio.run_coroutine_threadsafe(
        layer.group_send(channel_group(group_id), message), _loop())
    future.add_done_callback(_log_failure)


def _log_failure(future) -> None:
    if future.exception() is not None:
        log.warning("publishing events failed; subscribers catch up from the log",
                    exc_info=future.exception())
