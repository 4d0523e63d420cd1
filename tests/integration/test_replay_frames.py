"""A replay's EVENT frames as PostgreSQL writes them (apps/ledger/feed.py), a page at a
time: each frame carries the stored document, and a replay over several pages, from any
point, gives every event once, in order, as the log holds it."""

import asyncio
import json

import pytest
from django.utils import timezone

from apps.delivery import consumer
from apps.ledger import feed, pipeline
from apps.ledger.models import Event
from apps.work import work_store
from mission_weave.core.commands import Draft
from tests.integration.wslive import frames, send, sequences, silence, ws
from tests.support import Scenario


def append(group_id: str, count: int) -> None:
    while count:
        size = min(count, 2000)
        pipeline.submit_system(
            group_id, lambda view, size=size: [
                Draft("work.progress_reported", {"n": k, "text": "ü \" \\ \n"})
                for k in range(size)],
            timezone.now(), lambda group_id: work_store.load_items(group_id, []))
        count -= size


@pytest.mark.django_db
def test_frames_carry_their_sequence_and_the_stored_document(scenario):
    s = scenario
    s.running()
    append(s.world.group.id, 3)
    head = s.world.head
    rows = feed.event_frames_after(s.world.group.id, 2, 1000)
    stored = [pipeline.event_document(e) for e in
              Event.objects.filter(group_id=s.world.group.id, sequence__gt=2)
              .order_by("sequence")]

    assert [sequence for sequence, _frame in rows] == [e["sequence"] for e in stored]
    assert [json.loads(frame) for _sequence, frame in rows] == \
        [{"op": "EVENT", "event": e} for e in stored]
    assert rows[-1][0] == head
    assert feed.event_frames_after(s.world.group.id, rows[-1][0], 10) == []
    assert feed.event_frames_after("grp_no_such_group", 0, 10) == []


@pytest.mark.django_db(transaction=True)
def test_a_replay_over_several_pages_gives_each_event_once_in_order(port):
    s = Scenario()
    page = consumer.REPLAY_PAGE
    append(s.world.group.id, 2 * page + 7)
    head = s.world.head
    stored_tail = [pipeline.event_document(e) for e in
                   Event.objects.filter(group_id=s.world.group.id, sequence__gt=head - 3)
                   .order_by("sequence")]

    async def scenario():
        async with ws(port, s.w1.token) as whole, ws(port, s.w2.token) as middle:
            await send(whole, {"op": "SUBSCRIBE", "groupId": s.world.group.id,
                               "afterSequence": 0})
            await send(middle, {"op": "SUBSCRIBE", "groupId": s.world.group.id,
                                "afterSequence": page - 3})
            received = await frames(whole, head, timeout=30)
            assert sequences(received) == list(range(1, head + 1))
            assert [f["event"] for f in received[-3:]] == stored_tail
            assert sequences(await frames(middle, head - page + 3, timeout=30)) == \
                list(range(page - 2, head + 1))
            await silence(whole)
            await silence(middle, 0.2)
    asyncio.run(scenario())
