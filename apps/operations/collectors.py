"""What a scrape reads from PostgreSQL and Redis at that moment (docs/operations.md,
"Metrics"): the sweeper's lag, open leases, offered WorkItems, reviews still to run and
the Celery queues. Each part is bounded by short timeouts, and a part that fails is left
out (with `mw_metrics_source_up` 0) rather than failing the scrape."""

import logging
from collections.abc import Iterator

import redis
from django.conf import settings
from django.utils import timezone
from kombu.transport.redis import PRIORITY_STEPS, Channel
from prometheus_client.core import GaugeMetricFamily

from apps.ledger import db
from apps.work import sweeper
from apps.work.work_store import ITEMS
from mission_weave.core import evidence_review
from mission_weave.runtime import redis_connections

from . import fastdb

log = logging.getLogger(__name__)

REDIS_TIMEOUT = 0.25  # seconds to connect to Redis, and to wait for its answer
_clients: dict = {}  # where -> client (its connection pool is reused between scrapes)


def redis_client(url: str | None = None) -> redis.Redis:
    """A client with short timeouts of the Redis at `url`, by default the settings' one
    (through its sentinels when REDIS_SENTINELS is set)."""
    where = url or redis_connections.location()
    client = _clients.get(where)
    if client is None:
        client = _clients[where] = redis_connections.client(
            url, socket_connect_timeout=REDIS_TIMEOUT, socket_timeout=REDIS_TIMEOUT)
    return client


class StateCollector:
    """A prometheus_client collector registered for one scrape (views.metrics)."""

    def describe(self):
        return []  # not known before the scrape; also keeps register() from collecting

    def collect(self):
        up = GaugeMetricFamily("mw_metrics_source_up", "1 when the scrape could read the "
                               "source (postgres, redis), else 0 and its metrics are left "
                               "out.", labels=["source"])
        try:
            yield from self._postgres()
            up.add_metric(["postgres"], 1)
        except Exception as error:
            log.warning("metrics: PostgreSQL unavailable: %s", error)
            up.add_metric(["postgres"], 0)
        if settings.CELERY_BROKER_URL:
            try:
                yield from self._celery()
                up.add_metric(["redis"], 1)
            except Exception as error:
                log.warning("metrics: Redis unavailable: %s", error)
                up.add_metric(["redis"], 0)
        yield up

    def _postgres(self):
        now = timezone.now()
        with fastdb.cursor() as cursor:
            cursor.execute(*overdue_statement(now))
            (oldest,) = cursor.fetchone()
            cursor.execute(f"SELECT count(*) FROM {ITEMS} WHERE state = 'active' "
                           f"AND lease_expires_at IS NOT NULL")
            (leases,) = cursor.fetchone()
            cursor.execute(f"SELECT count(*) FROM {ITEMS} WHERE state = 'offered' "
                           f"AND offers_expire_at > %s", [now])
            (offered,) = cursor.fetchone()
            cursor.execute(f"SELECT doc -> 'review' FROM {ITEMS} WHERE state = 'submitted'")
            reviews = [db.from_json(r) for (r,) in cursor.fetchall()]
        yield GaugeMetricFamily(
            "mw_sweep_lag_seconds", "Age of the oldest deadline the sweeper has still to "
            "handle (lease expiry, start-by, blocked lease, automatic dispatch's offer "
            "expiry and retry); 0 when none is overdue.",
            value=max((now - oldest).total_seconds(), 0.0) if oldest else 0.0)
        yield GaugeMetricFamily("mw_open_leases", "Open leases (active WorkItems).",
                                value=leases)
        yield GaugeMetricFamily("mw_offered_work_items", "WorkItems offered whose latest "
                                "offer has not expired.", value=offered)
        yield GaugeMetricFamily(
            "mw_review_tasks_queued", "Submissions whose review (§13.2) has a step still to "
            "run.", value=sum(1 for r in reviews if r and evidence_review.next_step(r) is not None))

    def _celery(self) -> Iterator[GaugeMetricFamily]:
        depth = GaugeMetricFamily("mw_celery_queue_length", "Tasks waiting in the Celery "
                                  "broker's queue (all priorities).", labels=["queue"])
        keys = celery_queue_keys()
        # The broker is the settings' Redis; through Sentinel its URL names the sentinels.
        broker = None if settings.REDIS_SENTINELS else settings.CELERY_BROKER_URL
        with redis_client(broker).pipeline(transaction=False) as pipe:
            for _queue, key in keys:
                pipe.llen(key)
            lengths = pipe.execute()
        totals: dict[str, int] = {}
        for (queue, _key), length in zip(keys, lengths):
            totals[queue] = totals.get(queue, 0) + length
        for queue, total in sorted(totals.items()):
            depth.add_metric([queue], total)
        yield depth


def overdue_statement(now) -> tuple:
    """The oldest passed deadline among the sweeper's rules (apps/work/sweeper.py RULES):
    per rule, the first row of its deadline index, as the sweeper's own query reads it."""
    branches = [f"(SELECT w.{column} AS due_at FROM {ITEMS} w WHERE w.{column} <= %s "
                f"AND {condition.format(auto=sweeper._auto_dispatch())} "
                f"ORDER BY w.{column} LIMIT 1)" for column, condition in sweeper.RULES]
    return (f"SELECT min(due_at) FROM ({' UNION ALL '.join(branches)}) due",
            [now] * len(branches))


def celery_queue_keys() -> list:
    """[(queue, Redis list key)]: kombu keeps each priority of a queue in a list of its own."""
    from mission_weave.celery import app

    options = app.conf.broker_transport_options or {}
    steps = options.get("priority_steps", PRIORITY_STEPS)
    separator = options.get("sep", Channel.sep)
    return [(queue, queue if not step else f"{queue}{separator}{step}")
            for queue in sorted(app.amqp.queues) for step in steps]
