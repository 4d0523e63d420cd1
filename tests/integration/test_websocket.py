"""WebSocket delivery (PROTOCOL §4) against a real daphne process with the Redis hub,
through a real client (`websockets`). Commands are committed in this process; their
pushes reach the server through Redis, as another web process's would."""

import asyncio

import pytest
import redis
from django.conf import settings
from websockets.exceptions import InvalidStatus

from apps.bench.blob_throughput import daphne_pids
from apps.delivery.models import Cursor
from apps.identity import registry
from apps.ledger import feed, publish
from apps.ledger.models import Event
from tests.integration.wslive import frame, frames, in_thread, send, sequences, silence, ws
from tests.support import Scenario, World

pytestmark = pytest.mark.django_db(transaction=True)


def run(coroutine):
    return asyncio.run(coroutine)


def make_items(s: Scenario, count: int) -> list:
    """`count` commands of one event each; their event documents."""
    return [s.c.ok("mission.create", {"title": f"m{k}", "ownerId": s.owner.principal,
                                      "coordinatorId": s.c.principal})[0]
            for k in range(count)]


# -- handshake ------------------------------------------------------------------------

def test_a_handshake_without_or_with_a_bad_token_is_refused(port):
    async def scenario():
        for token in (None, "not-a-token"):
            with pytest.raises(InvalidStatus) as refused:
                async with ws(port, token):
                    pass
            assert refused.value.response.status_code == 403
    run(scenario())


def test_a_superseded_session_token_is_refused(port):
    s = Scenario()
    old = s.w1.token
    assert s.w1.open_session().status_code == 201

    async def scenario():
        with pytest.raises(InvalidStatus):
            async with ws(port, old):
                pass
    run(scenario())


def test_an_agent_without_origin_and_a_human_with_its_session_cookie_are_accepted(port):
    s = Scenario()
    head = s.world.head
    cookie = f"sessionid={s.owner.client.cookies['sessionid'].value}"

    async def scenario():
        async with ws(port, s.w1.token) as agent:  # websockets sends no Origin
            await send(agent, {"op": "SUBSCRIBE", "groupId": s.world.group.id,
                               "afterSequence": 0})
            assert sequences(await frames(agent, head)) == list(range(1, head + 1))
        async with ws(port, Cookie=cookie, Origin=f"http://127.0.0.1:{port}") as human:
            await send(human, {"op": "SUBSCRIBE", "groupId": s.world.group.id,
                               "afterSequence": head - 1})
            assert sequences([await frame(human)]) == [head]
        # A cross-site page riding on the human's cookie is refused.
        with pytest.raises(InvalidStatus) as refused:
            async with ws(port, Cookie=cookie, Origin="http://evil.example"):
                pass
        assert refused.value.response.status_code == 403
    run(scenario())


# -- subscribe, replay, live, gaps ------------------------------------------------------

def test_subscribe_replays_from_the_log_then_streams_live_in_order(port):
    s = Scenario()
    make_items(s, 3)
    head = s.world.head

    async def scenario():
        async with ws(port, s.w1.token) as socket:
            await send(socket, {"op": "SUBSCRIBE", "groupId": s.world.group.id,
                                "afterSequence": 2})
            replayed = sequences(await frames(socket, head - 2))
            assert replayed == list(range(3, head + 1))
            await in_thread(make_items, s, 5)
            live = await frames(socket, 5)
            assert sequences(live) == list(range(head + 1, head + 6))
            stored = await in_thread(feed.events_after, s.world.group.id, head, 100)
            assert [f["event"] for f in live] == stored  # the documents of the log
            assert all(f["event"]["groupId"] == s.world.group.id for f in live)
            await silence(socket)  # each event once
    run(scenario())


