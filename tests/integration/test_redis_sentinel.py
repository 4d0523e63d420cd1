"""Every Redis user through a real Sentinel set (tests/integration/sentinels.py: a
primary, a replica, three sentinels, all with passwords), and again after a manual
failover (SENTINEL FAILOVER) made the replica the primary.

The settings are those settings.py makes of REDIS_SENTINELS (REDIS_URL pointing at
nothing); each user is seen to act on the primary itself, read there with a client of
its own: Django's cache, the rate limits, the publisher, the hub's subscription,
readiness, Celery's broker (and the metrics' gauge of its queue) and the channel layer."""

import asyncio
import contextlib
import json
import os
import queue
import runpy
import threading
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from asgiref.sync import async_to_sync
from celery import Celery
from channels_redis.core import RedisChannelLayer
from django.core.cache import caches
from django.core.exceptions import ImproperlyConfigured

from apps.delivery.hub import Hub
from apps.ledger import publish
from apps.operations import collectors, readiness
from mission_weave.protocol.errors import ProtocolError
from mission_weave.runtime import rate_limits, redis_connections
from tests.integration.sentinels import sentinel_set

SETTINGS = Path(__file__).resolve().parents[2] / "mission_weave" / "settings.py"
NOTHING = "redis://127.0.0.1:1/0"  # REDIS_URL as left behind: no Redis answers there
SECONDS = 10  # for a user to reach the new primary after the failover


def settings_made_of(monkeypatch, environment: dict) -> dict:
    """The settings settings.py makes of this environment (read afresh)."""
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(SETTINGS))


def test_a_sentinel_address_without_a_port_is_refused(monkeypatch):
    with pytest.raises(ImproperlyConfigured, match="host:port"):
        settings_made_of(monkeypatch, {"REDIS_SENTINELS": "127.0.0.1:26379,sentinel-b"})


@pytest.mark.django_db
def test_no_password_shows_in_what_a_failure_says(settings):
    """With no sentinel answering, redis-py's MasterNotFoundError names every sentinel
    client it tried, with its options: /readyz serves that text, the hub logs it."""
    settings.REDIS_URL, settings.REDIS_SENTINELS = "", [("127.0.0.1", 1), ("127.0.0.1", 2)]
    settings.REDIS_SENTINEL_PASSWORD, settings.REDIS_PASSWORD = "sentinel-pw-42", "redis-pw-42"

    async def failure() -> str:
        try:
            await redis_connections.async_client().ping()
        except Exception as error:
            return repr(error)
        return "no error"

    said = [readiness.checks()["redis"], asyncio.run(failure())]
    assert all("MasterNotFoundError" in text for text in said), said
    assert not any("-pw-42" in text for text in said), said


class Subscriber:
    """A WebSocket connection as the hub sees one."""

    principal_id = "agent:nobody"

    def __init__(self) -> None:
        self.pushed: queue.Queue = queue.Queue()
        self.catch_ups = 0

    def push(self, group_id: str, documents: list, frames: list) -> None:
        self.pushed.put(documents)

    def catch_up(self, group_id: str) -> None:
        self.catch_ups += 1

    def recheck(self, group_id: str) -> None:
        pass


def eventually(act, what: str):
    """act() until it answers something true (errors count as not yet), for SECONDS."""
    deadline = time.monotonic() + SECONDS
    while True:
        try:
            answer = act()
            if answer:
                return answer
            failure = "it answered nothing"
        except Exception as error:
            failure = repr(error)
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {SECONDS} s ({failure})")
        time.sleep(0.1)


