"""Push committed events towards subscribers, without making the request wait.

Redis is a hint, PostgreSQL the record: a lost push is filled from the log by
sequence, so a failure here is logged, never raised. With Redis configured a commit
costs one PUBLISH on `mw:events:<groupId>` (each web process fans out to its own
WebSocket subscribers); without Redis there is nobody to tell yet.
The push runs on the server's event loop when daphne serves us, otherwise on one
background loop per process (management commands, Celery).
"""

import asyncio
import json
import logging
import threading

from django.conf import settings

log = logging.getLogger(__name__)

_server_loop: asyncio.AbstractEventLoop | None = None
_background_loop: asyncio.AbstractEventLoop | None = None
_clients: dict = {}  # event loop -> redis.asyncio client
_lock = threading.Lock()


def redis_channel(group_id: str) -> str:
    return f"mw:events:{group_id}"


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
    if not documents:
        return
    if settings.REDIS_URL:
        message = json.dumps({"groupId": group_id, "events": documents}, separators=(",", ":"))
        future = asyncio.run_coroutine_threadsafe(_publish(group_id, message), _loop())
        future.add_done_callback(_log_failure)


async def _publish(group_id: str, message: str) -> None:
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        import redis.asyncio

        client = _clients[loop] = redis.asyncio.from_url(settings.REDIS_URL)
    await client.publish(redis_channel(group_id), message)


def _log_failure(future) -> None:
    if future.exception() is not None:
        log.warning("publishing events failed; subscribers catch up from the log",
                    exc_info=future.exception())