def test_lost_and_out_of_order_pushes_are_filled_from_the_log(port, monkeypatch):
    s = Scenario()
    head = s.world.head
    real_events = publish.events

    async def scenario():
        async with ws(port, s.w1.token) as socket:
            await send(socket, {"op": "SUBSCRIBE", "groupId": s.world.group.id,
                                "afterSequence": head})
            await asyncio.sleep(0.3)  # the subscription is live before we commit
            monkeypatch.setattr(publish, "events", lambda group_id, documents: None)
            lost = await in_thread(make_items, s, 3)  # committed, never pushed
            await silence(socket, 0.5)
            # The push of the third arrives alone: the two before it come from the log.
            await in_thread(real_events, s.world.group.id, [lost[2]])
            assert sequences(await frames(socket, 3)) == [head + 1, head + 2, head + 3]
            # A stale push (at or below what was sent) is dropped.
            await in_thread(real_events, s.world.group.id, [lost[0], lost[1]])
            monkeypatch.setattr(publish, "events", real_events)
            await in_thread(make_items, s, 1)
            assert sequences([await frame(socket)]) == [head + 4]
            await silence(socket)
    run(scenario())


def test_a_subscription_from_the_middle_of_a_busy_stream_sees_every_event_once(port):
    """Commits keep coming while the replay runs: no event is lost or repeated."""
    s = Scenario()
    make_items(s, 20)

    async def scenario():
        async with ws(port, s.w2.token) as socket:
            writer = asyncio.ensure_future(in_thread(make_items, s, 30))
            await send(socket, {"op": "SUBSCRIBE", "groupId": s.world.group.id,
                                "afterSequence": 0})
            await writer
            head = await in_thread(lambda: s.world.head)
            assert sequences(await frames(socket, head)) == list(range(1, head + 1))
            await silence(socket)
    run(scenario())


# -- ACK and Cursors -------------------------------------------------------------------

def test_ack_records_a_monotonic_cursor_and_refuses_one_above_the_head(port):
    s = Scenario()
    make_items(s, 4)
    group = s.world.group.id
    head = s.world.head
    cursor = lambda: Cursor.objects.get(principal=s.w1.principal, group_id=group).sequence  # noqa

    async def scenario():
        async with ws(port, s.w1.token) as socket:
            await send(socket, {"op": "ACK", "cursors": [{"groupId": group, "sequence": 3}]})
            await silence(socket, 0.5)  # a valid ACK needs no reply
            assert await in_thread(cursor) == 3
            await send(socket, {"op": "ACK", "cursors": [{"groupId": group, "sequence": 1}]})
            await silence(socket, 0.5)
            assert await in_thread(cursor) == 3  # a lower one is ignored
            await send(socket, {"op": "ACK", "cursors": [{"groupId": group,
                                                          "sequence": head + 1}]})
            error = await frame(socket)
            assert (error["op"], error["code"]) == ("ERROR", "VALIDATION_ERROR")
            assert error["details"]["headSequence"] == head
            assert await in_thread(cursor) == 3
            await send(socket, {"op": "ACK", "cursors": [{"groupId": group, "sequence": head}]})
            await silence(socket, 0.5)
            assert await in_thread(cursor) == head
    run(scenario())
    # Acknowledging deletes no history.
    assert Event.objects.filter(group_id=group).count() == head
    response = s.w1.get("cursor")
    assert response.status_code == 200
    assert response.json()["sequence"] == head


def test_an_ack_for_a_group_one_is_not_a_member_of_changes_nothing(port):
    s, other = Scenario(), World()

    async def scenario():
        async with ws(port, s.w1.token) as socket:
            await send(socket, {"op": "ACK", "cursors": [
                {"groupId": s.world.group.id, "sequence": 1},
                {"groupId": other.group.id, "sequence": 0}]})
            error = await frame(socket)
            assert error["code"] == "NOT_A_MEMBER"
    run(scenario())
    assert not Cursor.objects.exists()


# -- commands --------------------------------------------------------------------------

