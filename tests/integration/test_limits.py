"""Limits that keep one client from hurting the rest (mission_weave/runtime/rate_limits.py,
docs/operations.md "Limits"), through the whole HTTP stack (Django's test client) and the
WebSocket consumer in this process (channels' communicator), counted in this test run's
Redis. Each test names its own limits and a client address of its own, so no count is
shared with another test."""

import asyncio
import json
import uuid

import pytest
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.test import Client

from apps.delivery.origin import AgentFriendlyOriginValidator
from apps.identity import registry
from apps.identity.models import Agent
from apps.ledger import publish
from mission_weave.protocol.errors import ProtocolError
from mission_weave.routing import websocket_urlpatterns
from mission_weave.runtime import rate_limits
from tests.support import Scenario, World

APP = AgentFriendlyOriginValidator(URLRouter(websocket_urlpatterns))


def address() -> str:
    """A client address of this test's own (a documentation prefix: no traffic goes there,
    it only names the client to the limiter)."""
    return f"2001:db8::{uuid.uuid4().hex[:4]}:{uuid.uuid4().hex[:4]}"


def mission(s: Scenario, actor=None, **headers):
    actor = actor or s.c
    return actor.client.post(
        f"/api/v1/groups/{s.world.group.id}/commands",
        json.dumps(actor.envelope("mission.create", {
            "title": "t", "ownerId": s.owner.principal, "coordinatorId": s.c.principal})),
        content_type="application/json",
        **({"HTTP_AUTHORIZATION": f"Bearer {actor.token}"} if actor.token else {}), **headers)


def assert_rate_limited(response) -> dict:
    assert response.status_code == 429, response.content
    error = response.json()["error"]
    assert error["code"] == "RATE_LIMITED"
    assert int(response["Retry-After"]) == error["details"]["retryAfter"] >= 1
    return error


# --- commands ------------------------------------------------------------------------------

@pytest.mark.django_db
def test_commands_over_the_principals_limit_are_refused_and_change_nothing(settings):
    s = Scenario()
    settings.MW_RATE_COMMANDS_PER_PRINCIPAL = "3/minute"
    accepted = [mission(s).status_code for _ in range(3)]
    head = s.world.head

    refused = mission(s)

    assert accepted == [200, 200, 200]
    error = assert_rate_limited(refused)
    assert 1 <= error["details"]["retryAfter"] <= 60
    assert error["details"] == {**error["details"], "limit": "3/minute", "scope": "principal"}
    assert s.world.head == head


@pytest.mark.django_db
def test_one_principal_flooding_leaves_another_principals_commands_alone(settings):
    s = Scenario()
    settings.MW_RATE_COMMANDS_PER_PRINCIPAL = "5/minute"

    flood = [mission(s).status_code for _ in range(40)]
    others = [mission(s, s.owner).status_code for _ in range(5)]

    assert flood.count(200) == 5 and flood.count(429) == 35
    assert others == [200] * 5


@pytest.mark.django_db
def test_a_limit_of_zero_is_no_limit(settings):
    s = Scenario()
    settings.MW_RATE_COMMANDS_PER_PRINCIPAL = "0"
    settings.MW_RATE_COMMANDS_PER_IP = "0"

    assert [mission(s).status_code for _ in range(8)] == [200] * 8


@pytest.mark.django_db
def test_commands_over_the_addresss_limit_are_refused_before_the_token_is_read(settings):
    s = Scenario()
    settings.MW_RATE_COMMANDS_PER_IP = "2/minute"
    here, elsewhere = address(), address()
    forged = Client()

    first = [mission(s, REMOTE_ADDR=here).status_code for _ in range(2)]
    # Over the limit, a bad token is not even looked at: 429, not 401.
    refused = forged.post(f"/api/v1/groups/{s.world.group.id}/commands", "{}",
                          content_type="application/json", HTTP_AUTHORIZATION="Bearer forged",
                          REMOTE_ADDR=here)
    other = mission(s, REMOTE_ADDR=elsewhere)

    assert first == [200, 200]
    assert assert_rate_limited(refused)["details"]["scope"] == "ip"
    assert other.status_code == 200


# --- reads ---------------------------------------------------------------------------------

