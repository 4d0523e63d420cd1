"""The authorization matrix over the WebSocket (PROTOCOL §4): the handshake, SUBSCRIBE, ACK
and COMMAND frames of every principal of the Cast, agents with their bearer token and humans
with their session cookie, through the delivery consumer in this process (channels'
WebsocketCommunicator, no Redis: commits reach the process's hub).

The consumer reads the database on threads of its own, which see only what is committed:
the module's committed Cast, and a command the oracle lets through stays in its log (the
test's own transaction, in this thread, holds nothing)."""

import asyncio

import pytest
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from apps.delivery.origin import AgentFriendlyOriginValidator
from apps.ledger import publish
from apps.ledger.models import Group
from mission_weave.routing import websocket_urlpatterns
from tests.hostile import matrix
from tests.hostile.matrix import OK, TARGETS

pytestmark = pytest.mark.django_db  # so that the test database is set up at all

APP = AgentFriendlyOriginValidator(URLRouter(websocket_urlpatterns))
PRINCIPALS = ("owner", "coordinator", "delegate", "worker", "reviewer", "observer",
              "observer_agent", "outsider", "outsider_human")  # anonymous: the handshake
SUBSCRIBE_TARGETS = (matrix.OTHER_MISSION, matrix.OTHER_GROUP)  # one's own Group, another


def ws_case_count() -> int:
    handshakes, acks = len(PRINCIPALS) + 1, len(PRINCIPALS)
    return handshakes + acks + len(PRINCIPALS) * (len(SUBSCRIBE_TARGETS)
                                                  + len(matrix.COMMAND_TYPES) * len(TARGETS))


@pytest.fixture(autouse=True)
def embedded(cast, settings, monkeypatch):
    """No Redis: the test's event loop plays the server's, commits reach its hub."""
    settings.REDIS_URL = ""
    monkeypatch.setattr(publish, "_server_loop", None)


def communicator(actor) -> WebsocketCommunicator:
    headers = []
    if actor is not None and actor.token:
        headers.append((b"authorization", f"Bearer {actor.token}".encode()))
    elif actor is not None:
        cookie = f"sessionid={actor.client.cookies['sessionid'].value}"
        headers += [(b"cookie", cookie.encode()), (b"origin", b"http://testserver")]
    return WebsocketCommunicator(APP, "/ws/v1/", headers=headers)


def exchange(actor, frames: list) -> list:
    """Connect as `actor`, send each frame and read one answer to each."""
    async def talk():
        socket = communicator(actor)
        connected, _ = await socket.connect()
        assert connected
        answers = []
        try:
            for frame in frames:
                await socket.send_json_to(frame)
                answers.append(await socket.receive_json_from(timeout=10))
        finally:
            await socket.disconnect()
        return answers
    return asyncio.run(talk())


def heads(cast) -> tuple:
    return tuple(Group.objects.filter(id__in=[cast.home.group.id, cast.other.group.id])
                 .order_by("id").values_list("head_sequence", flat=True))


def same_frame(real: dict, twin: dict, names: list) -> None:
    """A refusal about real objects reads as the one about objects that do not exist."""
    import json

    assert json.loads(matrix.unrenamed(json.dumps(twin), names)) == real


@pytest.mark.parametrize("name", (*PRINCIPALS, "anonymous"))
def test_handshake(cast, name):
    actor = cast.principals[name]

    async def connect():
        socket = communicator(actor)
        connected, _ = await socket.connect()
        if connected:
            await socket.disconnect()
        return connected

    assert asyncio.run(connect()) is (actor is not None)


@pytest.mark.parametrize("name", PRINCIPALS)
@pytest.mark.parametrize("target", SUBSCRIBE_TARGETS)
def test_subscribe(cast, name, target):
    actor = cast.principals[name]
    group_id = matrix.group_of(cast, target)
    frame = {"op": "SUBSCRIBE", "groupId": group_id, "afterSequence": 0}

    [answer] = exchange(actor, [frame])

    if target == matrix.OTHER_MISSION and cast.member_of_home(actor):
        assert answer["op"] == "EVENT" and answer["event"]["sequence"] == 1, answer
        return
    assert (answer["op"], answer["code"], answer["groupId"]) == ("ERROR", "NOT_A_MEMBER",
                                                                 group_id), answer
    names = matrix.secrets(cast, actor, target)
    [twin] = exchange(actor, [matrix.renamed(frame, names)])
    same_frame(answer, twin, names)


@pytest.mark.parametrize("name", PRINCIPALS)
def test_ack_of_another_groups_cursor(cast, name):
    """An ACK names Groups too (PROTOCOL §4): another Group's is refused as one that does
    not exist, and no Cursor is kept there."""
    from apps.delivery.models import Cursor

    actor = cast.principals[name]
    frame = {"op": "ACK", "cursors": [{"groupId": cast.other.group.id, "sequence": 1}]}

    [answer] = exchange(actor, [frame])

    assert (answer["op"], answer["code"]) == ("ERROR", "NOT_A_MEMBER"), answer
    names = matrix.secrets(cast, actor, matrix.OTHER_GROUP)
    [twin] = exchange(actor, [matrix.renamed(frame, names)])
    same_frame(answer, twin, names)
    assert not Cursor.objects.filter(group_id=cast.other.group.id).exists()


@pytest.mark.parametrize("name", PRINCIPALS)
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("type_", matrix.COMMAND_TYPES)
def test_command_frame(cast, name, target, type_):
    actor = cast.principals[name]
    _group_id, envelope = matrix.command(cast, actor, type_, target)
    status, code = matrix.expect_command(cast, actor, type_, target)
    before = heads(cast)

    [answer] = exchange(actor, [{"op": "COMMAND", "command": matrix.signed_by(actor,
                                                                              envelope)}])

    if (status, code) == OK:
        assert answer["op"] == "RESULT" and answer["events"], answer
        return
    assert (answer["op"], answer["code"], answer["commandId"]) == (
        "ERROR", code, envelope["id"]), answer
    assert heads(cast) == before
    names = [*matrix.secrets(cast, actor, target), envelope["id"]]
    twin = matrix.renamed(envelope, names)
    if type_ == "context.publish" and actor.key is not None:
        twin["body"] = matrix.signed_by(actor, twin["body"])
    [refusal] = exchange(actor, [{"op": "COMMAND", "command": matrix.signed_by(actor, twin)}])
    same_frame(answer, refusal, names)
