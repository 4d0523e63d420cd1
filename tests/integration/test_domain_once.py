"""A command's JSON domain check (domain_problem: depth, integers, U+0000, surrogates) runs
once per command, in its transport (HTTP's read_json, the WebSocket's frame), not again
in the pipeline's check_envelope, and a body its bytes prove within the domain is not
walked at all (canonical.loads_in_domain). The refusals stay what they were: where the
transport's limit (MW_MAX_JSON_DEPTH) is above the envelope's own (64), the envelope is
walked again and refused as before."""

import asyncio
import json

import pytest
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from apps.api import views
from apps.delivery import consumer
from apps.delivery.origin import AgentFriendlyOriginValidator
from apps.ledger import envelope as envelopes
from apps.ledger import publish
from mission_weave.protocol import canonical
from mission_weave.routing import websocket_urlpatterns
from tests.support import Scenario

APP = AgentFriendlyOriginValidator(URLRouter(websocket_urlpatterns))


@pytest.fixture
def walks(monkeypatch):
    """{where: how many times domain_problem walked a value there}."""
    counted = {"transport": 0, "envelope": 0}

    def counting(where):
        def walk(value, max_depth=canonical.MAX_DEPTH):
            counted[where] += 1
            return canonical.domain_problem(value, max_depth)
        return walk

    monkeypatch.setattr(views, "domain_problem", counting("transport"))
    monkeypatch.setattr(consumer, "domain_problem", counting("transport"))
    monkeypatch.setattr(envelopes, "domain_problem", counting("envelope"))
    return counted


def deep(levels: int) -> dict:
    value: dict = {"leaf": 1}
    for _ in range(levels):
        value = {"n": value}
    return value


def mission_create(s: Scenario, **extra) -> dict:
    return s.c.envelope("mission.create", {
        "title": "t", "ownerId": s.owner.principal, "coordinatorId": s.c.principal, **extra})


@pytest.mark.django_db
def test_an_ordinary_command_over_http_is_not_walked(walks):
    s = Scenario()
    walks.update(transport=0, envelope=0)

    response = s.c.post(mission_create(s))

    assert response.status_code == 200, response.json()
    assert walks == {"transport": 0, "envelope": 0}


@pytest.mark.django_db
def test_a_command_the_bytes_cannot_prove_is_walked_once(walks):
    s = Scenario()
    walks.update(transport=0, envelope=0)

    response = s.c.post(mission_create(s, title="a \u0000 b"))  # written \u0000: walked

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "VALIDATION_ERROR"
    assert error["message"] == "the body at body.title: the text contains U+0000"
    assert walks == {"transport": 1, "envelope": 0}


@pytest.mark.django_db
def test_above_the_envelopes_own_depth_the_envelope_is_still_refused(settings, walks):
    s = Scenario()
    settings.MW_MAX_JSON_DEPTH = 100  # the transport lets 70 levels through; 64 do not
    head = s.world.head

    response = s.c.post(mission_create(s, budgets=deep(70)))

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "VALIDATION_ERROR"
    assert error["message"].startswith("command envelope: body.budgets.n")
    assert error["message"].endswith(": nested deeper than 64 levels")
    # The transport's bytes proved it within its 100 levels; the envelope was walked.
    assert walks == {"transport": 0, "envelope": 1}
    assert s.world.head == head


@pytest.mark.django_db
def test_the_mark_covers_only_its_own_envelope():
    s = Scenario()
    envelope = mission_create(s, title="a \u0000 b")
    other = json.loads(json.dumps(envelope))
    group = s.world.group.id

    with envelopes.domain_checked(other, 64), pytest.raises(Exception) as refused:
        envelopes.check_envelope(envelope, group)  # not the object checked: walked
    assert "U+0000" in str(refused.value)
    with envelopes.domain_checked(envelope, 65), pytest.raises(Exception) as refused:
        envelopes.check_envelope(envelope, group)  # checked to a depth above 64: walked
    assert "U+0000" in str(refused.value)
    with envelopes.domain_checked(envelope, 64):
        envelopes.check_envelope(envelope, group)  # its transport's word is taken
    with pytest.raises(Exception) as refused:
        envelopes.check_envelope(envelope, group)  # the mark ended with its block
    assert "U+0000" in str(refused.value)


@pytest.mark.django_db(transaction=True)
def test_a_command_over_the_websocket_is_walked_at_most_once(settings, monkeypatch, walks):
    s = Scenario()
    settings.REDIS_URL = ""  # the consumer on this test's loop, its hub without Redis
    monkeypatch.setattr(publish, "_server_loop", None)
    ordinary, nul = mission_create(s), mission_create(s, title="a \u0000 b")

    async def scenario():
        socket = WebsocketCommunicator(APP, "/ws/v1/", headers=[
            (b"authorization", f"Bearer {s.c.token}".encode())])
        assert (await socket.connect())[0]
        answers, counts = [], []
        for command in (ordinary, nul):
            walks.update(transport=0, envelope=0)
            await socket.send_json_to({"op": "COMMAND", "command": command})
            answers.append(await socket.receive_json_from(timeout=10))
            counts.append(dict(walks))
        await socket.disconnect()
        return answers, counts

    (accepted, refused), counts = asyncio.run(scenario())

    assert accepted["op"] == "RESULT", accepted
    assert refused["code"] == "VALIDATION_ERROR"
    assert refused["message"] == "the frame at command.body.title: the text contains U+0000"
    assert counts == [{"transport": 0, "envelope": 0}, {"transport": 1, "envelope": 0}]