@pytest.mark.django_db
def test_reads_are_limited_per_principal_and_per_address(settings):
    s = Scenario()
    settings.MW_RATE_READS_PER_PRINCIPAL = "2/minute"
    settings.MW_RATE_READS_PER_IP = "5/minute"  # a read refused for its principal counts
    here = address()

    def read(actor):
        return actor.client.get(f"/api/v1/groups/{s.world.group.id}/missions",
                                HTTP_AUTHORIZATION=f"Bearer {actor.token}", REMOTE_ADDR=here)

    w1 = [read(s.w1).status_code for _ in range(2)]
    w1_refused = read(s.w1)
    w2 = [read(s.w2).status_code for _ in range(2)]
    address_refused = read(s.c)  # the address's sixth read; c's first

    assert w1 == w2 == [200, 200]
    assert assert_rate_limited(w1_refused)["details"]["scope"] == "principal"
    assert assert_rate_limited(address_refused)["details"]["scope"] == "ip"


# --- sessions ------------------------------------------------------------------------------

@pytest.mark.django_db
def test_session_openings_are_limited_per_agent_and_failed_ones_spend_nothing(settings):
    s = Scenario()
    settings.MW_RATE_SESSIONS_PER_PRINCIPAL = "2/minute"
    # Anyone can send a session request naming w1; unsigned by w1's key, it is refused
    # and leaves w1's own openings alone.
    forged = [s.w1.open_session(keyId=s.w2.key_id).status_code for _ in range(5)]
    opened = [s.w1.open_session().status_code for _ in range(2)]
    epoch = Agent.objects.get(id=s.w1.name).session_epoch

    refused = s.w1.open_session()

    assert set(forged) == {401} and opened == [201, 201]
    assert assert_rate_limited(refused)["details"]["scope"] == "principal"
    assert Agent.objects.get(id=s.w1.name).session_epoch == epoch
    assert s.w2.open_session().status_code == 201


@pytest.mark.django_db
def test_session_openings_over_the_addresss_limit_are_refused_before_the_body_is_read(settings):
    settings.MW_RATE_SESSIONS_PER_IP = "1/minute"
    here = address()
    client = Client()

    first = client.post("/api/v1/sessions", "not json", content_type="application/json",
                        REMOTE_ADDR=here)
    second = client.post("/api/v1/sessions", "not json", content_type="application/json",
                         REMOTE_ADDR=here)

    assert first.status_code == 400
    assert assert_rate_limited(second)["details"]["scope"] == "ip"


# --- the dashboard's login --------------------------------------------------------------

@pytest.mark.django_db
def test_sign_in_attempts_are_limited_per_username_then_even_the_right_password_waits(settings):
    World().human("alice-limits")
    settings.MW_RATE_LOGIN_PER_PRINCIPAL = "2/minute"
    client = Client()

    wrong = [client.post("/login/", {"username": "alice-limits", "password": "no"},
                         REMOTE_ADDR=address()).status_code for _ in range(2)]
    refused = client.post("/login/", {"username": "alice-limits", "password": "pw"},
                          REMOTE_ADDR=address())
    other = client.post("/login/", {"username": "bob-limits", "password": "no"},
                        REMOTE_ADDR=address())

    assert wrong == [200, 200]
    assert refused.status_code == 429 and int(refused["Retry-After"]) >= 1
    assert b"Too many sign-in attempts" in refused.content
    assert "_auth_user_id" not in client.session
    assert other.status_code == 200


@pytest.mark.django_db
def test_sign_in_attempts_are_limited_per_address_on_the_dashboard_and_the_admin(settings):
    settings.MW_RATE_LOGIN_PER_IP = "2/minute"
    here = address()
    client = Client()

    allowed = [client.post(path, {"username": f"u{k}", "password": "no"},
                           REMOTE_ADDR=here).status_code
               for k, path in enumerate(("/login/", "/admin/login/"))]
    refused = client.post("/admin/login/", {"username": "u3", "password": "no"},
                          REMOTE_ADDR=here)
    page = client.get("/login/", REMOTE_ADDR=here)  # showing the form is not an attempt

    assert allowed == [200, 200]
    assert refused.status_code == 429 and int(refused["Retry-After"]) >= 1
    assert page.status_code == 200


# --- the limiter's storage ---------------------------------------------------------------

