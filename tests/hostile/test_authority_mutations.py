"""Authority follows the object (DESIGN.md; PROTOCOL §2): a mutation suite over HTTP and
over the WebSocket (tests/hostile/mutations.py has the world, the bases, the mutations and
the oracle).

For every command type and every role that may send it, a base envelope from a principal
of Mission m1 that the server accepts as it is -- proved over HTTP on the unchanged world
before its mutations run -- and then each field of it that names an object re-pointed at
an id that names nothing, an object of another Mission of the Group, an object of another
Group, plus the compound shapes of issue 24's attacks. A mutation that names a different
object is refused with a 4xx PROTOCOL code and appends nothing to any Group (the heads of
the home, the other and the third Group before and after); what PROTOCOL lets the sender
name anyway (a fresh id for what it creates, another Mission's object for a member's
group-wide command) may pass, and then names only that object's Mission. Never a 5xx.
About 550 cases over HTTP and 510 over the WebSocket at this writing (each prints its own).

Left alone: Evidence `subject` (free text naming a deliverable of the contract, which
PROTOCOL gives no object of the Group), a contract's `dependencies` (the contract tests'),
a Conversation's `messageId` and `resolves` (ids within one WorkItem's Conversation), and
`parentWorkItemId`, which no command carries.

Over HTTP every case, the base's proof included, runs in a savepoint rolled back after it,
on one committed world for the module. Over the WebSocket the consumer decides on threads
of its own, which see only what is committed: the cases run on a world of their own, every
case that must be refused (the `free` ones would commit what they rightly do, and the bases
are proved over HTTP), and a case that wrongly appends is a failure after which the world is
built anew, so that it cannot hide the cases after it. Both print their counts."""

import asyncio
import json
import threading
from collections import Counter
from http.cookies import SimpleCookie

import pytest
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.db import connections, transaction
from django.test import Client, override_settings

from apps.delivery.origin import AgentFriendlyOriginValidator
from apps.ledger import publish
from mission_weave.core.commands import COMMAND_TYPES, ROLES
from mission_weave.routing import websocket_urlpatterns
from tests.hostile import mutations as mx
from tests.hostile.conftest import FAST_HASHER

APP = AgentFriendlyOriginValidator(URLRouter(websocket_urlpatterns))


@pytest.fixture(scope="module")
def world(cast, django_db_blocker, hostile_blobs):
    with django_db_blocker.unblock(), override_settings(
            MW_BLOB_ROOT=hostile_blobs, MW_BLOB_STORAGE="filesystem",
            PASSWORD_HASHERS=FAST_HASHER):
        return mx.World(cast)


def test_every_command_type_and_role_has_a_base(world, db):
    """A new command type, or a role given to one, fails here until it has a base."""
    keys = mx.base_keys()
    for type_ in COMMAND_TYPES:
        for role in ROLES[type_]:
            if (type_, role) not in mx.NOT_SENT:
                assert any(k[:2] == (type_, role) for k in keys), (type_, role)
    for key in keys:
        b = mx.base(world, *key)
        assert b.document["type"] == key[0] and mx.mutations(world, b), key


# -- HTTP -------------------------------------------------------------------------------------

def client_for(actor) -> Client:
    """The actor's own client (a human's login copied), whose 5xx is an answer, not an
    exception."""
    client = Client(raise_request_exception=False)
    if actor.key is None:
        client.cookies = SimpleCookie(actor.client.cookies.output(header="", sep=";"))
    return client


def over_http(w: mx.World, actor, document: dict) -> tuple:
    """(status, answer, whether a head moved) of one command, in a savepoint rolled back."""
    headers = {"HTTP_AUTHORIZATION": f"Bearer {actor.token}"} if actor.token else {}
    with transaction.atomic():
        before = w.heads()
        response = client_for(actor).post(
            f"/api/v1/groups/{w.cast.home.group.id}/commands",
            json.dumps(mx.sign(actor, mx.fresh(document))), content_type="application/json",
            **headers)
        moved = w.heads() != before
        transaction.set_rollback(True)
    try:
        answer = response.json()
    except ValueError:
        answer = {"body": response.content[:300]}
    return response.status_code, answer, moved


