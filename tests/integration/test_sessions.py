"""Agent sessions (PROTOCOL §1, seed §11.3) through the HTTP API on PostgreSQL.

Epochs grow by one per open, a new session supersedes the old token, a nonce opens
one session only, the token is stored hashed, and opening a replacement session
revokes the agent's active leases in every Group before the call returns.
"""

import uuid
from datetime import timedelta

import pytest
import time_machine
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.db import connection
from django.test import Client

from apps.identity import registry
from apps.identity.models import Agent, AgentSession
from apps.identity.principals import token_hash
from mission_weave.protocol.canonical import sign
from mission_weave.protocol.timefmt import format_time, parse_time
from tests.support import Actor, Scenario, assert_error, now


@pytest.fixture
def s(scenario):
    return scenario




def bearer(token: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def events_after(world, actor, after: int) -> list:
    response = actor.client.get(f"/api/v1/groups/{world.group.id}/events?after={after}",
                                **bearer(actor.token))
    assert response.status_code == 200, response.json()
    return response.json()["events"]


def same_agent_in(actor: Actor, world) -> Actor:
    """The same agent (key, token, client) acting in another Group it was admitted to."""
    return Actor(actor.principal, actor.client, world, key=actor.key, key_id=actor.key_id,
                 token=actor.token, session_epoch=actor.session_epoch)


def reopen(actor: Actor, *aliases: Actor) -> dict:
    response = actor.open_session()
    assert response.status_code == 201, response.json()
    for alias in aliases:
        alias.token, alias.session_epoch = actor.token, actor.session_epoch
    return response.json()


# --- opening sessions ------------------------------------------------------------------------

def test_opening_answers_the_session_shape(s):
    response = s.w1.open_session()
    assert response.status_code == 201
    body = response.json()
    assert set(body) == {"sessionId", "sessionEpoch", "token", "expiresAt"}
    assert isinstance(body["token"], str) and len(body["token"]) >= 32
    assert body["expiresAt"].endswith("Z") and parse_time(body["expiresAt"]) > now()


def test_session_epochs_increase_by_one_per_open(s):
    first = s.w1.session_epoch
    epochs = [reopen(s.w1)["sessionEpoch"] for _ in range(3)]
    assert epochs == [first + 1, first + 2, first + 3]
    assert Agent.objects.get(id=s.w1.name).session_epoch == first + 3
    assert sorted(AgentSession.objects.filter(agent_id=s.w1.name)
                  .values_list("epoch", flat=True)) == list(range(1, first + 4))


def test_a_new_session_supersedes_the_old_token(s):
    old = s.w1.token
    assert s.w1.get(f"missions/{s.mission_id}").status_code == 200
    reopen(s.w1)
    path = f"/api/v1/groups/{s.world.group.id}/missions/{s.mission_id}"
    assert_error(s.w1.client.get(path, **bearer(old)), 401, "STALE_SESSION")
    assert s.w1.client.get(path, **bearer(s.w1.token)).status_code == 200
    assert AgentSession.objects.filter(agent_id=s.w1.name, superseded_at=None).count() == 1


def test_the_old_session_epoch_is_refused_on_commands(s):
    old_epoch = s.w1.session_epoch
    reopen(s.w1)
    item_id = s.authorize()
    head = s.world.head
    assert_error(s.w1.send("conversation.post", {"kind": "message", "text": "hi"},
                           workItemId=item_id, sessionEpoch=old_epoch), 401, "STALE_SESSION")
    assert s.world.head == head


def test_a_nonce_opens_one_session_only(s):
    nonce = f"nonce-{uuid.uuid4().hex}"
    assert s.w1.open_session(nonce=nonce).status_code == 201
    epoch, token = s.w1.session_epoch, s.w1.token
    assert_error(s.w1.open_session(nonce=nonce), 401, "NONCE_REUSED")
    assert_error(s.w1.open_session(nonce=nonce), 401, "NONCE_REUSED")
    assert Agent.objects.get(id=s.w1.name).session_epoch == epoch
    assert s.w1.token == token
    assert s.w1.get(f"missions/{s.mission_id}").status_code == 200


def test_a_refused_session_request_changes_nothing(s):
    epoch = Agent.objects.get(id=s.w1.name).session_epoch
    sessions = AgentSession.objects.count()
    stale = format_time(now() - timedelta(seconds=301 + 60))
    assert_error(s.w1.open_session(issuedAt=stale), 401, "CLOCK_SKEW")
    assert_error(s.w1.open_session(keyId=s.w2.key_id), 401, "INVALID_SIGNATURE")
    assert_error(s.w1.open_session(nonce="short"), 400, "VALIDATION_ERROR")
    assert Agent.objects.get(id=s.w1.name).session_epoch == epoch
    assert AgentSession.objects.count() == sessions


def test_a_session_signed_by_another_key_is_refused(s):
    request = {"agentId": s.w1.name, "keyId": s.w1.key_id, "nonce": uuid.uuid4().hex,
               "issuedAt": format_time(now())}
    forged = sign(request, Ed25519PrivateKey.generate(), s.w1.key_id)
    response = s.w1.client.post("/api/v1/sessions", forged, content_type="application/json")
    assert_error(response, 401, "INVALID_SIGNATURE")


def test_an_unknown_agent_cannot_open_a_session(s):
    ghost = Actor("agent:ghost-" + s.world.group.slug, Client(), s.world,
                  key=Ed25519PrivateKey.generate(), key_id=f"ghost-{s.world.group.slug}#1")
    assert_error(ghost.open_session(), 401, "UNAUTHENTICATED")


def test_an_expired_session_is_unauthenticated(s, settings):
    path = f"/api/v1/groups/{s.world.group.id}/missions/{s.mission_id}"
    with time_machine.travel(now() + timedelta(seconds=settings.MW_SESSION_TTL_SECONDS + 5),
                             tick=False):
        assert_error(s.w1.client.get(path, **bearer(s.w1.token)), 401, "UNAUTHENTICATED")


def test_the_token_is_stored_hashed(s):
    token = reopen(s.w1)["token"]
    row = AgentSession.objects.get(agent_id=s.w1.name, superseded_at=None)
    assert row.token_hash == token_hash(token) != token
    table = AgentSession._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT row_to_json(t)::text FROM {table} t")
        rows = [r[0] for r in cursor.fetchall()]
    assert rows and not any(token in text for text in rows)


# --- a replacement session revokes the agent's leases (§11.3) ---------------------------------

def test_a_new_session_revokes_active_leases_in_every_group_before_it_returns(s):
    other = Scenario()
    registry.add_member(other.world.group, s.w1.principal, ["worker"])
    w1_there = same_agent_in(s.w1, other.world)

    here_id, here_started = s.running(s.w1)
    there_id, there_started = other.running(w1_there)
    queued_id = s.authorize()  # owned by w1 but not started: nothing to revoke
    s.offer(queued_id, s.w1)
    s.accept(queued_id, s.w1)
    others_id, _others_started = s.running(s.w2)  # another agent's lease: untouched
    before = {item: s.item(item) for item in (here_id, queued_id, others_id)}
    before[there_id] = other.item(there_id)
    head_here, head_there = s.world.head, other.world.head

    reopen(s.w1, w1_there)

    for world, actor, item_id, started, head in (
            (s.world, s.c, here_id, here_started, head_here),
            (other.world, other.c, there_id, there_started, head_there)):
        events = events_after(world, actor, head)
        assert [(e["type"], e["workItemId"]) for e in events] == [("lease.revoked", item_id)]
        assert events[0]["data"]["leaseId"] == started["leaseId"]
        assert events[0]["data"]["reason"]
        assert events[0]["actor"] == "system"
        item = actor.client.get(f"/api/v1/groups/{world.group.id}/work-items/{item_id}",
                                **bearer(actor.token)).json()
        assert item["state"] == "queued"
        assert item["lease"] is None
        assert item["owner"] == before[item_id]["owner"]
        assert item["ownershipEpoch"] == before[item_id]["ownershipEpoch"]
        assert item["startBy"] is not None and parse_time(item["startBy"]) > now()
    assert s.item(queued_id) == before[queued_id]
    assert s.item(others_id) == before[others_id]
    assert s.world.head == head_here + 1 and other.world.head == head_there + 1

    # The new session starts them again, each under a new lease id.
    for scenario, worker, item_id, started in ((s, s.w1, here_id, here_started),
                                               (other, w1_there, there_id, there_started)):
        restarted = scenario.start(item_id, worker)
        assert restarted["leaseId"] != started["leaseId"]
        assert restarted["ownershipEpoch"] == started["ownershipEpoch"]
        assert scenario.item(item_id)["lease"]["id"] == restarted["leaseId"]


def test_the_revoked_lease_is_stale_for_the_new_session(s):
    item_id, _started = s.running(s.w1)
    old = s.lease_fields(item_id)
    reopen(s.w1)
    head = s.world.head
    assert_error(s.w1.send("work.progress", {"phase": "still going"}, **old), 409, "STALE_LEASE")
    assert s.world.head == head


def test_the_old_token_cannot_use_the_lease_after_replacement(s):
    item_id, _ = s.running(s.w1)
    fields = s.lease_fields(item_id)
    old_token, old_epoch = s.w1.token, s.w1.session_epoch
    envelope = s.w1.envelope("work.progress", {"phase": "from the old runtime"}, **fields)
    reopen(s.w1)
    head = s.world.head
    s.w1.token, s.w1.session_epoch = old_token, old_epoch
    assert_error(s.w1.post(envelope), 401, "STALE_SESSION")
    assert s.world.head == head


def test_a_session_without_leases_appends_nothing(s):
    heads = s.world.head
    reopen(s.w1)
    reopen(s.w2)
    assert s.world.head == heads


def test_a_retry_from_the_previous_session_gets_its_original_answer(s):
    item_id = s.authorize()
    envelope = s.c.envelope("work.cancel", {"reason": "scope changed"}, workItemId=item_id)
    first = s.c.post(envelope)
    assert s.c.open_session().status_code == 201
    head = s.world.head

    again = s.c.post(envelope)

    assert again.status_code == 200
    assert again.json() == {**first.json(), "duplicate": True}
    assert s.world.head == head


def test_a_late_retry_gets_its_original_answer(s):
    item_id = s.authorize()
    envelope = s.c.envelope("work.cancel", {"reason": "scope changed"}, workItemId=item_id)
    first = s.c.post(envelope)

    with time_machine.travel(now() + timedelta(minutes=10), tick=False):
        again = s.c.post(envelope)

    assert again.json() == {**first.json(), "duplicate": True}


def test_a_new_command_from_the_previous_session_is_still_stale(s):
    item_id = s.authorize()
    envelope = s.c.envelope("work.cancel", {"reason": "scope changed"}, workItemId=item_id)
    assert s.c.open_session().status_code == 201
    head = s.world.head

    response = s.c.post(envelope)

    assert response.json()["error"]["code"] == "STALE_SESSION"
    assert s.world.head == head
