"""Issue 24 in the pure core: a missed start-by deadline is an attempt held to the retry
budget (§11.4), a reconnection never hands back a lease past its expiry (§11.3, §11.5),
and exclusive WorkItems go sequentially to the highest-ranked eligible worker (§10.3)."""

from dataclasses import replace

import pytest

from mission_weave.core import commands, dispatch, ranking, retries, state, sweep
from mission_weave.core.evolve import evolve
from mission_weave.core.state import Event
from mission_weave.protocol.errors import ProtocolError
from tests.unit.builders import (
    CANDIDATES,
    COORDINATOR,
    ITEM_ID,
    LEASE_ID,
    OWNERSHIP_EPOCH,
    T0,
    WORKER,
    WORKER_2,
    WORKER_3,
    apply,
    at,
    command,
    context,
    contract,
    iso,
    lease,
    mission,
    offer,
    view_of,
    work_item,
)

AUTO = [mission(auto_dispatch=True)]
COORDINATOR_ROLES = frozenset({"coordinator"})
WORKER_ROLES = frozenset({"worker"})


def kinds(drafts) -> list:
    return [(d.type, d.data.get("reason")) for d in drafts]


def missed_start(**fields):
    """A queued item whose owner accepted and never started: its start-by passed at T0."""
    return work_item(state.QUEUED, owner_live=False, last_owner=WORKER, **fields)


def offer_command(item, body, command_id="cmd-offer"):
    return command("work.offer", {"expiresAt": iso(3600), **body}, item, actor=COORDINATOR,
                   roles=COORDINATOR_ROLES, command_id=command_id)


# --- 1. a missed start-by deadline is an attempt -------------------------------------------------

def test_a_missed_start_by_of_an_epoch_never_started_counts_an_attempt():
    view = view_of(missed_start())

    (fenced,) = sweep.decide(view, context())

    assert fenced.data == {"agentId": WORKER, "ownershipEpoch": OWNERSHIP_EPOCH,
                           "reason": "start_by", "attempt": 1}
    assert apply(view, [fenced]).items[ITEM_ID].attempts == 1


def test_a_missed_start_by_after_a_checkpoint_ends_the_attempt_already_counted():
    # Started under this epoch (attempt 1), checkpointed, not started again in time.
    item = missed_start(attempts=1, lease=lease(closed="released"))

    (fenced,) = sweep.decide(view_of(item), context())

    assert fenced.data["attempt"] == 1
    assert retries.missed_start_attempt(item) == 1


def test_a_coordinators_offer_that_fences_a_missed_start_by_counts_it_too():
    item = missed_start()
    view = view_of(item)

    drafts = commands.decide(view, offer_command(item, {"candidates": [WORKER_2],
                                                        "mode": "sequential"}), context())

    assert kinds(drafts) == [("work.ownership_expired", "start_by"), ("work.offered", None)]
    assert drafts[0].data["attempt"] == 1
    assert apply(view, drafts).items[ITEM_ID].attempts == 1


def test_under_auto_dispatch_a_missed_start_by_waits_the_contracts_backoff():
    view = view_of(missed_start(attempts=1, lease=lease(closed="revoked", ownership_epoch=0)),
                   missions=AUTO)

    drafts = sweep.decide(view, context(), dispatch.redispatch)

    # Attempt 2 missed its start: exponential backoff 10 × 2 before the next offer.
    assert kinds(drafts) == [("work.ownership_expired", "start_by"),
                             ("work.failed", "start-by deadline missed")]
    failed = drafts[1].data
    assert (failed["attempt"], failed["retryAt"], failed["exhausted"]) == (2, iso(20), False)
    assert "attempt 2 of 3" in failed["evidence"][0]["result"]
    waiting = apply(view, drafts)
    assert retries.refusal(waiting.items[ITEM_ID], at(19))["reason"] == "backoff"
    assert sweep.decide(waiting, context(now=at(19)), dispatch.redispatch) == []
    (again,) = sweep.decide(waiting, context(now=at(20)), dispatch.redispatch)
    assert (again.type, again.data["autoDispatch"]["after"]) == ("work.offered", "retry")


def test_the_last_attempt_missing_its_start_fails_the_item_exhausted_and_offers_nothing():
    view = view_of(missed_start(attempts=2, lease=lease(closed="revoked", ownership_epoch=0)),
                   missions=AUTO)

    drafts = sweep.decide(view, context(), dispatch.redispatch)

    assert [d.type for d in drafts] == ["work.ownership_expired", "work.failed"]
    failed = drafts[1].data
    assert (failed["by"], failed["attempt"], failed["retryAt"]) == ("system", 3, None)
    assert (failed["exhausted"], failed["exhaustedBy"]) == (True, "attempts")
    (evidence,) = failed["evidence"]
    assert evidence["method"] == "start-by-deadline"
    assert "did not start" in evidence["result"] and "exhausted by attempts" in evidence["result"]
    ended = apply(view, drafts)
    assert (ended.items[ITEM_ID].state, ended.items[ITEM_ID].retry_exhausted) == (
        state.FAILED, "attempts")
    assert sweep.decide(ended, context(now=at(86400)), dispatch.redispatch) == []


