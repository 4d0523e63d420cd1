"""The sweeper's prepared path (pipeline.prepare_system / submit_prepared): expiries
decided before the Group lock are appended only for WorkItems whose row is unchanged
under it, the document keeps what was not read (the contract), and the chain holds."""

import os

import pytest

from apps.ledger import pipeline
from apps.ledger.models import Event
from apps.ledger.verify import verify_group
from apps.work import sweeper, work_store
from mission_weave.core import sweep
from tests.integration.test_sweeper_races import cast, check_invariants, running

pytestmark = pytest.mark.django_db(transaction=True)


def _prepare(s, item_ids, moment):
    view, versions = work_store.load_due(s.world.group.id, item_ids, moment)
    drafts, dispatching = sweep.split(view, moment)
    assert dispatching == []
    return pipeline.prepare_system(s.world.group.id, view, versions, drafts, moment)


def test_an_item_renewed_after_the_read_is_left_alone_and_the_rest_expire():
    s = cast()
    items = running(s, 3)
    moment = max(expiry for _, _, expiry in items)
    prepared = _prepare(s, [item_id for item_id, _, _ in items], moment)
    assert [p.work_item_id for p in prepared] == sorted(i for i, _, _ in items)
    renewed, fields, _ = items[1]
    s.w1.ok("lease.renew", {}, **fields)  # wins: the sweep's read of it is stale now

    events = pipeline.submit_prepared(s.world.group.id, prepared)

    assert sorted(e["workItemId"] for e in events) == sorted(
        i for i, _, _ in items if i != renewed)
    assert {e["type"] for e in events} == {"lease.expired"}
    assert s.item(renewed)["lease"] is not None  # still live
    stored = work_store.load_items(s.world.group.id, [i for i, _, _ in items]).items
    assert all(item.contract["acceptanceCriteria"] for item in stored.values())  # kept
    check_invariants(s.world.group.id)


def test_a_second_append_of_the_same_preparation_appends_nothing():
    s = cast()
    items = running(s, 2)
    moment = max(expiry for _, _, expiry in items)
    prepared = _prepare(s, [item_id for item_id, _, _ in items], moment)

    first = pipeline.submit_prepared(s.world.group.id, prepared)
    again = pipeline.submit_prepared(s.world.group.id, prepared)

    assert len(first) == 2 and again == []
    assert Event.objects.filter(group_id=s.world.group.id, type="lease.expired").count() == 2
    assert _prepare(s, [item_id for item_id, _, _ in items], moment) == []
    assert verify_group(s.world.group.id) == []


def test_events_that_touch_more_than_their_item_are_refused():
    s = cast()
    (item_id, _, expiry), = running(s, 1)
    view, versions = work_store.load_due(s.world.group.id, [item_id], expiry)
    item = view.items[item_id]
    cancel = pipeline.commands.Draft("mission.cancelled", {"reason": "x"}, item.mission_id,
                                     item_id)
    with pytest.raises(ValueError):
        pipeline.prepare_system(s.world.group.id, view, versions, [cancel], expiry)


def test_expiries_are_prepared_at_a_lower_cpu_priority_and_the_lock_is_taken_at_ours(settings):
    """MW_SWEEP_NICENESS: the thread that decides before the lock is nicer than the one
    that takes the lock and writes (the process's own, unchanged)."""
    ours = os.getpriority(os.PRIO_PROCESS, 0)  # on Linux, this thread's
    preparing = sweeper._outside_the_lock(os.getpid())
    theirs = preparing.submit(os.getpriority, os.PRIO_PROCESS, 0).result()
    assert theirs == min(19, ours + settings.MW_SWEEP_NICENESS) > ours
    assert os.getpriority(os.PRIO_PROCESS, 0) == ours