def test_a_command_over_websocket_answers_as_http_and_a_resend_is_a_duplicate(port):
    s = Scenario()
    item_id = s.authorize()
    s.offer(item_id, s.w1)
    s.accept(item_id, s.w1)
    start = s.w1.envelope("work.start", {}, workItemId=item_id, ownershipEpoch=1)

    async def scenario():
        async with ws(port, s.w1.token) as socket:
            await send(socket, {"op": "COMMAND", "command": start})
            first = await frame(socket)
            await send(socket, {"op": "COMMAND", "command": start})
            again = await frame(socket)
            return first, again
    first, again = run(scenario())
    assert first["op"] == "RESULT" and first["commandId"] == start["id"]
    assert first["duplicate"] is False
    assert [e["type"] for e in first["events"]] == ["work.started"]
    assert first["capabilityToken"]["token"].startswith("mwcap.")
    http = s.w1.post(start)
    assert http.status_code == 200
    assert http.json() == {**{k: v for k, v in first.items() if k != "op"}, "duplicate": True}
    assert again == {**first, "duplicate": True}


def test_a_rejected_command_over_websocket_is_an_error_frame_with_its_id(port):
    s = Scenario()
    bad = s.w1.envelope("work.start", {}, workItemId="no-such-item", ownershipEpoch=1)
    unsigned = {**bad, "id": "cmd-unsigned"}

    async def scenario():
        async with ws(port, s.w1.token) as socket:
            await send(socket, {"op": "COMMAND", "command": bad})
            rejected = await frame(socket)
            await send(socket, {"op": "COMMAND", "command": unsigned})
            forged = await frame(socket)
            await send(socket, {"op": "COMMAND", "command": "nope"})
            shapeless = await frame(socket)
            return rejected, forged, shapeless
    rejected, forged, shapeless = run(scenario())
    http = s.w1.post(bad).json()["error"]
    assert rejected == {"op": "ERROR", "commandId": bad["id"], **http}
    assert (forged["code"], forged["commandId"]) == ("INVALID_SIGNATURE", "cmd-unsigned")
    assert shapeless["code"] == "VALIDATION_ERROR" and "commandId" not in shapeless


# -- membership ------------------------------------------------------------------------

def test_a_non_member_subscription_gets_not_a_member_and_learns_nothing(port):
    s, outsider = Scenario(), World().agent("outsider")

    async def scenario():
        answers = []
        async with ws(port, outsider.token) as socket:
            for group_id in (s.world.group.id, "grp_does_not_exist"):
                await send(socket, {"op": "SUBSCRIBE", "groupId": group_id,
                                    "afterSequence": 0})
                answers.append(await frame(socket))
            await in_thread(make_items, s, 2)
            await silence(socket)
        return answers
    member_group, missing = run(scenario())
    assert member_group["code"] == missing["code"] == "NOT_A_MEMBER"
    assert {k: v for k, v in member_group.items() if k != "groupId"} == \
        {k: v for k, v in missing.items() if k != "groupId"}


def test_removing_a_member_stops_delivery_on_an_open_connection(port):
    s = Scenario()
    head = s.world.head

    async def scenario():
        async with ws(port, s.w2.token) as socket:
            await send(socket, {"op": "SUBSCRIBE", "groupId": s.world.group.id,
                                "afterSequence": head})
            await asyncio.sleep(0.3)
            await in_thread(make_items, s, 1)
            assert sequences([await frame(socket)]) == [head + 1]
            await in_thread(registry.remove_member, s.world.group, s.w2.principal)
            error = await frame(socket, timeout=3)  # the notice, well before the TTL
            assert (error["op"], error["code"], error["groupId"]) == \
                ("ERROR", "NOT_A_MEMBER", s.world.group.id)
            await in_thread(make_items, s, 2)
            await silence(socket, 1.0)
            await send(socket, {"op": "SUBSCRIBE", "groupId": s.world.group.id,
                                "afterSequence": 0})
            assert (await frame(socket))["code"] == "NOT_A_MEMBER"
    run(scenario())


