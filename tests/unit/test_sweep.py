"""The sweeper's pure decisions (mission_weave/core/sweep.py): which deadline rule fences whom,
that an item already fenced, renewed or answered yields nothing, and what automatic
dispatch does for an owner that timed out (§11.5): the attempt ends `failed` by the
server, offered again after the contract's backoff, or never when its retry budget is
spent (§11.4)."""

from dataclasses import replace

from mission_weave.core import commands, dispatch, fencing, schemas, state, sweep
from mission_weave.core.commands import Draft
from tests.unit.builders import (
    COORDINATOR,
    ITEM_ID,
    ITEM_STATES,
    LEASE_ID,
    MISSION_ID,
    OWNERSHIP_EPOCH,
    T0,
    WORKER,
    WORKER_2,
    apply,
    at,
    command,
    context,
    contract,
    iso,
    mission,
    offer,
    view_of,
    work_item,
)


def kinds(drafts) -> list:
    return [(d.type, d.data.get("reason")) for d in drafts]


def _offer_to(view, agent_id, now=T0):
    item = view.items[ITEM_ID]
    offered = command("work.offer", {"candidates": [agent_id], "mode": "sequential",
                                     "expiresAt": iso(3600)}, item, actor=COORDINATOR,
                      roles=frozenset({"coordinator"}), command_id="cmd-offer")
    return commands.decide(view, offered, context(now=now))


def _accept_by(view, agent_id, now=T0):
    accepted = command("work.accept_offer", {"contractRevision": 1}, view.items[ITEM_ID],
                       actor=f"agent:{agent_id}", roles=frozenset({"worker"}),
                       command_id=f"cmd-accept-{agent_id}")
    return commands.decide(view, accepted, context(now=now))


def test_an_expired_lease_leaves_no_live_owner_and_the_item_is_re_offerable_at_once():
    view = view_of(work_item(state.ACTIVE, owner_live=False))

    drafts = sweep.decide(view, context(), dispatch.redispatch)

    # Without autoDispatch the timeout appends lease.expired and nothing else: the
    # reassignment is the Coordinator's (§11.5 "MAY reassign").
    assert kinds(drafts) == [("lease.expired", "timeout")]
    assert drafts[0].data == {"leaseId": LEASE_ID, "reason": "timeout"}
    assert (drafts[0].work_item_id, drafts[0].mission_id) == (ITEM_ID, MISSION_ID)
    assert sweep.counts(drafts) == {"expiredLeases": 1, "expiredOwnerships": 0,
                                    "redispatched": 0, "failed": 0}

    # The owner stays recorded, but with its lease closed it is no longer live: nothing
    # of it holds the item back, and no later sweep has anything left to do.
    swept = apply(view, drafts)
    item = swept.items[ITEM_ID]
    assert (item.state, item.owner, item.ownership_epoch) == (state.ACTIVE, WORKER,
                                                              OWNERSHIP_EPOCH)
    assert item.live_lease is None and item.lease.close_reason == "expired"
    assert not fencing.owner_is_live(item, T0)
    assert sweep.decide(swept, context(now=at(86400)), dispatch.redispatch) == []

    # Re-offerable at once: the next work.offer fences it first, and the next
    # acceptance raises the epoch.
    offered = _offer_to(swept, WORKER_2)
    assert kinds(offered) == [("work.ownership_expired", "lease"), ("work.offered", None)]
    assert offered[0].data == {"agentId": WORKER, "ownershipEpoch": OWNERSHIP_EPOCH,
                               "reason": "lease"}
    reoffered = apply(swept, offered)
    assert reoffered.items[ITEM_ID].owner is None
    accepted = _accept_by(reoffered, WORKER_2)
    assert accepted[0].type == "work.offer_accepted"
    assert accepted[0].data["agentId"] == WORKER_2
    assert accepted[0].data["ownershipEpoch"] == OWNERSHIP_EPOCH + 1


AUTO = [mission(auto_dispatch=True)]