@pytest.mark.django_db
def test_without_redis_each_process_counts_in_its_memory(settings):
    settings.REDIS_URL = ""
    settings.MW_RATE_SESSIONS_PER_IP = "1/minute"
    here = address()

    rate_limits.check("sessions", ip=here)
    with pytest.raises(ProtocolError) as refused:
        rate_limits.check("sessions", ip=here)

    assert refused.value.code == "RATE_LIMITED"
    assert rate_limits._counter().limiter.storage.__class__.__name__ == "MemoryStorage"


@pytest.mark.django_db
def test_when_redis_fails_requests_pass(settings, caplog):
    # Nothing listens on port 1: the storage fails at once, and the limit is not enforced.
    settings.REDIS_URL = "redis://127.0.0.1:1/2"
    settings.MW_RATE_SESSIONS_PER_IP = "1/minute"
    here = address()

    for _ in range(3):
        rate_limits.check("sessions", ip=here)

    assert "rate limits are not enforced" in caplog.text


# --- sizes ---------------------------------------------------------------------------------

@pytest.mark.django_db
def test_a_body_over_the_limit_is_payload_too_large_for_commands_and_sessions(settings):
    s = Scenario()
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2000
    head = s.world.head
    big = json.dumps(s.c.envelope("mission.create", {
        "title": "x" * 3000, "ownerId": s.owner.principal, "coordinatorId": s.c.principal}))

    command = s.c.client.post(f"/api/v1/groups/{s.world.group.id}/commands", big,
                              content_type="application/json",
                              HTTP_AUTHORIZATION=f"Bearer {s.c.token}")
    session = Client().post("/api/v1/sessions", big, content_type="application/json")

    for response in (command, session):
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "PAYLOAD_TOO_LARGE"
        assert response.json()["error"]["details"] == {"maxBytes": 2000}
    assert s.world.head == head


@pytest.mark.django_db
def test_a_body_nested_deeper_than_the_setting_is_refused(settings):
    s = Scenario()
    settings.MW_MAX_JSON_DEPTH = 5
    head = s.world.head
    deep = {"a": {"b": {"c": {"d": {"e": {"f": 1}}}}}}
    envelope = s.c.envelope("mission.create", {
        "title": "t", "ownerId": s.owner.principal, "coordinatorId": s.c.principal,
        "budgets": deep})

    response = s.c.post(envelope)

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "VALIDATION_ERROR" and "nested deeper than 5" in error["message"]
    assert s.world.head == head


@pytest.mark.django_db
def test_list_reads_answer_at_most_the_list_maximum_and_refuse_a_larger_limit(settings):
    s = Scenario()
    for _ in range(2):
        assert mission(s).status_code == 200
    settings.MW_LIST_MAX = 2
    missions = f"/api/v1/groups/{s.world.group.id}/missions"
    token = {"HTTP_AUTHORIZATION": f"Bearer {s.c.token}"}

    clamped = s.c.client.get(missions, **token).json()
    one = s.c.client.get(missions + "?limit=1", **token).json()
    too_many = s.c.client.get(missions + "?limit=3", **token)
    items = s.c.client.get(f"/api/v1/groups/{s.world.group.id}/work-items?limit=3", **token)

    assert len(clamped["missions"]) == 2 and clamped["truncated"] is True
    assert len(one["missions"]) == 1 and one["truncated"] is True
    for response in (too_many, items):
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "VALIDATION_ERROR"


@pytest.mark.django_db
def test_a_blob_over_its_limit_is_payload_too_large(settings):
    s = Scenario()
    settings.MW_BLOB_MAX_BYTES = 10
    digest = "sha256:" + "0" * 64

    response = s.w1.client.put(f"/api/v1/blobs/{digest}", b"x" * 11,
                               content_type="application/octet-stream",
                               HTTP_AUTHORIZATION=f"Bearer {s.w1.token}")

    assert response.status_code == 413
    assert response.json()["error"]["code"] == "PAYLOAD_TOO_LARGE"


# --- the WebSocket -------------------------------------------------------------------------

def communicator(token: str) -> WebsocketCommunicator:
    return WebsocketCommunicator(APP, "/ws/v1/", headers=[(b"authorization",
                                                            f"Bearer {token}".encode())])


@pytest.fixture
def embedded(settings, monkeypatch):
    """The consumer on this test's loop, its hub without Redis (test_websocket_embedded.py)."""
    settings.REDIS_URL = ""
    monkeypatch.setattr(publish, "_server_loop", None)