def test_workers_that_never_start_get_at_most_max_attempts_offers():
    """The loop of the issue: accepted, never started, offered again, ... It ends."""
    view, now, offers = view_of(missed_start(), missions=AUTO), T0, 0
    for _ in range(10):
        drafts = sweep.decide(view, context(now=now), dispatch.redispatch)
        view = apply(view, drafts, now)
        item = view.items[ITEM_ID]
        if item.retry_at is None:
            break
        now = item.retry_at
        (offered,) = sweep.decide(view, context(now=now), dispatch.redispatch)
        offers += 1
        view = apply(view, [offered], now)
        taker = offered.data["offers"][0]["agentId"]
        accept = command("work.accept_offer", {"contractRevision": 1}, view.items[ITEM_ID],
                         actor=f"agent:{taker}", roles=WORKER_ROLES, command_id=f"acc-{offers}")
        view = apply(view, commands.decide(view, accept, context(now=now)), now)
        now = view.items[ITEM_ID].start_by

    item = view.items[ITEM_ID]
    assert (offers, item.attempts, item.state, item.retry_exhausted) == (2, 3, state.FAILED,
                                                                         "attempts")


def test_an_ownership_expiry_of_an_older_log_counts_nothing_on_replay():
    view = view_of(missed_start())
    old = Event("work.ownership_expired", {"agentId": WORKER, "ownershipEpoch": 1,
                                           "reason": "start_by"}, T0, "msn_1", ITEM_ID)

    evolve(view, old)

    assert (view.items[ITEM_ID].attempts, view.items[ITEM_ID].owner) == (0, None)


# --- 2. a reconnection never hands back a lease past its expiry ----------------------------------

def expired_lease(**fields):
    return work_item(state.ACTIVE, owner_live=False, **fields)  # expired at T0 - 1 s


def test_a_reconnection_closes_a_lease_past_its_expiry_as_the_sweeper_would():
    live = work_item(state.ACTIVE, item_id="wi_live",
                     lease=lease(lease_id="lease_live", expires_in=60))
    view = view_of(expired_lease(), live)

    drafts = commands.revoke_for_session(view, WORKER, T0, commands.Policy())

    assert [(d.type, d.work_item_id, d.data["reason"]) for d in drafts] == [
        ("lease.expired", ITEM_ID, "timeout"), ("lease.revoked", "wi_live", "session replaced")]
    assert drafts[0].data == {"leaseId": LEASE_ID, "reason": "timeout"}
    # What the sweeper appends for it at this moment, no more, no less.
    assert drafts[:1] == sweep.decide(view, context(), dispatch.redispatch, [ITEM_ID])
    after = apply(view, drafts)
    timed_out = after.items[ITEM_ID]
    assert (timed_out.state, timed_out.lease.close_reason) == (state.ACTIVE, "expired")
    assert timed_out.start_by is None  # not returned to queued: nothing to start again
    assert after.items["wi_live"].state == state.QUEUED
    start = command("work.start", {}, timed_out, command_id="cmd-restart", session_epoch=4)
    with pytest.raises(ProtocolError) as refused:
        commands.decide(after, start, context())
    assert refused.value.code == "TRANSITION_NOT_PERMITTED"  # active, its lease closed


def test_a_lease_at_its_expiry_instant_is_expired_not_revoked():
    item = work_item(state.ACTIVE)
    drafts = commands.revoke_for_session(view_of(item), WORKER, item.lease.expires_at,
                                         commands.Policy())
    assert kinds(drafts) == [("lease.expired", "timeout")]


def test_under_auto_dispatch_a_reconnection_ends_the_timed_out_attempt():
    view = view_of(expired_lease(), missions=AUTO)

    drafts = commands.revoke_for_session(view, WORKER, T0, commands.Policy())

    assert kinds(drafts) == [("lease.expired", "timeout"), ("work.ownership_expired", "lease"),
                             ("work.failed", "lease timeout")]
    assert drafts == sweep.decide(view, context(candidates={}), dispatch.redispatch)
    assert (drafts[2].data["retryAt"], drafts[2].data["exhausted"]) == (iso(10), False)


def test_a_reconnection_without_the_items_mission_leaves_an_expired_lease_to_the_sweeper():
    view = view_of(expired_lease())
    del view.missions["msn_1"]  # the view the shell loaded holds WorkItems only

    assert commands.revoke_for_session(view, WORKER, T0, commands.Policy()) == []