def test_under_auto_dispatch_a_lease_timeout_ends_the_attempt_and_waits_its_backoff():
    checkpoint = {"progress": {"phase": "drafting"}, "stateArtifact": None, "at": iso(-30)}
    view = view_of(work_item(state.ACTIVE, owner_live=False, last_owner=WORKER,
                             last_checkpoint=checkpoint), missions=AUTO)

    drafts = sweep.decide(view, context(), dispatch.redispatch)

    # §11.4, §11.5: expired, the expired owner fenced, and the attempt ended like a failure:
    # offered again once the contract's backoff after attempt 1 (10 s) has passed.
    assert kinds(drafts) == [("lease.expired", "timeout"), ("work.ownership_expired", "lease"),
                             ("work.failed", "lease timeout")]
    assert drafts[1].data == {"agentId": WORKER, "ownershipEpoch": OWNERSHIP_EPOCH,
                              "reason": "lease"}
    failed = drafts[2].data
    assert (failed["by"], failed["attempt"], failed["retryAt"], failed["exhausted"]) == (
        "system", 1, iso(10), False)
    assert "attempt 1 of 3" in failed["evidence"][0]["result"]
    assert sweep.counts(drafts) == {"expiredLeases": 1, "expiredOwnerships": 1,
                                    "redispatched": 0, "failed": 1}

    waiting = apply(view, drafts)
    item = waiting.items[ITEM_ID]
    assert (item.state, item.owner, item.retry_at, item.attempts) == (
        state.FAILED, None, at(10), 1)
    assert sweep.decide(waiting, context(now=at(9)), dispatch.redispatch) == []
    (retried,) = sweep.decide(waiting, context(now=at(10)), dispatch.redispatch)
    assert retried.type == "work.offered"
    assert retried.data["autoDispatch"] == {"after": "retry", "resumeFrom": checkpoint,
                                            "skipped": []}
    accepted = _accept_by(apply(waiting, [retried], at(10)),
                          retried.data["offers"][0]["agentId"], now=at(10))
    assert accepted[0].data["ownershipEpoch"] == OWNERSHIP_EPOCH + 1


def test_under_auto_dispatch_a_missed_start_by_is_an_attempt_and_waits_its_backoff_too():
    view = view_of(work_item(state.QUEUED, owner_live=False, last_owner=WORKER),
                   missions=AUTO)

    drafts = sweep.decide(view, context(), dispatch.redispatch)

    assert kinds(drafts) == [("work.ownership_expired", "start_by"),
                             ("work.failed", "start-by deadline missed")]
    assert drafts[0].data["attempt"] == 1
    assert (drafts[1].data["attempt"], drafts[1].data["retryAt"]) == (1, iso(10))
    assert drafts[1].data["evidence"][0]["method"] == "start-by-deadline"
    assert apply(view, drafts).items[ITEM_ID].attempts == 1


def test_a_blocked_lease_running_out_is_not_reassigned():
    view = view_of(work_item(state.BLOCKED, owner_live=False), missions=AUTO)

    # The blocker still needs its resolution: the Coordinator's work.unblock reopens it.
    assert kinds(sweep.decide(view, context(), dispatch.redispatch)) == [
        ("work.ownership_expired", "blocked_lease")]


