"""Limits against a real server (`python -m mission_weave.runtime.serve`, two daphne processes on
this test database and Redis), spoken to with raw sockets where a well-behaved client
library would hide what is tested: requests trickled in, idle connections, a WebSocket
that never answers a ping, a flood beside an innocent client. The timeouts are set short
here (seconds instead of tens of seconds) so that each test takes a few seconds."""

import asyncio
import base64
import json
import os
import socket
import statistics
import threading
import time

import pytest
from django.conf import settings as django_settings

from apps.bench.harness import Client, server
from mission_weave.runtime import rate_limits
from tests.integration.wslive import frame, send, ws
from tests.support import Scenario

pytestmark = pytest.mark.django_db(transaction=True)

HEADER_SECONDS, BODY_SECONDS, BODY_RATE, IDLE_SECONDS = 2, 2, 1000, 3
PING_INTERVAL, PING_TIMEOUT = 1, 2
READS_PER_PRINCIPAL, COMMANDS_PER_PRINCIPAL = "20/minute", "10/minute"


@pytest.fixture(scope="module")
def port(django_db_setup, django_db_blocker):
    from tests.integration.wslive import server_env

    env = {**server_env(),
           "MW_HTTP_HEADER_TIMEOUT_SECONDS": str(HEADER_SECONDS),
           "MW_HTTP_BODY_TIMEOUT_SECONDS": str(BODY_SECONDS),
           "MW_HTTP_BODY_MIN_RATE": str(BODY_RATE),
           "MW_HTTP_IDLE_TIMEOUT_SECONDS": str(IDLE_SECONDS),
           "MW_WS_PING_INTERVAL_SECONDS": str(PING_INTERVAL),
           "MW_WS_PING_TIMEOUT_SECONDS": str(PING_TIMEOUT),
           "MW_RATE_READS_PER_PRINCIPAL": READS_PER_PRINCIPAL,
           "MW_RATE_COMMANDS_PER_PRINCIPAL": COMMANDS_PER_PRINCIPAL}
    with server(workers=2, env=env) as port:
        yield port


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def trickle(sock: socket.socket, piece: bytes, every: float, seconds: float) -> tuple:
    """Send `piece` every `every` seconds until the server answers or closes, at most
    `seconds`: (seconds it took, what the server sent)."""
    started = time.monotonic()
    sock.settimeout(every)
    while time.monotonic() - started < seconds:
        try:
            sock.sendall(piece)
        except OSError:
            return time.monotonic() - started, b""
        try:
            return time.monotonic() - started, sock.recv(4096)
        except TimeoutError:
            continue
        except OSError:
            return time.monotonic() - started, b""
    return time.monotonic() - started, None


def closed_after(sock: socket.socket, seconds: float) -> float | None:
    """Seconds until the server closes `sock` (reading whatever it sends), or None."""
    started = time.monotonic()
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return None
    except OSError:  # reset
        pass
    return time.monotonic() - started


# --- slow and idle HTTP ----------------------------------------------------------------

def test_headers_trickled_in_are_cut_off_with_408_although_bytes_keep_coming(port):
    sock = connect(port)
    sock.sendall(b"GET /api/v1/authority HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")

    took, answer = trickle(sock, b"a", every=0.3, seconds=15)

    assert answer is not None and answer.startswith(b"HTTP/1.1 408 "), answer
    assert HEADER_SECONDS - 0.5 < took < HEADER_SECONDS + 3
    assert b'"code": "VALIDATION_ERROR"' in answer


def test_a_body_trickled_in_is_cut_off_with_408(port):
    sock = connect(port)
    sock.sendall(b"POST /api/v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")

    took, answer = trickle(sock, b" ", every=0.3, seconds=15)

    assert answer is not None and answer.startswith(b"HTTP/1.1 408 "), answer
    assert BODY_SECONDS - 0.5 < took < BODY_SECONDS + 3