@pytest.mark.django_db
def test_every_redis_user_reaches_the_primary_and_the_new_one_after_a_failover(
        tmp_path, settings, monkeypatch):
    run = uuid.uuid4().hex[:8]
    with sentinel_set(tmp_path / "redis") as redis_set:
        made = settings_made_of(monkeypatch, {**redis_set.environment, "REDIS_URL": NOTHING})
        assert made["REDIS_URL"] == "" and made["MW_SWEEP_IN_PROCESS"] is False
        for name in ("REDIS_URL", "REDIS_SENTINELS", "REDIS_SENTINEL_MASTER",
                     "REDIS_SENTINEL_PASSWORD", "REDIS_PASSWORD", "CACHES"):
            setattr(settings, name, made[name])
        settings.MW_RATE_COMMANDS_PER_PRINCIPAL = "2/minute"
        monkeypatch.setattr(publish, "_clients", {})  # none left from another Redis
        celery = Celery("sentinel-test", set_as_current=False)
        celery.config_from_object(SimpleNamespace(**made), namespace="CELERY")
        channel_layer = RedisChannelLayer(**made["CHANNEL_LAYERS"]["default"]["CONFIG"])
        hub, subscriber, group_id = Hub(), Subscriber(), f"sentinel-{run}"
        loop = asyncio.new_event_loop()  # the hub's, as the server's would be
        threading.Thread(target=loop.run_forever, daemon=True).start()
        try:
            asyncio.run_coroutine_threadsafe(hub.add(group_id, subscriber), loop).result(10)
            assert subscriber.catch_ups == 1

            first = redis_set.primary_port()
            every_user_acts_on(redis_set, first, "before", run, celery, channel_layer,
                               subscriber, group_id)
            began = time.monotonic()
            second = redis_set.fail_over()
            assert second != first
            every_user_acts_on(redis_set, second, "after", run, celery, channel_layer,
                               subscriber, group_id)
            assert subscriber.catch_ups >= 2  # subscribed again, so it caught up its sockets
            print(f"\nSENTINEL FAILOVER {first} -> {second}: every user on the new primary "
                  f"{time.monotonic() - began:.1f} s after it was asked for")
        finally:
            asyncio.run_coroutine_threadsafe(stopped(hub), loop).result(10)
            loop.call_soon_threadsafe(loop.stop)


async def stopped(hub: Hub) -> None:
    if hub._listener is not None:
        hub._listener.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await hub._listener


def every_user_acts_on(redis_set, port: int, phase: str, run: str, celery, channel_layer,
                       subscriber: Subscriber, group_id: str) -> None:
    """Each user writes (or subscribes) through its own client; the primary at `port` is
    read directly to see it did so there."""
    primary = redis_set.node(port)

    key = f"sentinel-{run}-{phase}"
    eventually(lambda: caches["default"].set(key, phase) or primary.exists(f"mw:1:{key}"),
               f"the cache {phase}")
    assert caches["default"].get(key) == phase

    who = f"agent:sentinel-{run}-{phase}"
    eventually(lambda: rate_limits.check("commands", principal=who) or
               any(primary.scan_iter(match=f"*{who}*")), f"the rate limits {phase}")
    rate_limits.check("commands", principal=who)
    with pytest.raises(ProtocolError, match="too many commands"):
        rate_limits.check("commands", principal=who)

    with primary.pubsub() as listening:
        listening.subscribe(publish.redis_channel(group_id))
        listening.get_message(timeout=1)  # the subscription's confirmation

        def published():
            publish.events(group_id, [{"sequence": phase}])
            message = listening.get_message(timeout=0.5)
            return message and message["type"] == "message"
        eventually(published, f"the publisher {phase}")

    # The hub's subscription: on this primary, and what is published there reaches its
    # subscribers (a push between two subscriptions may be lost: it catches them up).
    hub_client = f"mw-hub-{os.getpid()}"
    eventually(lambda: any(c["name"] == hub_client and c["psub"] == "2"
                           for c in primary.client_list()), f"the hub's subscription {phase}")
    marker = [{"sequence": f"{run}-{phase}"}]

    def hub_pushed():
        primary.publish(f"mw:events:{group_id}", json.dumps({"events": marker}))
        with contextlib.suppress(queue.Empty):
            while True:  # the publisher's pushes above came this way too
                if subscriber.pushed.get(timeout=0.5) == marker:
                    return True
        return False
    eventually(hub_pushed, f"the hub's pushes {phase}")

    assert eventually(lambda: readiness.checks()["redis"] == "ok", f"readiness {phase}")
    assert collectors.redis_client().info("server")["tcp_port"] == port
    assert redis_connections.client().info("server")["tcp_port"] == port

    before = primary.llen("celery")  # the default queue (this set's own Redis)
    eventually(lambda: celery.send_task("mw.sentinel.probe") and primary.llen("celery") > before,
               f"Celery's broker {phase}")
    (depth,) = collectors.StateCollector()._celery()  # the metrics read it there too
    assert {s.labels["queue"]: s.value for s in depth.samples}["celery"] == \
        primary.llen("celery")

    def layer_round_trip():
        async def trip():
            await channel_layer.send("sentinel.probe", {"type": "probe", "phase": phase})
            return await asyncio.wait_for(channel_layer.receive("sentinel.probe"), 2)
        return async_to_sync(trip)()["phase"] == phase
    eventually(layer_round_trip, f"the channel layer {phase}")
