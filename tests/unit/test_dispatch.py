"""Automatic dispatch (mission_weave/core/dispatch.py) and the capacity backstop on acceptance,
through the pure `decide`: the next sequential offer after a decline, an expiry or a due
retry, and only when the Mission asks for it."""

from dataclasses import replace

import pytest

from mission_weave.core import commands, dispatch, state
from mission_weave.protocol.errors import ProtocolError
from tests.unit import builders
from tests.unit.builders import T0, WORKER, WORKER_2, WORKER_3, at

WORKER_ROLES = frozenset({"worker"})


def offered_item(queue=(WORKER_2, WORKER_3), mode="sequential", offers=None):
    return builders.work_item(state.OFFERED, offer_queue=tuple(queue), offer_mode=mode,
                              offers=offers or (builders.offer(),))


def decline(view, item, agent_id=WORKER, context=None):
    command = builders.command("work.decline_offer", {"reason": "capacity"}, item,
                               actor=f"agent:{agent_id}", roles=WORKER_ROLES)
    return commands.decide(view, command, context or builders.context())


def auto_view(item, auto=True):
    return builders.view_of(item, missions=[builders.mission(auto_dispatch=auto)])


def test_a_decline_under_auto_dispatch_offers_the_next_pending_candidate():
    item = offered_item()
    view = auto_view(item)

    drafts = decline(view, item)
    after = builders.apply(view, drafts)

    assert [d.type for d in drafts] == ["work.offer_declined", "work.offered"]
    offered = drafts[1].data
    assert [o["agentId"] for o in offered["offers"]] == [WORKER_2]
    assert offered["offers"][0]["rank"] == 2
    assert offered["offers"][0]["expiresAt"] == builders.iso(600)
    assert offered["pendingCandidates"] == [WORKER_3]
    assert offered["autoDispatch"] == {"after": "declined", "skipped": []}
    assert "auto-dispatch" in offered["offers"][0]["selectionBasis"]["policyRules"]
    assert [o.agent_id for o in after.items[item.id].live_offers(T0)] == [WORKER_2]


def test_a_decline_without_auto_dispatch_only_records_the_decline():
    item = offered_item()

    drafts = decline(auto_view(item, auto=False), item)

    assert [d.type for d in drafts] == ["work.offer_declined"]


def test_the_next_offer_skips_candidates_that_became_ineligible():
    item = offered_item()
    full = replace(builders.CANDIDATES[WORKER_2], load=2)
    context = builders.context(candidates={**builders.CANDIDATES, WORKER_2: full})

    drafts = decline(auto_view(item), item, context=context)

    offered = drafts[1].data
    assert [o["agentId"] for o in offered["offers"]] == [WORKER_3]
    assert offered["offers"][0]["rank"] == 3
    assert offered["autoDispatch"]["skipped"] == [{"agentId": WORKER_2,
                                                   "failedRules": ["capacity"]}]


def test_a_decline_leaving_another_live_urgent_offer_dispatches_nothing():
    item = offered_item(queue=(), mode="urgent",
                        offers=(builders.offer(), builders.offer(WORKER_2, rank=2)))

    drafts = decline(auto_view(item), item)

    assert [d.type for d in drafts] == ["work.offer_declined"]


def test_redispatch_after_every_offer_expired():
    item = offered_item()
    view = auto_view(item)
    later = builders.context(now=at(3601))

    (offered,) = dispatch.redispatch(view, item, later)

    assert offered.data["autoDispatch"]["after"] == "expired"
    assert [o["agentId"] for o in offered.data["offers"]] == [WORKER_2]


@pytest.mark.parametrize("situation", ["offer still live", "no auto-dispatch", "queue spent",
                                       "queued item", "mission closed"])
def test_redispatch_returns_nothing_when_there_is_nothing_to_do(situation):
    item, mission, now = offered_item(), builders.mission(auto_dispatch=True), at(3601)
    if situation == "offer still live":
        now = T0
    elif situation == "no auto-dispatch":
        mission = replace(mission, auto_dispatch=False)
    elif situation == "queue spent":
        item = offered_item(queue=())
    elif situation == "queued item":  # a live owner: nothing to dispatch
        item, now = builders.work_item(state.QUEUED), T0
    else:
        mission = replace(mission, state=state.MISSION_CANCELLED)
    view = builders.view_of(item, missions=[mission])

    assert dispatch.redispatch(view, item, builders.context(now=now)) == []