# -- bad frames ------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [
    "not json", "[]", '{"op": 1}', '{"op": "NOPE"}', '{"op": "SUBSCRIBE"}',
    '{"op": "SUBSCRIBE", "groupId": "g", "afterSequence": -1}',
    '{"op": "SUBSCRIBE", "groupId": "g", "afterSequence": "1"}',
    '{"op": "ACK", "cursors": "x"}', '{"op": "ACK", "cursors": [{"groupId": "g"}]}',
    '{"op": "ACK", "cursors": [{"groupId": "g", "sequence": 1e400}]}',
    '{"op": "SUBSCRIBE", "groupId": "g\\u0000", "afterSequence": 0}',
    '{"op": "ACK", "cursors": [{"groupId": "g", "sequence": 99999999999999999999999}]}',
    '{"op": "COMMAND", "command": NaN}',
])
def test_a_bad_frame_draws_an_error_frame_and_the_connection_stays_usable(port, bad):
    s = Scenario()
    head = s.world.head

    async def scenario():
        async with ws(port, s.w1.token) as socket:
            await send(socket, bad)
            error = await frame(socket)
            assert error["op"] == "ERROR" and error["code"] == "VALIDATION_ERROR", error
            assert isinstance(error["message"], str) and isinstance(error["details"], dict)
            await socket.send(b"binary")
            assert (await frame(socket))["code"] == "VALIDATION_ERROR"
            await send(socket, {"op": "SUBSCRIBE", "groupId": s.world.group.id,
                                "afterSequence": head - 1})
            assert sequences([await frame(socket)]) == [head]
    run(scenario())


def test_events_of_two_groups_stay_apart(port):
    a, b = Scenario(), Scenario()
    registry.add_member(b.world.group, a.w1.principal, ["worker"])
    heads = [(a, a.world.head), (b, b.world.head)]

    async def scenario():
        async with ws(port, a.w1.token) as socket:
            for s, head in heads:
                await send(socket, {"op": "SUBSCRIBE", "groupId": s.world.group.id,
                                    "afterSequence": head})
            await asyncio.sleep(0.3)
            await in_thread(make_items, a, 2)
            await in_thread(make_items, b, 2)
            received = await frames(socket, 4)
            await silence(socket)
            return received
    received = run(scenario())
    by_group = {}
    for f in received:
        by_group.setdefault(f["event"]["groupId"], []).append(f["event"]["sequence"])
    assert by_group == {a.world.group.id: [a.world.head - 1, a.world.head],
                        b.world.group.id: [b.world.head - 1, b.world.head]}


def kill_hub_subscriptions(port: int) -> int:
    """Cut the Redis subscription of the server's daphne processes (not anyone else's)."""
    names = {f"mw-hub-{pid}" for pid in daphne_pids(port)}
    client = redis.Redis.from_url(settings.REDIS_URL)
    killed = 0
    for entry in client.client_list():
        if entry.get("name", "") in names:
            killed += client.client_kill_filter(_id=entry["id"])
    client.close()
    return killed


def test_events_committed_while_redis_is_cut_arrive_after_the_reconnect(port):
    s = Scenario()
    head = s.world.head

    async def scenario():
        async with ws(port, s.w1.token) as socket:
            await send(socket, {"op": "SUBSCRIBE", "groupId": s.world.group.id,
                                "afterSequence": head})
            await asyncio.sleep(0.3)
            await in_thread(make_items, s, 1)
            assert sequences([await frame(socket)]) == [head + 1]
            assert await in_thread(kill_hub_subscriptions, port) >= 1
            await in_thread(make_items, s, 2)  # pushed while nobody listens
            # No further commit: the reconnect alone brings them, from the log.
            assert sequences(await frames(socket, 2, timeout=10)) == [head + 2, head + 3]
            await silence(socket)
    run(scenario())

