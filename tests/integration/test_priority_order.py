"""§11.3: "Priority changes immediately reorder queued WorkItems." An Agent's queue in a
Group, read with order=priority, follows the current contract's urgency, business impact
and deadline; a revised contract moves an item at once."""

from importlib import import_module

from django.db import connection

from apps.ledger import verify
from apps.work.models import WorkItem
from mission_weave.core import priority
from tests.support import Scenario, assert_error


def queue(s: Scenario) -> list:
    response = s.c.get(f"work-items?state=queued&owner={s.w1.name}&order=priority")
    assert response.status_code == 200, response.content
    return [item["id"] for item in response.json()["workItems"]]


def test_queue_lists_by_urgency_impact_then_deadline(db, clock):
    s = Scenario()
    low = s.queued(urgency="low")
    late = s.queued(urgency="high", deadline="2031-01-01T00:00:00Z")
    early = s.queued(urgency="high", deadline="2030-06-01T00:00:00+02:00")
    impact = s.queued(urgency="high", businessImpact="critical")
    assert queue(s) == [impact, early, late, low]


def test_a_revised_urgency_reorders_the_queue_at_once(db, clock):
    s = Scenario()
    first = s.queued(urgency="normal")
    second = s.queued(urgency="low")
    assert queue(s) == [first, second]
    revised = s.item(second)["contract"] | {"urgency": "critical", "revision": 2}
    s.c.ok("work.revise_contract", {"contract": revised}, workItemId=second)
    assert queue(s) == [second, first]


def test_only_the_owners_items_are_in_its_queue(db, clock):
    s = Scenario()
    mine = s.queued()
    theirs = s.authorize()
    s.offer(theirs, s.w2)
    s.accept(theirs, s.w2)
    assert queue(s) == [mine]


def test_an_unknown_order_is_refused(db, clock):
    s = Scenario()
    assert_error(s.c.get("work-items?order=loudest"), 400, "VALIDATION_ERROR")


def test_the_migration_fills_the_rank_of_existing_rows_as_the_store_does(db, clock):
    s = Scenario()
    items = [s.authorize(urgency=u, businessImpact=i, deadline=d) for u, i, d in (
        ("critical", "low", "2030-06-01T00:00:00+02:00"), ("low", "high", "2030-06-01T00:00:00Z"),
        ("high", "medium", "2031-01-01T00:00:00Z"))]
    WorkItem.objects.filter(group_id=s.world.group.id).update(urgency_rank=9, impact_rank=9,
                                                              deadline=None)
    with connection.cursor() as cursor:
        cursor.execute(import_module("apps.work.migrations.0005_priority_rank").BACKFILL)
    for row in WorkItem.objects.filter(group_id=s.world.group.id, work_item_id__in=items):
        expected = priority.rank(row.doc["contract"])
        assert (row.urgency_rank, row.impact_rank, row.deadline) == expected
    assert verify.verify_group(s.world.group.id) == []