def test_authority_mutations_over_http(world, db, report):
    failures, codes, cases, bases = [], Counter(), 0, 0
    for key in mx.base_keys():
        b = mx.base(world, *key)
        status, answer, _ = over_http(world, b.actor, b.document)
        bases += 1
        if status != 200:
            failures.append(f"{b.name}: the base itself is refused {status} {answer}")
            continue
        for m in mx.mutations(world, b):
            cases += 1
            status, answer, moved = over_http(world, b.actor, m.document)
            codes[(m.expect, mx.code_of(status, answer))] += 1
            wrong = mx.judge(m.expect, m.missions, status, answer, moved)
            if wrong:
                failures.append(f"{b.name}: {m.label}: {wrong}")

    report(f"authority mutations: {cases} cases over HTTP ({bases} bases of "
           f"{len(COMMAND_TYPES)} command types, each proved first); answers: "
           + ", ".join(f"{e} {c} x{n}" for (e, c), n in sorted(codes.items())))
    assert not failures, f"{len(failures)} of {cases} cases:\n" + "\n".join(failures)


# -- WebSocket --------------------------------------------------------------------------------

@pytest.fixture
def embedded(settings, monkeypatch):
    """No Redis: the test's event loop plays the server's, commits reach its hub."""
    settings.REDIS_URL = ""
    monkeypatch.setattr(publish, "_server_loop", None)


def communicator(actor) -> WebsocketCommunicator:
    if actor.token:
        headers = [(b"authorization", f"Bearer {actor.token}".encode())]
    else:
        cookie = f"sessionid={actor.client.cookies['sessionid'].value}"
        headers = [(b"cookie", cookie.encode()), (b"origin", b"http://testserver")]
    return WebsocketCommunicator(APP, "/ws/v1/", headers=headers)


def over_websocket(w: mx.World, actor, document: dict) -> tuple:
    """(status, answer, whether a head moved) of one COMMAND frame: an ERROR frame's code
    stands for its HTTP status, as the HTTP answer would."""
    command = mx.sign(actor, mx.fresh(document))

    async def talk():
        socket = communicator(actor)
        connected, close_code = await socket.connect()
        if not connected:
            return {"op": "REFUSED", "closeCode": close_code}
        try:
            await socket.send_json_to({"op": "COMMAND", "command": command})
            return await socket.receive_json_from(timeout=10)
        finally:
            await socket.disconnect()

    before = w.heads()
    frame = asyncio.run(talk())
    moved = w.heads() != before
    if frame.get("op") == "RESULT":
        return 200, frame, moved
    code = frame.get("code")
    answer = {"error": {"code": code, "message": frame.get("message"),
                        "details": frame.get("details")}}
    if frame.get("commandId") != command["id"]:
        return 599, {"frame": frame}, moved  # not the answer to this command
    return mx.PROTOCOL_CODES.get(code, 599), answer, moved


@pytest.fixture(scope="module")
def ws_world(cast, django_db_blocker, hostile_blobs):
    """A world of the WebSocket cases' own, committed (built after the module's Cast)."""
    with django_db_blocker.unblock(), override_settings(
            MW_BLOB_ROOT=hostile_blobs, MW_BLOB_STORAGE="filesystem",
            PASSWORD_HASHERS=FAST_HASHER):
        return mx.World()


def built_apart() -> mx.World:
    """A new world, committed: built on a thread of its own (its own connection, outside
    the test's transaction), as the consumer's threads must see it."""
    built = {}

    def build():
        try:
            built["world"] = mx.World()
        finally:
            connections.close_all()

    thread = threading.Thread(target=build)
    thread.start()
    thread.join()
    return built["world"]


@pytest.mark.django_db
def test_authority_mutations_over_websocket(ws_world, embedded, report):
    failures, codes, cases, rebuilt = [], Counter(), 0, 0
    world = ws_world
    for key in mx.base_keys():
        b = mx.base(world, *key)
        found, index = mx.mutations(world, b), 0
        while index < len(found):
            m = found[index]
            index += 1
            if m.expect != mx.REFUSE:
                continue
            cases += 1
            status, answer, moved = over_websocket(world, b.actor, m.document)
            codes[mx.code_of(status, answer)] += 1
            wrong = mx.judge(m.expect, m.missions, status, answer, moved)
            if wrong:
                failures.append(f"{b.name}: {m.label}: {wrong}")
            if moved:  # what it appended may refuse the next cases for other reasons
                world, rebuilt = built_apart(), rebuilt + 1
                b = mx.base(world, *key)
                found = mx.mutations(world, b)

    report(f"authority mutations: {cases} cases over WebSocket (every case to be "
           f"refused; world rebuilt {rebuilt} times); answers: "
           + ", ".join(f"{c} x{n}" for c, n in sorted(codes.items())))
    assert not failures, f"{len(failures)} of {cases} cases:\n" + "\n".join(failures)
