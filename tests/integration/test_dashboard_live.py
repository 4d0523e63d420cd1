"""The dashboard's live signals (apps/dashboard/live.py) against a real daphne process
with the Redis hub, through a real client (`websockets`) that logs in as a browser
does: the session cookie and an Origin. Commands are committed in this process; their
pushes reach the server through Redis."""

import asyncio
import re
import time

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from apps.identity import registry
from tests.integration.test_websocket import kill_hub_subscriptions
from tests.integration.wslive import in_thread
from tests.support import Actor, Scenario, World

pytestmark = pytest.mark.django_db(transaction=True)


def run(coroutine):
    return asyncio.run(coroutine)


def page_socket(port: int, group_id: str, human: Actor | None = None, origin: str | None = None):
    """The connection a dashboard page in `human`'s browser opens (no cookie: anonymous)."""
    headers = {"Origin": origin or f"http://127.0.0.1:{port}"}
    if human is not None:
        headers["Cookie"] = f"sessionid={human.client.cookies['sessionid'].value}"
    return connect(f"ws://127.0.0.1:{port}/ws/dashboard/g/{group_id}/",
                   additional_headers=headers, open_timeout=10)


async def signal(socket, timeout: float = 10) -> dict:
    """The next frame's attributes: {"id": "mw-live-signal", "data-sequence": "42", ...}."""
    text = await asyncio.wait_for(socket.recv(), timeout)
    assert re.fullmatch(r'<div( [\w-]+(="[^"]*")?)*></div>', text), text
    return dict(re.findall(r' ([\w-]+)(?:="([^"]*)")?', text))


async def signals_until_quiet(socket, quiet: float = 0.6) -> list:
    received = []
    while True:
        try:
            received.append(await signal(socket, quiet))
        except TimeoutError:
            return received


def create_missions(s: Scenario, count: int) -> list:
    """`count` commits of one event each; the new Missions' ids."""
    return [s.c.ok("mission.create", {"title": f"m{k}", "ownerId": s.owner.principal,
                                      "coordinatorId": s.c.principal})[0]["missionId"]
            for k in range(count)]


def assert_refused(port: int, group_id: str, human: Actor | None = None,
                   origin: str | None = None) -> None:
    async def scenario():
        with pytest.raises(InvalidStatus) as refused:
            async with page_socket(port, group_id, human, origin):
                pass
        assert refused.value.response.status_code == 403
    run(scenario())


def test_a_member_is_told_on_connect_and_within_a_second_of_a_commit(port):
    s = Scenario()
    head = s.world.head

    async def scenario():
        async with page_socket(port, s.world.group.id, s.owner) as socket:
            hello = await signal(socket)
            # A page that missed commits while it loaded catches up from this one.
            assert hello["id"] == "mw-live-signal" and hello["hx-swap-oob"] == "true"
            assert (hello["data-sequence"], "data-catch-up" in hello) == (str(head), True)
            item_id = await in_thread(s.authorize)
            changed = await signal(socket, timeout=1)
            assert changed == {"id": "mw-live-signal", "hx-swap-oob": "true",
                               "data-sequence": str(head + 1),
                               "data-missions": s.mission_id, "data-items": item_id}
    run(scenario())


def test_a_burst_of_commits_is_coalesced_and_the_last_signal_carries_the_head(port):
    s = Scenario()

    async def scenario():
        async with page_socket(port, s.world.group.id, s.owner) as socket:
            await signal(socket)
            started = time.monotonic()
            created = await in_thread(create_missions, s, 50)
            received = await signals_until_quiet(socket)
            return created, received, time.monotonic() - started
    created, received, seconds = run(scenario())

    assert 1 <= len(received) < 50 // 2
    assert len(received) <= seconds / 0.1 + 1  # at most one frame per 100 ms
    assert received[-1]["data-sequence"] == str(s.world.head)
    named = {m for frame in received for m in frame["data-missions"].split()}
    assert named == set(created)


def test_the_handshake_is_refused_to_a_non_member_to_anyone_anonymous_and_cross_site(port):
    s = Scenario()
    stranger = World().human("stranger-" + s.world.group.slug)
    assert_refused(port, s.world.group.id, stranger)
    assert_refused(port, "grp_does_not_exist", s.owner)
    assert_refused(port, s.world.group.id)
    assert_refused(port, s.world.group.id, s.owner, origin="http://evil.example")


def test_removing_the_membership_closes_an_open_page_with_4403(port):
    s = Scenario()

    async def scenario():
        async with page_socket(port, s.world.group.id, s.owner) as socket:
            await signal(socket)
            await in_thread(registry.remove_member, s.world.group, s.owner.principal)
            # The notice closes it, well before the periodic re-check would.
            await asyncio.wait_for(socket.wait_closed(), 3)
            assert socket.close_code == 4403
    run(scenario())
    assert_refused(port, s.world.group.id, s.owner)


def test_after_a_lost_redis_subscription_a_catch_up_brings_the_head(port):
    s = Scenario()

    async def scenario():
        async with page_socket(port, s.world.group.id, s.owner) as socket:
            await signal(socket)
            assert await in_thread(kill_hub_subscriptions, port) >= 1
            await in_thread(create_missions, s, 1)  # most likely pushed while nobody listens
            # No further commit: the reconnect alone brings the head.
            received = await signals_until_quiet(socket, quiet=3)
            return received
    received = run(scenario())
    catch_ups = [frame for frame in received if "data-catch-up" in frame]
    assert catch_ups and catch_ups[-1]["data-sequence"] == str(s.world.head)
