"""A real daphne server on this test database with the Redis hub, and a real WebSocket
client (the `websockets` package), for the delivery tests."""

import asyncio
import json
import os

from django.conf import settings as django_settings
from django.db import connection
from websockets.asyncio.client import connect

from apps.bench.harness import database_url_of, server


def server_env() -> dict:
    """A server subprocess's environment: this test database and Redis, no in-process sweep."""
    return {**os.environ, "DATABASE_URL": database_url_of(connection.settings_dict),
            "REDIS_URL": django_settings.REDIS_URL, "DEBUG": "0",
            "SECRET_KEY": django_settings.SECRET_KEY, "MW_SWEEP_IN_PROCESS": "0"}


def live_server(workers: int = 1):
    """`with live_server() as port:` a `mission_weave.runtime.serve` on a free port."""
    return server(workers, env=server_env())


def ws(port: int, token: str | None = None, **headers):
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return connect(f"ws://127.0.0.1:{port}/ws/v1/", additional_headers=headers,
                   open_timeout=10)


async def send(socket, frame) -> None:
    await socket.send(frame if isinstance(frame, str) else json.dumps(frame))


async def frame(socket, timeout: float = 10) -> dict:
    return json.loads(await asyncio.wait_for(socket.recv(), timeout))


async def frames(socket, count: int, timeout: float = 10) -> list:
    return [await frame(socket, timeout) for _ in range(count)]


async def silence(socket, seconds: float = 0.8) -> None:
    """Nothing more arrives within `seconds`."""
    try:
        extra = await asyncio.wait_for(socket.recv(), seconds)
    except TimeoutError:
        return
    raise AssertionError(f"unexpected frame: {extra}")


async def in_thread(function, *args, **kwargs):
    """Sync Django work (commands, membership changes) while the client loop runs."""
    def run():
        try:
            return function(*args, **kwargs)
        finally:
            connection.close()
    return await asyncio.to_thread(run)


def sequences(received: list) -> list:
    assert all(f["op"] == "EVENT" for f in received), received
    return [f["event"]["sequence"] for f in received]