@pytest.mark.django_db(transaction=True)
def test_command_frames_count_against_the_principals_command_limit(settings):
    s = Scenario()
    settings.MW_RATE_COMMANDS_PER_PRINCIPAL = "2/minute"
    envelopes = [s.c.envelope("mission.create", {
        "title": f"m{k}", "ownerId": s.owner.principal, "coordinatorId": s.c.principal})
        for k in range(3)]
    assert mission(s).status_code == 200  # HTTP and WebSocket share the count
    head = s.world.head

    async def scenario():
        socket = communicator(s.c.token)
        assert (await socket.connect())[0]
        answers = []
        for envelope in envelopes[:2]:
            await socket.send_json_to({"op": "COMMAND", "command": envelope})
            answers.append(await socket.receive_json_from(timeout=10))
        await socket.disconnect()
        return answers

    result, refused = asyncio.run(scenario())

    assert result["op"] == "RESULT"
    assert refused["op"] == "ERROR" and refused["code"] == "RATE_LIMITED"
    assert refused["commandId"] == envelopes[1]["id"]
    assert refused["details"]["retryAfter"] >= 1
    assert s.world.head == head + 1


@pytest.mark.django_db(transaction=True)
def test_frames_over_the_connections_rate_are_refused_and_a_flood_is_disconnected(
        settings, embedded):
    s = Scenario()
    settings.MW_WS_FRAME_RATE = "3/minute"
    frame = json.dumps({"op": "NOPE"})

    async def scenario():
        socket = communicator(s.w1.token)
        assert (await socket.connect())[0]
        answers = []
        for _ in range(6):
            await socket.send_to(frame)
            answers.append(await socket.receive_json_from(timeout=5))
        await socket.send_to(frame)  # a fourth refusal in the window: it keeps going
        closed = await socket.receive_output(timeout=2)
        return answers[:3], answers[3:], closed

    judged, refusals, closed = asyncio.run(scenario())

    assert [r["code"] for r in judged] == ["VALIDATION_ERROR"] * 3  # within the rate
    assert [r["code"] for r in refusals] == ["RATE_LIMITED"] * 3
    assert all(r["details"]["retryAfter"] >= 1 for r in refusals)
    assert closed == {"type": "websocket.close", "code": 1008}


@pytest.mark.django_db(transaction=True)
def test_a_connection_may_subscribe_to_at_most_the_maximum_of_groups(settings, embedded):
    s = Scenario()
    settings.MW_WS_MAX_SUBSCRIPTIONS = 2
    groups = [s.world.group.id]
    for _ in range(2):
        other = World()
        registry.add_member(other.group, s.w1.principal, ["worker"])
        groups.append(other.group.id)

    async def scenario():
        socket = communicator(s.w1.token)
        assert (await socket.connect())[0]
        for group_id in groups[:2] + groups[:1]:  # subscribing again counts once
            await socket.send_json_to({"op": "SUBSCRIBE", "groupId": group_id,
                                       "afterSequence": 10**6})
        await socket.receive_nothing(timeout=0.5)
        await socket.send_json_to({"op": "SUBSCRIBE", "groupId": groups[2],
                                   "afterSequence": 0})
        refused = await socket.receive_json_from()
        await socket.disconnect()
        return refused

    refused = asyncio.run(scenario())

    assert refused["code"] == "PAYLOAD_TOO_LARGE" and refused["groupId"] == groups[2]
    assert refused["details"] == {"maxSubscriptions": 2}


@pytest.mark.django_db(transaction=True)
def test_a_frame_too_large_or_too_deep_is_refused_and_the_connection_stays(settings, embedded):
    s = Scenario()
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    settings.MW_MAX_JSON_DEPTH = 3

    async def scenario():
        socket = communicator(s.w1.token)
        assert (await socket.connect())[0]
        answers = []
        for frame in ({"op": "ACK", "cursors": [], "pad": "x" * 1000},
                      {"op": "ACK", "cursors": [[[[1]]]]},
                      {"op": "NOPE"}):
            await socket.send_json_to(frame)
            answers.append(await socket.receive_json_from())
        await socket.disconnect()
        return answers

    too_large, too_deep, still_open = asyncio.run(scenario())

    assert too_large["code"] == "PAYLOAD_TOO_LARGE"
    assert too_deep["code"] == "VALIDATION_ERROR" and "nested deeper than 3" in \
        too_deep["message"]
    assert still_open["code"] == "VALIDATION_ERROR"
