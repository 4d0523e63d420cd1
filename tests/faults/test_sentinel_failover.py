"""Redis's primary killed (SIGKILL) while 50 WebSocket subscribers stream one Group's
events, and Sentinel promotes its replica. A real sentinel set (tests/integration/
sentinels.py: a primary, a replica, three sentinels with quorum 2 that call a primary
down after 1 s, passwords everywhere), and a server and a Celery worker that know only
the sentinels (REDIS_SENTINELS; REDIS_URL points where no Redis answers), while an SDK
client keeps committing through daphne.

Commits go on while there is no primary (Redis is a hint: the log has the event). The
web process's hub subscribes again on the new primary and catches every connection up
from PostgreSQL; a connection that drops is opened again by its client from the last
sequence it has (apps/bench/load_subscribers.py). After deduplication by sequence,
every subscriber has every event: 0 lost. And every Redis user is then seen at work on
the new primary: the publisher (PUBLISH), the rate limits (their Lua scripts), the hub
(its subscription), Celery (the worker's BRPOP), readiness (/readyz)."""

import asyncio
import http.client
import json
import time

import pytest

from apps.bench import http_lifecycles
from apps.bench.harness import free_port, percentile_ms
from apps.bench.load_subscribers import Subscribers
from apps.ledger.models import Group
from apps.ledger.verify import verify_group
from mission_weave.sdk.client import Client
from mission_weave.sdk.keys import AgentKey
from tests.faults import procs
from tests.integration.sentinels import PASSWORD, SENTINEL_PASSWORD, sentinel_set
from tests.integration.wslive import server_env

pytestmark = pytest.mark.django_db(transaction=True)

SUBSCRIBERS = 50
RATE = 40  # commits per second
BEFORE, AFTER = 4.0, 6.0  # seconds of commits before the kill, and after the promotion
NOTHING = "redis://127.0.0.1:1/0"  # REDIS_URL as left behind: no Redis answers there


def test_primary_killed_and_replica_promoted_while_50_subscribers_stream_loses_no_event(
        tmp_path, figure):
    (group,), coordinator, (reader,) = http_lifecycles.cast(
        f"sentinel-{time.time_ns() % 10**8}", 1, 1)
    with sentinel_set(tmp_path / "redis") as redis_set:
        env = {**server_env(), **redis_set.environment, "REDIS_URL": NOTHING,
               "MW_DATA_DIR": str(tmp_path)}
        env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        port = free_port()
        web_log, worker_log = tmp_path / "web.log", tmp_path / "worker.log"
        web = procs.web(port, env, web_log)
        worker = procs.celery(env, worker_log)
        try:
            head = Group.objects.get(id=group.id).head_sequence
            subscribers = Subscribers(
                [(f"ws://127.0.0.1:{port}/ws/v1/", [group.id])] * SUBSCRIBERS,
                reader.token, {group.id: head})
            run = asyncio.run(asyncio.wait_for(
                _commit(f"http://127.0.0.1:{port}", coordinator, group.id, redis_set), 120))
            final = Group.objects.get(id=group.id).head_sequence
            report = subscribers.finish({group.id: final}, 60)
            new = redis_set.node(run["primary"])
            # The worker polls the new primary once it reconnected (Celery's broker retry).
            procs.wait_until(lambda: _calls(new, "brpop") > 0, 30, "BRPOP by the worker on "
                             "the new primary", logs=[worker_log], process=worker)
            stats = {name: _calls(new, name) for name in ("evalsha", "brpop")}
            ready = _get(port, "/readyz")
            hub = [c for c in new.client_list() if c["name"].startswith("mw-hub-")]
        finally:
            procs.stop(worker)
            procs.stop(web)

    sockets = report["sockets"]
    assert final == head + run["committed"]
    assert [s["missing"] for s in sockets] == [{}] * SUBSCRIBERS, procs.tail(web_log)
    assert verify_group(group.id) == []
    assert run["pushes"] > 0 and stats["evalsha"] > 0, (run, stats)  # publisher, limits
    assert [c["psub"] for c in hub] == ["2"], hub  # the one subscription of the web process
    assert ready == (200, "ok"), ready
    for log in (web_log, worker_log):  # a failover's errors are logged, never the passwords
        text = log.read_text()
        assert PASSWORD not in text and SENTINEL_PASSWORD not in text, log
    duplicates = sum(s["duplicates"] for s in sockets)
    reconnects = sum(s["reconnects"] for s in sockets)
    latencies = report["latencies"]
    figure(f"Redis primary SIGKILLed: replica promoted by Sentinel {run['promoted']:.1f} s "
           f"and the hub subscribed there {run['hub']:.1f} s after the kill, while "
           f"{SUBSCRIBERS} WebSocket subscribers streamed {run['committed']} events at "
           f"{RATE}/s: 0 lost to any subscriber after dedupe ({SUBSCRIBERS * run['committed']} "
           f"deliveries, {duplicates} duplicates dropped, {reconnects} reconnections); "
           f"slowest command {run['slowest'] * 1000:.0f} ms; on the new primary "
           f"{run['pushes']} pushes published, {stats['evalsha']} rate-limit scripts, the "
           f"worker polling; commit-to-receipt p50 "
           f"{percentile_ms(latencies, 0.5)} ms, p99 {percentile_ms(latencies, 0.99)} ms, "
           f"max {max(latencies) * 1000:.0f} ms")


