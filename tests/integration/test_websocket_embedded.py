"""The delivery consumer in this process (channels' WebsocketCommunicator), as the
embedded mode runs it: no Redis, commits handed straight to the process's hub."""

import asyncio

import pytest
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from apps.delivery.hub import HUB
from apps.delivery.origin import AgentFriendlyOriginValidator
from apps.identity import registry
from apps.ledger import publish
from mission_weave.routing import websocket_urlpatterns
from tests.integration.wslive import in_thread
from tests.support import Scenario

pytestmark = pytest.mark.django_db(transaction=True)

APP = AgentFriendlyOriginValidator(URLRouter(websocket_urlpatterns))


@pytest.fixture
def embedded(settings, monkeypatch):
    """No Redis; the test's event loop plays the server's."""
    settings.REDIS_URL = ""
    monkeypatch.setattr(publish, "_server_loop", None)


def communicator(token=None, origin=None) -> WebsocketCommunicator:
    headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
    if origin:
        headers.append((b"origin", origin.encode()))
    return WebsocketCommunicator(APP, "/ws/v1/", headers=headers)


def make_items(s: Scenario, count: int) -> None:
    for k in range(count):
        s.c.ok("mission.create", {"title": f"m{k}", "ownerId": s.owner.principal,
                                  "coordinatorId": s.c.principal})


def test_without_credentials_or_from_a_foreign_origin_the_handshake_is_refused(embedded):
    s = Scenario()

    async def scenario():
        for socket in (communicator(), communicator("bad-token"),
                       communicator(s.w1.token, origin="http://evil.example")):
            connected, _code = await socket.connect()
            assert not connected
        socket = communicator(s.w1.token, origin="http://127.0.0.1:8000")
        connected, _ = await socket.connect()
        assert connected
        await socket.disconnect()
    asyncio.run(scenario())


def test_embedded_mode_delivers_live_events_and_membership_changes(embedded):
    s = Scenario()
    head = s.world.head

    async def scenario():
        publish.remember_server_loop(asyncio.get_running_loop())
        socket = communicator(s.w1.token)
        assert (await socket.connect())[0]
        await socket.send_json_to({"op": "SUBSCRIBE", "groupId": s.world.group.id,
                                   "afterSequence": 0})
        assert [(await socket.receive_json_from())["event"]["sequence"]
                for _ in range(head)] == list(range(1, head + 1))
        await in_thread(make_items, s, 3)  # no Redis: the commit reaches the hub directly
        live = [await socket.receive_json_from(timeout=5) for _ in range(3)]
        assert [f["event"]["sequence"] for f in live] == [head + 1, head + 2, head + 3]

        await in_thread(registry.remove_member, s.world.group, s.w1.principal)
        error = await socket.receive_json_from(timeout=5)
        assert (error["code"], error["groupId"]) == ("NOT_A_MEMBER", s.world.group.id)
        await in_thread(make_items, s, 1)
        assert await socket.receive_nothing(timeout=0.5)
        assert s.world.group.id not in HUB.local
        await socket.disconnect()
    asyncio.run(scenario())


def test_a_slow_reader_falls_back_to_the_log_and_still_gets_every_event_once(embedded,
                                                                               monkeypatch):
    from apps.delivery import consumer

    monkeypatch.setattr(consumer, "MAX_QUEUED", 0)  # every push overflows
    s = Scenario()
    head = s.world.head

    async def scenario():
        publish.remember_server_loop(asyncio.get_running_loop())
        socket = communicator(s.w1.token)
        assert (await socket.connect())[0]
        await socket.send_json_to({"op": "SUBSCRIBE", "groupId": s.world.group.id,
                                   "afterSequence": head})
        await in_thread(make_items, s, 12)
        received = [(await socket.receive_json_from(timeout=5))["event"]["sequence"]
                    for _ in range(12)]
        assert received == list(range(head + 1, head + 13))
        assert await socket.receive_nothing(timeout=0.5)
        await socket.disconnect()
    asyncio.run(scenario())


def test_a_frame_over_the_body_limit_is_refused_and_the_connection_stays_usable(embedded,
                                                                                settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000  # MW_MAX_BODY_BYTES (daphne caps at 1 MiB)
    s = Scenario()
    head = s.world.head

    async def scenario():
        socket = communicator(s.w1.token)
        assert (await socket.connect())[0]
        # 400 characters, 800 bytes: under the limit, but not valid JSON.
        await socket.send_to(text_data="é" * 400)
        assert (await socket.receive_json_from())["code"] == "VALIDATION_ERROR"
        await socket.send_to(text_data='{"op": "ACK", "pad": "' + "é" * 490 + '"}')
        error = await socket.receive_json_from()
        assert (error["op"], error["code"]) == ("ERROR", "PAYLOAD_TOO_LARGE")
        await socket.send_json_to({"op": "SUBSCRIBE", "groupId": s.world.group.id,
                                   "afterSequence": head - 1})
        assert (await socket.receive_json_from())["event"]["sequence"] == head
        await socket.disconnect()
    asyncio.run(scenario())
