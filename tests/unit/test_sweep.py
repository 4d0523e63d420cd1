"""The sweeper's pure decisions (apps/work/sweep.py): which deadline rule fences whom,
and that an item already fenced, renewed or answered yields nothing."""

from dataclasses import replace

from apps.work import state, sweep
from apps.work.commands import Draft
from tests.unit.builders import (
    ITEM_ID,
    ITEM_STATES,
    LEASE_ID,
    MISSION_ID,
    OWNERSHIP_EPOCH,
    WORKER,
    apply,
    at,
    context,
    mission,
    offer,
    view_of,
    work_item,
)


def kinds(drafts) -> list:
    return [(d.type, d.data.get("reason")) for d in drafts]


def test_an_expired_lease_is_expired_then_its_owner_fenced():
    view = view_of(work_item(state.ACTIVE, owner_live=False))

    drafts = sweep.decide(view, context())

    assert kinds(drafts) == [("lease.expired", "timeout"), ("work.ownership_expired", "lease")]
    assert drafts[0].data == {"leaseId": LEASE_ID, "reason": "timeout"}
    assert drafts[1].data == {"agentId": WORKER, "ownershipEpoch": OWNERSHIP_EPOCH,
                              "reason": "lease"}
    assert (drafts[0].work_item_id, drafts[0].mission_id) == (ITEM_ID, MISSION_ID)


def test_a_lease_expires_at_its_expiry_instant_not_before():
    item = work_item(state.ACTIVE)
    view = view_of(item)
    assert sweep.decide(view, context(now=item.lease.expires_at - (at(1) - at(0)))) == []
    assert len(sweep.decide(view, context(now=item.lease.expires_at))) == 2


def test_a_missed_start_by_deadline_fences_the_owner():
    drafts = sweep.decide(view_of(work_item(state.QUEUED, owner_live=False)), context())
    assert kinds(drafts) == [("work.ownership_expired", "start_by")]


def test_a_run_out_blocked_lease_fences_the_owner():
    drafts = sweep.decide(view_of(work_item(state.BLOCKED, owner_live=False)), context())
    assert kinds(drafts) == [("work.ownership_expired", "blocked_lease")]


def test_live_owners_are_left_alone():
    for item_state in (state.QUEUED, state.ACTIVE, state.BLOCKED):
        assert sweep.decide(view_of(work_item(item_state)), context()) == []


def test_an_item_already_fenced_yields_nothing():
    for item_state in (state.QUEUED, state.ACTIVE, state.BLOCKED):
        view = view_of(work_item(item_state, owner_live=False))
        fenced = apply(view, sweep.decide(view, context()))
        assert sweep.decide(fenced, context()) == [], item_state
        assert sweep.decide(fenced, context(now=at(86400))) == [], item_state


def test_every_other_state_yields_nothing_without_dispatch():
    for item_state in set(ITEM_STATES) - {state.QUEUED, state.ACTIVE, state.BLOCKED}:
        view = view_of(work_item(item_state, owner_live=False))
        assert sweep.decide(view, context(now=at(86400))) == [], item_state


def test_offer_expiry_itself_appends_nothing():
    item = work_item(state.OFFERED, offers=(offer(expires_in=-1),))
    assert sweep.decide(view_of(item), context()) == []


def _recorder():
    calls = []

    def redispatch(view, item, ctx):
        calls.append(item.id)
        return [Draft("work.offered", {"offers": [], "mode": "sequential"}, item.mission_id,
                      item.id)]
    return calls, redispatch


def test_expired_offers_are_redispatched_when_the_mission_asks_for_it():
    calls, redispatch = _recorder()
    expired = work_item(state.OFFERED, offers=(offer(expires_in=-1),))
    view = view_of(expired, missions=[mission(auto_dispatch=True)])

    drafts = sweep.decide(view, context(), redispatch)

    assert calls == [ITEM_ID]
    assert [d.type for d in drafts] == ["work.offered"]
    assert sweep.counts(drafts) == {"expiredLeases": 0, "expiredOwnerships": 0,
                                    "redispatched": 1}


def test_no_redispatch_while_an_offer_lives_or_without_auto_dispatch():
    calls, redispatch = _recorder()
    live = work_item(state.OFFERED, offers=(offer(expires_in=-1), offer("w2", expires_in=60)))
    assert sweep.decide(view_of(live, missions=[mission(auto_dispatch=True)]), context(),
                        redispatch) == []
    expired = work_item(state.OFFERED, offers=(offer(expires_in=-1),))
    assert sweep.decide(view_of(expired), context(), redispatch) == []
    declined = work_item(state.OFFERED, offers=(offer(status="declined"),))
    assert sweep.decide(view_of(declined, missions=[mission(auto_dispatch=True)]), context(),
                        redispatch) == []
    ended = mission(auto_dispatch=True, state=state.MISSION_CANCELLED)
    assert sweep.decide(view_of(expired, missions=[ended]), context(), redispatch) == []
    assert calls == []


def test_a_failed_item_is_redispatched_once_its_backoff_ran_out():
    calls, redispatch = _recorder()
    waiting = work_item(state.FAILED, retry_at=at(30))
    view = view_of(waiting, missions=[mission(auto_dispatch=True)])
    assert sweep.decide(view, context(), redispatch) == []
    assert len(sweep.decide(view, context(now=at(30)), redispatch)) == 1
    no_retry = view_of(replace(waiting, retry_at=None), missions=[mission(auto_dispatch=True)])
    assert sweep.decide(no_retry, context(now=at(86400)), redispatch) == []
    assert calls == [ITEM_ID]


def test_items_are_decided_in_id_order():
    a = work_item(state.ACTIVE, owner_live=False, item_id="wi_b")
    b = work_item(state.QUEUED, owner_live=False, item_id="wi_a")
    drafts = sweep.decide(view_of(a, b), context())
    assert [d.work_item_id for d in drafts] == ["wi_a", "wi_b", "wi_b"]
