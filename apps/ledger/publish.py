"""Push committed events towards subscribers, without making the request wait.

Redis is a hint, PostgreSQL the record: a lost push is filled from the log by
sequence, so a failure here is logged, never raised. With Redis configured a commit
costs one PUBLISH on `mw:events:<groupId>`, and each web process's one subscription
fans it out to its own WebSocket subscribers (apps/delivery/hub.py); without Redis
(one process) the events go straight to that process's hub. A membership
change is announced the same way on `mw:members:<groupId>`.
The push runs on the server's event loop when daphne serves us, otherwise on one
background loop per process (management commands, Celery).
"""

import asyncio
import json
import logging
import threading

from mission_weave.runtime import redis_connections

from . import ports

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


def members_channel(group_id: str) -> str:
    return f"mw:members:{group_id}"


def events(group_id: str, documents: list) -> None:
    if not documents:
        return
    if redis_connections.configured():
        message = json.dumps({"groupId": group_id, "events": documents}, separators=(",", ":"))
        _send(redis_channel(group_id), message)
    else:
        _to_local_hub("events", group_id, documents)


def membership_changed(group_id: str, principal: str) -> None:
    """Open connections of `principal` in this Group re-check their membership now."""
    if redis_connections.configured():
        _send(members_channel(group_id), principal)
    else:
        _to_local_hub("membership_changed", group_id, principal)


def _send(channel: str, message: str) -> None:
    future = asyncio.run_coroutine_threadsafe(_publish(channel, message), _loop())
    future.add_done_callback(_log_failure)


def _to_local_hub(method: str, group_id: str, argument) -> None:
    # No Redis: the only subscribers are this process's (the hub delivery plugged into
    # the local_hub port), on the server's loop.
    if ports.is_plugged("local_hub") and _server_loop is not None and _server_loop.is_running():
        _server_loop.call_soon_threadsafe(getattr(ports.plugged.local_hub, method), group_id,
                                          argument)


async def _publish(channel: str, message: str) -> None:
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        client = _clients[loop] = redis_connections.async_client()
    await client.publish(channel, message)


def _log_failure(future) -> None:
    if future.exception() is not None:
        log.warning("publishing events failed; subscribers catch up from the log",
                    exc_info=future.exception())