def test_a_timed_out_attempt_counts_against_max_attempts():
    # maxAttempts is 3: the third attempt timing out spends the budget, as a failure would.
    for attempts in (3, 99):
        view = view_of(work_item(state.ACTIVE, owner_live=False, attempts=attempts),
                       missions=AUTO)

        drafts = sweep.decide(view, context(), dispatch.redispatch)

        assert kinds(drafts) == [("lease.expired", "timeout"),
                                 ("work.ownership_expired", "lease"),
                                 ("work.failed", "lease timeout")]
        failed = drafts[2].data
        assert (failed["by"], failed["permanent"], failed["attempt"]) == ("system", False,
                                                                          attempts)
        assert (failed["retryAt"], failed["exhausted"], failed["exhaustedBy"]) == (
            None, True, "attempts")
        (evidence,) = failed["evidence"]
        assert (evidence["producer"], evidence["method"], evidence["criteria"]) == (
            "system", "lease-timeout", [])
        assert LEASE_ID in evidence["result"] and "exhausted by attempts" in evidence["result"]
        schemas.check_body("work.fail", {"evidence": failed["evidence"]})  # valid Evidence

        ended = apply(view, drafts)
        item = ended.items[ITEM_ID]
        assert (item.state, item.owner, item.retry_exhausted) == (state.FAILED, None,
                                                                  "attempts")
        # The Coordinator sees it failed; the sweeper never offers it again.
        assert sweep.decide(ended, context(now=at(86400)), dispatch.redispatch) == []


def test_a_timed_out_attempt_past_the_retry_deadline_is_not_reassigned():
    item = work_item(state.ACTIVE, owner_live=False,
                     contract=contract(retry={"maxAttempts": 3, "deadline": iso(-10), "backoff": {
                         "strategy": "fixed", "initialSeconds": 5, "maxSeconds": 5}}))

    drafts = sweep.decide(view_of(item, missions=AUTO), context(), dispatch.redispatch)

    assert kinds(drafts)[-1] == ("work.failed", "lease timeout")
    assert drafts[-1].data["exhaustedBy"] == "deadline"


def test_a_timed_out_item_nobody_may_take_when_its_retry_is_due_waits_for_someone():
    view = view_of(work_item(state.ACTIVE, owner_live=False), missions=AUTO)

    # The timeout's decision ranks nobody: the same with no candidate at all.
    drafts = sweep.decide(view, context(candidates={}), dispatch.redispatch)

    assert kinds(drafts)[-1] == ("work.failed", "lease timeout")
    assert (drafts[-1].data["retryAt"], drafts[-1].data["exhausted"]) == (iso(10), False)
    waiting = apply(view, drafts)
    assert sweep.decide(waiting, context(now=at(10), candidates={}), dispatch.redispatch) == []
    (retried,) = sweep.decide(waiting, context(now=at(11)), dispatch.redispatch)
    assert (retried.type, retried.data["autoDispatch"]["after"]) == ("work.offered", "retry")


def test_the_expiry_of_an_item_due_reassignment_is_decided_with_it_under_the_lock():
    auto = view_of(work_item(state.ACTIVE, owner_live=False, item_id="wi_a"),
                   work_item(state.QUEUED, owner_live=False, item_id="wi_b"), missions=AUTO)
    manual = view_of(work_item(state.ACTIVE, owner_live=False, item_id="wi_c"))

    # Not prepared before the lock: a timeout and its reassignment are one transaction.
    assert sweep.split(auto, T0) == ([], ["wi_a", "wi_b"])
    drafts, dispatching = sweep.split(manual, T0)
    assert (kinds(drafts), dispatching) == ([("lease.expired", "timeout")], [])


def test_the_sweep_decides_only_the_items_it_is_for():
    due = work_item(state.ACTIVE, owner_live=False, item_id="wi_a")
    dependency = work_item(state.ACTIVE, owner_live=False, item_id="wi_b")
    view = view_of(due, dependency)

    drafts = sweep.decide(view, context(), dispatch.redispatch, ["wi_a"])

    assert [(d.work_item_id, d.type) for d in drafts] == [("wi_a", "lease.expired")]


def test_a_lease_expires_at_its_expiry_instant_not_before():
    item = work_item(state.ACTIVE)
    view = view_of(item)
    assert sweep.decide(view, context(now=item.lease.expires_at - (at(1) - at(0)))) == []
    assert kinds(sweep.decide(view, context(now=item.lease.expires_at))) == [
        ("lease.expired", "timeout")]


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
                                    "redispatched": 1, "failed": 0}


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
    assert [(d.work_item_id, d.type) for d in drafts] == [
        ("wi_a", "work.ownership_expired"), ("wi_b", "lease.expired")]