def test_a_failed_item_due_a_retry_is_offered_to_the_best_ranked_worker():
    item = builders.work_item(state.FAILED, retry_at=at(-1))
    view = auto_view(item)

    (offered,) = dispatch.redispatch(view, item, builders.context())

    assert offered.data["autoDispatch"]["after"] == "retry"
    assert [o["agentId"] for o in offered.data["offers"]] == [WORKER]
    assert offered.data["pendingCandidates"] == [WORKER_2, WORKER_3]
    assert dispatch.redispatch(view, replace(item, retry_at=at(60)), builders.context()) == []


def test_an_acceptance_over_max_concurrency_is_refused_with_the_numbers():
    item = builders.work_item(state.OFFERED)
    view = builders.view_of(item)
    busy = replace(builders.CANDIDATES[WORKER], load=2)
    accept = builders.command("work.accept_offer", {"contractRevision": 1}, item,
                              roles=WORKER_ROLES)

    with pytest.raises(ProtocolError) as raised:
        commands.decide(view, accept, builders.context(candidates={WORKER: busy}))

    assert raised.value.code == "TRANSITION_NOT_PERMITTED"
    assert raised.value.details == {"reason": "capacity", "maxConcurrency": 2, "current": 2}
    below = replace(busy, load=1)
    drafts = commands.decide(view, accept, builders.context(candidates={WORKER: below}))
    assert [d.type for d in drafts] == ["work.offer_accepted"]


def test_a_failed_item_whose_attempts_are_spent_is_not_offered_again():
    item = builders.work_item(state.FAILED, retry_at=at(-1), attempts=3)  # maxAttempts is 3

    assert dispatch.redispatch(auto_view(item), item, builders.context()) == []


# --- every dependency checked is loaded: one absent from the view is not met (§10.4) ---------

def dependent(item_state, **fields):
    return builders.work_item(item_state, depends_on=("wi_dep",), **fields)


@pytest.mark.parametrize("situation", ["expired offers", "retry due"])
def test_automatic_dispatch_never_offers_an_item_whose_dependency_it_did_not_load(situation):
    if situation == "expired offers":
        item, now = dependent(state.OFFERED, offer_queue=(WORKER_2,)), at(3601)
    else:
        item, now = dependent(state.FAILED, retry_at=at(-1)), T0
    context = builders.context(now=now)
    verified = builders.work_item(state.VERIFIED, item_id="wi_dep")

    assert dispatch.redispatch(auto_view(item), item, context) == []
    met = builders.view_of(verified, item, missions=[builders.mission(auto_dispatch=True)])
    assert dispatch.redispatch(met, item, context)[-1].type == "work.offered"


def test_a_timed_out_attempt_ends_whether_its_dependencies_are_loaded_or_not():
    from mission_weave.core import sweep

    item = dependent(state.ACTIVE, owner_live=False)

    # Ending the attempt offers nothing: the retry's offer is the one that checks them
    # (test above), so a view without them (a reconnection's) decides the same.
    drafts = sweep.decide(auto_view(item), builders.context(), dispatch.redispatch)

    assert [d.type for d in drafts] == ["lease.expired", "work.ownership_expired",
                                        "work.failed"]
    assert drafts[-1].data["retryAt"] == builders.iso(10)


@pytest.mark.parametrize("command_type", ["work.offer", "work.accept_offer", "work.start"])
def test_a_dependency_absent_from_the_view_is_refused_not_passed(command_type):
    item_state = {"work.offer": state.OPEN, "work.accept_offer": state.OFFERED,
                  "work.start": state.QUEUED}[command_type]
    item = dependent(item_state)
    body = {"work.offer": {"candidates": [WORKER], "mode": "sequential",
                           "expiresAt": builders.iso(600)},
            "work.accept_offer": {"contractRevision": 1}, "work.start": {}}[command_type]
    actor = builders.COORDINATOR if command_type == "work.offer" else builders.AGENT
    command = builders.command(command_type, body, item, actor=actor)

    with pytest.raises(ProtocolError) as raised:
        commands.decide(builders.view_of(item), command, builders.context())

    assert raised.value.code == "DEPENDENCIES_NOT_MET"
    assert raised.value.details == {"policy": "all_verified", "dependencies": {},
                                    "missing": ["wi_dep"]}
