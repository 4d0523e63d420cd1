"""The event feed (apps/ledger/feed.py) gives exactly the stored event documents,
however the database writes them, and pages the log without gaps."""

from datetime import UTC, datetime

import pytest

from apps.ledger import feed, pipeline
from apps.ledger.models import Event
from apps.work import work_store
from mission_weave.core import chain
from mission_weave.core.commands import Draft

pytestmark = pytest.mark.django_db


def append(group_id: str, moment: datetime, count: int = 2) -> None:
    pipeline.submit_system(
        group_id, lambda view: [Draft("work.progress_reported", {"phase": f"p{k}", "n": 1.5,
                                                                 "text": "ü \" \\ \n"})
                                for k in range(count)],
        moment, lambda group_id: work_store.load_items(group_id, []))


def test_the_feed_gives_exactly_the_stored_documents(scenario):
    s = scenario
    group_id = s.world.group.id
    s.running()
    append(group_id, datetime(2026, 11, 29, 8, 0, 0, tzinfo=UTC))  # whole seconds
    append(group_id, datetime(2026, 11, 29, 8, 0, 1, 5, tzinfo=UTC))  # a fraction

    stored = [pipeline.event_document(e) for e in
              Event.objects.filter(group_id=group_id).order_by("sequence")]
    fed = feed.events_after(group_id, 0, 1000)

    assert fed == stored
    assert [e["occurredAt"] for e in fed[-4:]] == [
        "2026-11-29T08:00:00Z", "2026-11-29T08:00:00Z",
        "2026-11-29T08:00:01.000005Z", "2026-11-29T08:00:01.000005Z"]
    assert chain.check_chain(fed) == []


def test_rest_pages_continue_each_other(scenario):
    s = scenario
    s.running()
    head = s.world.head

    first = s.w1.get("events?after=0&limit=2").json()
    rest = s.w1.get("events?after=2&limit=1000").json()

    assert first["headSequence"] == rest["headSequence"] == head
    assert [e["sequence"] for e in first["events"] + rest["events"]] == list(range(1, head + 1))
    assert chain.check_chain(first["events"] + rest["events"]) == []
