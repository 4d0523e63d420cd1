"""mw_bench --fanout: event delivery latency from commit to receipt over WebSocket,
with 1, 50 and 100 subscribers of one Group, beside a raw Redis pub/sub round trip
with the same number of subscribers and the same messages, in the same run.

Commands are committed in this process through the pipeline (the publish path of a
web process); the commit moment is stamped by an on-commit hook registered before
the pipeline's own publish hook. The subscribers are real WebSocket clients of daphne
(`websockets`) on one event loop in a child process (apps/bench/fanout_receivers.py),
as are the raw Redis subscribers, so that committing does not hold their GIL.
Commits are paced at `--fanout-rate` events/s; without it at `rate(n)`, so that 50 and
100 subscribers take 5,000 deliveries/s. With a rate, deliveries/s = rate x subscribers
(e.g. 200 or 500 subscribers at 100 events/s: 20,000 and 50,000 deliveries/s)."""

import json
import multiprocessing
import time
import uuid

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from apps.identity.principals import Principal
from apps.ledger import feed, pipeline

from . import fanout_receivers, http_lifecycles
from .harness import percentile_ms, server

DEFAULT_DELIVERIES = 5000  # per second, when no events rate is given
DEFAULT_MAX_RATE = 100  # events/s committed, at most, when no events rate is given


def rate(subscribers: int, events_per_second: float | None = None) -> float:
    if events_per_second is not None:
        return events_per_second
    return min(DEFAULT_MAX_RATE, DEFAULT_DELIVERIES / subscribers)


def stats(latencies: list, deliveries: int, seconds: float) -> dict:
    return {"deliveries": deliveries, "seconds": round(seconds, 3),
            "deliveriesPerSecond": round(deliveries / seconds, 1) if seconds else None,
            "p50Ms": percentile_ms(latencies, 0.5), "p99Ms": percentile_ms(latencies, 0.99),
            "maxMs": round(max(latencies) * 1000, 2) if latencies else None}


class Committer:
    """Paced commits of one-event commands; `stamps[sequence]` = commit moment."""

    def __init__(self, coordinator: http_lifecycles.Agent, group_id: str):
        self.coordinator, self.group_id = coordinator, group_id
        self.principal = Principal(f"agent:{coordinator.name}", coordinator.session_epoch)
        self.stamps: dict[int, float] = {}
        self.documents: list = []

    def commit_one(self) -> None:
        _id, payload = self.coordinator.command(self.group_id, "mission.create", {
            "title": "fanout", "ownerId": http_lifecycles.OWNER,
            "coordinatorId": f"agent:{self.coordinator.name}"})
        stamp: dict[str, float] = {}
        with transaction.atomic():
            # Registered first, so it runs before the pipeline's publish hook.
            transaction.on_commit(lambda: stamp.setdefault("t", time.perf_counter()))
            answer = pipeline.submit(self.group_id, json.loads(payload), self.principal)
        assert answer.status == 200, answer.body
        event = answer.body["events"][0]
        self.stamps[event["sequence"]] = stamp["t"]
        self.documents.append(event)

    def run(self, count: int, per_second: float) -> None:
        try:
            started = time.perf_counter()
            for k in range(count):
                pause = started + k / per_second - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                self.commit_one()
        finally:
            connection.close()


def receive_elsewhere(target, args: tuple, send) -> tuple[list, float]:
    """Start the subscribers in a child process, wait until they are subscribed, run
    `send()` here, and return their receipts and the moment sending began."""
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=target, args=(child, *args), daemon=True)
    process.start()
    try:
        ready = parent.recv() if parent.poll(120) else ("error", "no answer within 120 s")
        if ready != "ready":
            raise RuntimeError(f"the subscribers failed: {ready}")
        started = time.perf_counter()
        send()
        result = parent.recv() if parent.poll(180) else ("error", "no receipts in 180 s")
        if isinstance(result, tuple):
            raise RuntimeError(f"the subscribers failed: {result}")
        return result, started
    finally:
        process.join(timeout=10)
        if process.is_alive():
            process.kill()


def websocket_run(port: int, token: str, group_id: str, subscribers: int,
                  committer: Committer, count: int, per_second: float) -> dict:
    head = _head(group_id)
    receipts, started = receive_elsewhere(
        fanout_receivers.websocket, (port, token, group_id, subscribers, head, count),
        lambda: committer.run(count, per_second))
    elapsed = max(t for _s, t in receipts) - started
    return stats([t - committer.stamps[s] for s, t in receipts], len(receipts), elapsed)


def _head(group_id: str) -> int:
    try:
        return feed.head(group_id)
    finally:
        connection.close()


def redis_run(subscribers: int, messages: list, per_second: float) -> dict:
    """The same messages PUBLISHed at the same pace from here to `subscribers`
    redis.asyncio subscribers in a child process: publish to receipt."""
    import redis

    channel = f"mw:bench:fanout:{uuid.uuid4().hex}"
    stamps: dict[int, float] = {}

    def publish():
        client = redis.Redis.from_url(settings.REDIS_URL)
        started = time.perf_counter()
        for k, message in enumerate(messages):
            pause = started + k / per_second - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            payload = json.dumps({"k": k, **message}, separators=(",", ":"))
            stamps[k] = time.perf_counter()
            client.publish(channel, payload)
        client.close()

    receipts, started = receive_elsewhere(
        fanout_receivers.redis_pubsub, (settings.REDIS_URL, channel, subscribers,
                                        len(messages)), publish)
    elapsed = max(t for _k, t in receipts) - started
    return stats([t - stamps[k] for k, t in receipts], len(receipts), elapsed)


def scenario(subscriber_counts: list, seconds: float, workers: int, report,
             events_per_second: float | None = None) -> dict:
    if not settings.REDIS_URL:
        raise RuntimeError("the fan-out benchmark needs REDIS_URL")
    run = uuid.uuid4().hex[:8]
    groups, coordinator, (subscriber,) = http_lifecycles.cast(run, 1, 1)
    group_id = groups[0].id
    rows = []
    with server(workers) as port:
        for subscribers in subscriber_counts:
            per_second = rate(subscribers, events_per_second)
            count = max(20, int(per_second * seconds))
            report(f"[fanout] {subscribers} subscriber(s): {count} events at "
                   f"{per_second:g}/s over WebSocket...")
            committer = Committer(coordinator, group_id)
            ws = websocket_run(port, subscriber.token, group_id, subscribers, committer,
                               count, per_second)
            report(f"[fanout] {subscribers} subscriber(s): the same over raw Redis pub/sub...")
            messages = [{"groupId": group_id, "events": [d]} for d in committer.documents]
            raw = redis_run(subscribers, messages, per_second)
            rows.append({"subscribers": subscribers, "eventsPerSecond": per_second,
                         "events": count, "websocket": ws, "rawRedis": raw,
                         "p99Ratio": round(ws["p99Ms"] / raw["p99Ms"], 2)
                         if raw["p99Ms"] else None})
    return {"scenario": "fanout", "webWorkers": workers, "groupId": group_id,
            "at": timezone.now().isoformat(), "runs": rows}