# --- 3. exclusive work: sequential, highest-ranked eligible first --------------------------------

def exclusive_item(item_state=state.OPEN, **fields):
    return work_item(item_state, contract=contract(exclusive=True), **fields)


def reliable(agent_id, verified):
    return replace(CANDIDATES[agent_id], reliability={frozenset({"summarize"}): {
        "verified": verified, "failed": 0}})


# w3 ranks first, then w2, then w1 (reliability), whatever order they are named in.
RANKED = {WORKER: CANDIDATES[WORKER], WORKER_2: reliable(WORKER_2, 1),
          WORKER_3: reliable(WORKER_3, 5)}


@pytest.mark.parametrize("candidates", [[WORKER, WORKER_2], "auto"])
def test_an_urgent_offer_of_exclusive_work_is_refused_naming_body_mode(candidates):
    item = exclusive_item()

    with pytest.raises(ProtocolError) as refused:
        commands.decide(view_of(item), offer_command(item, {"candidates": candidates,
                                                            "mode": "urgent"}), context())

    assert refused.value.code == "VALIDATION_ERROR"
    assert refused.value.details["path"] == "body.mode"
    assert "exclusive work is offered sequentially" in refused.value.message


def test_a_sequential_offer_of_exclusive_work_goes_to_the_highest_ranked_named_worker():
    item = exclusive_item()
    full = replace(RANKED[WORKER_2], load=2)  # no room: not eligible now

    (offered,) = commands.decide(view_of(item), offer_command(item, {
        "candidates": [WORKER, WORKER_2, WORKER_3], "mode": "sequential"}),
        context(candidates={**RANKED, WORKER_2: full}))

    assert [o["agentId"] for o in offered.data["offers"]] == [WORKER_3]
    assert offered.data["pendingCandidates"] == [WORKER, WORKER_2]  # the ineligible one last
    rules = offered.data["offers"][0]["selectionBasis"]["policyRules"]
    assert ranking.EXCLUSIVE in rules and "explicit-candidates" in rules


def test_exclusive_work_no_named_worker_may_take_is_refused():
    item = exclusive_item()
    offline = replace(CANDIDATES[WORKER], load=2)

    with pytest.raises(ProtocolError) as refused:
        commands.decide(view_of(item), offer_command(item, {"candidates": [WORKER],
                                                            "mode": "sequential"}),
                        context(candidates={WORKER: offline}))

    assert refused.value.code == "TRANSITION_NOT_PERMITTED"
    assert refused.value.details["excluded"] == {WORKER: ["capacity"]}


def test_an_automatic_sequential_offer_of_exclusive_work_records_the_rule():
    item = exclusive_item()

    (offered,) = commands.decide(view_of(item), offer_command(item, {
        "candidates": "auto", "mode": "sequential"}), context(candidates=RANKED))

    assert [o["agentId"] for o in offered.data["offers"]] == [WORKER_3]
    assert offered.data["pendingCandidates"] == [WORKER_2, WORKER]
    assert ranking.EXCLUSIVE in offered.data["offers"][0]["selectionBasis"]["policyRules"]


def test_a_decline_of_exclusive_work_moves_to_the_highest_ranked_pending_worker():
    # Queued in the order w2, w3 when offered; w3 ranks higher now.
    item = exclusive_item(state.OFFERED, offer_queue=(WORKER_2, WORKER_3),
                          offer_mode="sequential", offers=(offer(),))
    view = view_of(item, missions=AUTO)
    decline = command("work.decline_offer", {"reason": "capacity"}, item, roles=WORKER_ROLES)

    drafts = commands.decide(view, decline, context(candidates=RANKED))

    offered = drafts[-1].data
    assert [o["agentId"] for o in offered["offers"]] == [WORKER_3]
    assert offered["pendingCandidates"] == [WORKER_2]
    assert ranking.EXCLUSIVE in offered["offers"][0]["selectionBasis"]["policyRules"]


def test_work_that_is_not_exclusive_keeps_the_coordinators_order_and_urgent_sets():
    item = work_item(state.OPEN)
    (offered,) = commands.decide(view_of(item), offer_command(item, {
        "candidates": [WORKER, WORKER_3], "mode": "sequential"}), context(candidates=RANKED))
    assert [o["agentId"] for o in offered.data["offers"]] == [WORKER]
    (urgent,) = commands.decide(view_of(item), offer_command(item, {
        "candidates": [WORKER, WORKER_3], "mode": "urgent"}), context(candidates=RANKED))
    assert [o["agentId"] for o in urgent.data["offers"]] == [WORKER, WORKER_3]
