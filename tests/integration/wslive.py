"""A real daphne server on this test database with the Redis hub, and a real WebSocket
client (the `websockets` package), for the delivery tests."""

import asyncio
import http.client
import json
import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager

from django.conf import settings as django_settings
from django.db import connection
from websockets.asyncio.client import connect


def server_env() -> dict:
    database = django_settings.DATABASES["default"]
    url = (f"postgres://{database['USER']}:{database['PASSWORD'] or ''}@"
           f"{database['HOST'] or '127.0.0.1'}:{database['PORT'] or 5432}/{database['NAME']}")
    return {**os.environ, "DATABASE_URL": url, "REDIS_URL": django_settings.REDIS_URL,
            "DEBUG": "0", "SECRET_KEY": django_settings.SECRET_KEY,
            "MW_SWEEP_IN_PROCESS": "0"}


PORTS = range(18200, 18300)  # this suite's range on the shared machine


def free_port() -> int:
    for port in PORTS:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {PORTS}")


SERVERS: dict = {}  # port -> its `mission_weave.serve` process


@contextmanager
def live_server(workers: int = 1):
    port = free_port()
    process = SERVERS[port] = subprocess.Popen(
        [sys.executable, "-m", "mission_weave.serve", "--workers", str(workers),
         "--port", str(port)], cwd=django_settings.BASE_DIR, env=server_env(),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                probe = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                probe.request("GET", "/api/v1/authority")
                if probe.getresponse().status == 200:
                    break
            except OSError:
                pass
            assert process.poll() is None, process.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "the server did not start within 60 s"
            time.sleep(0.2)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=30)


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