def test_a_body_at_a_fair_rate_may_take_longer_than_the_base_allowance(port):
    body = json.dumps({"pad": " " * 7000}).encode()  # 7 KB at 2 KB/s: ~3.5 s
    sock = connect(port)
    sock.sendall(b"POST /api/v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
    started = time.monotonic()
    for offset in range(0, len(body), 600):
        sock.sendall(body[offset:offset + 600])
        time.sleep(0.3)
    sent = time.monotonic() - started
    sock.settimeout(10)

    answer = sock.recv(4096)

    assert sent > BODY_SECONDS + 1
    assert answer.startswith(b"HTTP/1.1 400 "), answer  # judged (the body is no session)


def test_an_idle_connection_is_closed_before_and_after_a_request(port):
    fresh = connect(port)
    used = connect(port)
    used.sendall(b"GET /api/v1/authority HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    used.settimeout(10)
    answered = used.recv(4096)

    assert answered.startswith(b"HTTP/1.1 200 ")
    for sock in (fresh, used):
        took = closed_after(sock, IDLE_SECONDS + 5)
        assert took is not None and took < IDLE_SECONDS + 1.5


# --- idle WebSockets -------------------------------------------------------------------

def handshake(port: int, token: str) -> socket.socket:
    sock = connect(port)
    key = base64.b64encode(os.urandom(16))
    sock.sendall(b"GET /ws/v1/ HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\n"
                 b"Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                 b"Sec-WebSocket-Version: 13\r\nAuthorization: Bearer %s\r\n\r\n"
                 % (port, key, token.encode()))
    sock.settimeout(10)
    answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 101 "), answer
    return sock


def test_a_websocket_that_answers_no_ping_is_closed_and_one_that_does_stays(port):
    s = Scenario()
    silent = handshake(port, s.w1.token)
    closed = []
    watcher = threading.Thread(target=lambda: closed.append(closed_after(silent, 20)))
    watcher.start()
    open_for = PING_INTERVAL + PING_TIMEOUT + 5

    async def answering():
        async with ws(port, s.w2.token) as socket:  # the library answers every ping
            await asyncio.sleep(open_for)
            await send(socket, {"op": "NOPE"})
            return await frame(socket)

    still_open = asyncio.run(answering())
    watcher.join()

    # daphne checks its timers every 2 s: a ping after 1-3 s, dropped 2 s later.
    assert closed[0] is not None and closed[0] < PING_INTERVAL + PING_TIMEOUT + 3 < open_for
    assert still_open["op"] == "ERROR" and still_open["code"] == "VALIDATION_ERROR"


# --- counts shared by every process, and a flood beside an innocent client ----------------

def read(port: int, token: str, group_id: str) -> int:
    client = Client(port, token)  # a new connection each time: either process may take it
    try:
        client.connection.request("GET", f"/api/v1/groups/{group_id}/membership",
                                  headers=client.headers)
        response = client.connection.getresponse()
        response.read()
        return response.status
    finally:
        client.close()


def test_a_count_is_shared_by_every_process_through_redis(port, settings):
    s = Scenario()
    # This test process is a third process on the same Redis: it spends 15 of the 20.
    settings.MW_RATE_READS_PER_PRINCIPAL = READS_PER_PRINCIPAL
    assert settings.REDIS_URL == django_settings.REDIS_URL != ""
    for _ in range(15):
        rate_limits.check("reads", principal=s.w1.principal)

    statuses = [read(port, s.w1.token, s.world.group.id) for _ in range(10)]

    assert statuses == [200] * 5 + [429] * 5


def test_a_principal_flooding_commands_costs_another_principal_nothing(port):
    s = Scenario()
    flooder, innocent = s.c, s.world.agent("c2-" + s.world.group.slug, roles=("coordinator",))
    body = {"title": "t", "ownerId": s.owner.principal, "coordinatorId": s.c.principal}
    flood = [json.dumps(flooder.envelope("mission.create", body)).encode()
             for _ in range(200)]
    path = f"/api/v1/groups/{s.world.group.id}/commands"
    flooded, timings, lock = [], [], threading.Lock()
    innocent_client = Client(port, innocent.token)

    def innocent_commands() -> list:
        answers = []
        for _ in range(5):
            started = time.perf_counter()
            status, _answer = innocent_client.post(path, json.dumps(innocent.envelope(
                "mission.create", {**body, "coordinatorId": innocent.principal})).encode())
            answers.append((status, time.perf_counter() - started))
        return answers

    alone = innocent_commands()

    def flood_from(share):
        client = Client(port, flooder.token)
        for payload in share:
            started = time.perf_counter()
            status, _answer = client.post(path, payload)
            with lock:
                flooded.append(status)
                timings.append((status, time.perf_counter() - started))
        client.close()

    threads = [threading.Thread(target=flood_from, args=(flood[k::4],)) for k in range(4)]
    for thread in threads:
        thread.start()
    answers = innocent_commands()
    innocent_client.close()
    for thread in threads:
        thread.join()
    refused = [t for status, t in timings if status == 429]
    print(f"flood: {len(flooded)} commands from 4 threads, {flooded.count(429)} refused in "
          f"{statistics.median(refused) * 1000:.1f} ms (median); innocent, alone: "
          f"{[round(t * 1000, 1) for _, t in alone]} ms, during the flood: "
          f"{[round(t * 1000, 1) for _, t in answers]} ms")

    assert flooded.count(200) == 10 and flooded.count(429) == 190
    assert [status for status, _ in alone + answers] == [200] * 10