async def _commit(url: str, coordinator, group_id: str, redis_set) -> dict:
    """mission.create at RATE/s through the server; the primary killed after BEFORE
    seconds, and AFTER seconds more once the hub subscribed on the new one. Answers
    _promoted's figures, the pushes seen on the new primary, the commits and the slowest
    command (s)."""
    client = Client(url, AgentKey(coordinator.name, coordinator.key_id, coordinator.key),
                    retries=40, backoff_seconds=0.1)
    client.token, client.session_epoch = coordinator.token, coordinator.session_epoch
    began, count, slowest = time.monotonic(), 0, 0.0
    promotion = killed = None
    try:
        while promotion is None or not promotion.done() or \
                time.monotonic() - killed < promotion.result()["hub"] + AFTER:
            if killed is None and time.monotonic() - began >= BEFORE:
                old = await asyncio.to_thread(redis_set.kill_primary)
                killed = time.monotonic()
                promotion = asyncio.ensure_future(asyncio.to_thread(
                    _promoted, redis_set, old, killed, group_id))
            sent = time.monotonic()
            await client.command(group_id, "mission.create", {
                "title": "stream", "ownerId": http_lifecycles.OWNER,
                "coordinatorId": client.principal})
            slowest = max(slowest, time.monotonic() - sent)
            count += 1
            pause = began + count / RATE - time.monotonic()
            if pause > 0:
                await asyncio.sleep(pause)
    finally:
        await client.aclose()
    recovery = promotion.result()
    return {**recovery, "pushes": _received(recovery["pushes"]), "committed": count,
            "slowest": slowest}


def _promoted(redis_set, old: int, killed: float, group_id: str) -> dict:
    """The new primary's port, the seconds from the kill until every sentinel named it
    and until the hub subscribed there, and a subscription of this test's own there to
    the Group's pushes (which the publisher can only have sent once it found it)."""
    new = redis_set.wait_for_new_primary(old)
    promoted = time.monotonic() - killed
    node = redis_set.node(new)
    pushes = node.pubsub()  # (its client, `node`, goes with it: a lost client closes its pool)
    pushes.subscribe(f"mw:events:{group_id}")
    procs.wait_until(lambda: any(c["name"].startswith("mw-hub-") and c["psub"] == "2"
                                 for c in node.client_list()), 30, "hub subscription")
    return {"primary": new, "promoted": promoted, "hub": time.monotonic() - killed,
            "pushes": (node, pushes)}


def _received(subscription) -> int:
    """The pushes the publisher sent since the subscription."""
    _node, pushes = subscription
    count = 0
    while (message := pushes.get_message(timeout=1)) is not None:
        count += message["type"] == "message"
    pushes.close()
    return count


def _calls(node, command: str) -> int:
    return node.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0)


def _get(port: int, path: str) -> tuple[int, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        body = json.loads(response.read())
        return response.status, body.get("checks", {}).get("redis", "")
    finally:
        connection.close()
