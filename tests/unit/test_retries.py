"""Retries of §11.4 in the pure core: what an attempt is, backoff arithmetic, the retry
budgets a work.fail and automatic dispatch are held to (a Coordinator's explicit
work.offer is not: §10.2, failed returns control to the Coordinator), and the public
idempotency key."""

from dataclasses import replace
from datetime import timedelta

from mission_weave.core import commands, dispatch, retries, state
from mission_weave.protocol import idempotency
from tests.unit import builders
from tests.unit.builders import COORDINATOR, WORKER_2, at, iso, progress

EXPONENTIAL = {"maxAttempts": 3, "backoff": {"strategy": "exponential", "initialSeconds": 10,
                                             "maxSeconds": 300, "multiplier": 2}}
FAIL = {"evidence": [builders.evidence(["ac1"], result="tool outage")], "reason": "outage"}


def retry(**overrides):
    return {**EXPONENTIAL, **overrides}


def active(attempts=1, **retry_overrides):
    item = builders.work_item(state.ACTIVE, attempts=attempts,
                              contract=builders.contract(retry=retry(**retry_overrides)))
    return item, builders.view_of(item)


def fail(view, item, body=None, now=builders.T0, **fields):
    command = builders.command("work.fail", {**FAIL, **(body or {})}, item,
                               command_id="cmd-fail", **fields)
    drafts = commands.decide(view, command, builders.context(now=now))
    return drafts[-1], builders.apply(view, drafts, now)


def automatic(view, now):
    """What the sweeper's automatic dispatch appends for the item at `now`, its Mission
    asking for it (autoDispatch)."""
    view = view.copy()
    view.missions[builders.MISSION_ID] = replace(view.missions[builders.MISSION_ID],
                                                 auto_dispatch=True)
    return dispatch.redispatch(view, view.items[builders.ITEM_ID], builders.context(now=now))


def offer(view, now, command_id="cmd-offer"):
    item = view.items[builders.ITEM_ID]
    command = builders.command("work.offer", {"candidates": [WORKER_2], "mode": "sequential",
                                              "expiresAt": (now + timedelta(hours=1)).isoformat()},
                               item, actor=COORDINATOR, roles={"coordinator"},
                               command_id=command_id)
    return commands.decide(view, command, builders.context(now=now))


# --- backoff ----------------------------------------------------------------------------------

def test_exponential_backoff_doubles_from_the_initial_wait_up_to_the_cap():
    assert [retries.backoff_seconds(EXPONENTIAL, n) for n in range(1, 8)] == [
        10, 20, 40, 80, 160, 300, 300]


def test_fixed_backoff_waits_the_same_every_time():
    fixed = retry(backoff={"strategy": "fixed", "initialSeconds": 30, "maxSeconds": 60})

    assert [retries.backoff_seconds(fixed, n) for n in (1, 2, 5)] == [30, 30, 30]


def test_the_multiplier_defaults_to_two_and_a_huge_one_cannot_overflow():
    default = retry(backoff={"strategy": "exponential", "initialSeconds": 5, "maxSeconds": 100})
    huge = retry(backoff={"strategy": "exponential", "initialSeconds": 1, "maxSeconds": 10,
                          "multiplier": 1e300})

    assert retries.backoff_seconds(default, 3) == 20
    assert retries.backoff_seconds(huge, 100) == 10


def test_a_fractional_multiplier_rounds_the_wait_up():
    gentle = retry(backoff={"strategy": "exponential", "initialSeconds": 10, "maxSeconds": 100,
                            "multiplier": 1.5})

    assert retries.backoff_seconds(gentle, 2) == 15
    assert retries.backoff_seconds(gentle, 3) == 23


# --- what an attempt is -------------------------------------------------------------------------

def start(view, now, command_id):
    item = view.items[builders.ITEM_ID]
    drafts = commands.decide(view, builders.command("work.start", {}, item,
                                                    command_id=command_id),
                             builders.context(now=now))
    return drafts[0].data, builders.apply(view, drafts, now)


def test_the_first_start_of_an_epoch_is_a_new_attempt_and_a_resume_is_not():
    view = builders.view_of(builders.work_item(state.QUEUED))
    first, view = start(view, builders.T0, "cmd-start-1")
    checkpoint = builders.command("work.checkpoint", {"progress": progress()},
                                  view.items[builders.ITEM_ID], command_id="cmd-cp")
    view = builders.apply(view, commands.decide(view, checkpoint, builders.context(now=at(60))),
                          at(60))

    resumed, view = start(view, at(120), "cmd-start-2")

    assert (first["attempt"], first["resumed"]) == (1, False)
    assert (resumed["attempt"], resumed["resumed"]) == (1, True)
    assert resumed["idempotencyKey"] == first["idempotencyKey"]
    assert resumed["leaseId"] != first["leaseId"]
    assert view.items[builders.ITEM_ID].attempts == 1


def test_a_start_under_a_new_ownership_epoch_is_the_next_attempt_with_its_own_key():
    item = builders.work_item(state.QUEUED, ownership_epoch=2, attempts=1,
                              lease=builders.lease(closed="revoked", ownership_epoch=1))
    data, after = start(builders.view_of(item), builders.T0, "cmd-start")

    assert (data["attempt"], data["resumed"]) == (2, False)
    assert data["idempotencyKey"] == idempotency.idempotency_key(
        builders.MISSION_ID, builders.ITEM_ID, 2, "attempt-2")
    assert after.items[builders.ITEM_ID].attempts == 2


# --- the public idempotency key ------------------------------------------------------------------

def test_the_idempotency_key_is_stable_and_depends_on_every_field():
    key = idempotency.idempotency_key("msn_1", "wi_1", 1, "op-1")

    assert key == idempotency.idempotency_key("msn_1", "wi_1", 1, "op-1")
    assert key.startswith("idem_") and len(key) == 5 + 32
    assert len({key, idempotency.idempotency_key("msn_2", "wi_1", 1, "op-1"),
                idempotency.idempotency_key("msn_1", "wi_2", 1, "op-1"),
                idempotency.idempotency_key("msn_1", "wi_1", 2, "op-1"),
                idempotency.idempotency_key("msn_1", "wi_1", 1, "op-2")}) == 5
    # Fields never run together: ("a", "b1") and ("ab", "1") differ.
    assert idempotency.idempotency_key("a", "b1", 1, "x") != idempotency.idempotency_key(
        "ab", "1", 1, "x")


def test_commands_use_the_public_helper():
    assert commands.idempotency_key is idempotency.idempotency_key


# --- work.fail within the budget ---------------------------------------------------------------

def test_a_retryable_failure_records_when_the_retry_may_be_offered():
    item, view = active(attempts=2)

    event, after = fail(view, item)

    assert event.type == "work.failed"
    assert event.data["retryAt"] == iso(20)  # backoff after the 2nd attempt: 10 × 2
    assert (event.data["exhausted"], event.data["exhaustedBy"]) == (False, None)
    assert event.data["attempt"] == 2
    assert after.items[item.id].state == state.FAILED
    assert after.items[item.id].retry_at == at(20)
    assert after.items[item.id].retry_exhausted is None


def test_the_coordinator_may_fail_it_too_and_the_lease_is_revoked():
    item, view = active()

    own = {"evidence": [builders.evidence(["ac1"], producer=COORDINATOR)]}
    event, after = fail(view, item, own, actor=COORDINATOR, roles={"coordinator"})

    assert event.data["retryAt"] == iso(10)
    assert after.items[item.id].lease.close_reason == "revoked"


def test_the_backoff_holds_automatic_retries_but_not_the_coordinators_offer():
    item, view = active()
    _, view = fail(view, item)

    # The sweeper's automatic dispatch waits for the backoff to end ...
    assert automatic(view, at(9)) == []
    assert retries.refusal(view.items[item.id], at(9)) == {
        "reason": "backoff", "attempts": 1, "maxAttempts": 3, "retryAt": iso(10)}
    (retried,) = automatic(view, at(10))
    assert (retried.type, retried.data["autoDispatch"]["after"]) == ("work.offered", "retry")
    # ... a Coordinator decides for itself: its explicit offer passes at once (§10.2).
    assert offer(view, at(1))[-1].type == "work.offered"


# --- exhaustion ---------------------------------------------------------------------------------

def test_the_last_attempts_failure_is_exhausted_and_only_a_coordinator_may_retry_it():
    item, view = active(attempts=3)

    event, after = fail(view, item)

    assert event.data["retryAt"] is None
    assert (event.data["exhausted"], event.data["exhaustedBy"]) == (True, "attempts")
    assert event.data["evidence"] == FAIL["evidence"]
    assert automatic(after, at(3600)) == []
    assert retries.refusal(after.items[item.id], at(3600))["reason"] == "attempts"
    assert offer(after, at(3600))[-1].type == "work.offered"


def test_a_permanent_failure_is_never_retried_automatically_but_a_coordinator_may():
    item, view = active(attempts=1)

    event, after = fail(view, item, {"permanent": True})

    assert (event.data["retryAt"], event.data["exhausted"]) == (None, True)
    assert event.data["exhaustedBy"] == "permanent"
    assert automatic(after, at(86400)) == []
    assert retries.refusal(after.items[item.id], at(3600))["reason"] == "permanent"
    assert offer(after, at(1))[-1].type == "work.offered"


def test_a_contract_revision_lifts_a_permanent_failure_but_not_the_attempt_count():
    item, view = active(attempts=1)
    _, view = fail(view, item, {"permanent": True})
    revise = builders.command("work.revise_contract",
                              {"contract": builders.contract(goal="A smaller summary")},
                              view.items[item.id], actor=COORDINATOR, command_id="cmd-revise")

    view = builders.apply(view, commands.decide(view, revise, builders.context()))

    assert view.items[item.id].retry_exhausted is None
    assert retries.refusal(view.items[item.id], at(3600)) is None


def test_a_failure_past_the_retry_deadline_is_exhausted():
    item, view = active(deadline=iso(0))

    event, _ = fail(view, item)

    assert (event.data["exhausted"], event.data["exhaustedBy"]) == (True, "deadline")


def test_a_backoff_ending_past_the_retry_deadline_is_exhausted():
    item, view = active(deadline=iso(5))

    event, _ = fail(view, item)

    assert event.data["retryAt"] is None
    assert event.data["exhaustedBy"] == "deadline"


def test_no_automatic_retry_after_the_retry_deadline_but_a_coordinators_offer_passes():
    item, view = active(deadline=iso(60))
    _, view = fail(view, item)

    assert automatic(view, at(59))[-1].type == "work.offered"
    assert automatic(view, at(60)) == []
    assert retries.refusal(view.items[item.id], at(60))["reason"] == "deadline"
    assert offer(view, at(60))[-1].type == "work.offered"


def test_a_contract_revision_lowering_max_attempts_refuses_the_automatic_retry():
    item, view = active(attempts=2)
    _, view = fail(view, item)
    lowered = replace(view.items[item.id], contract=builders.contract(retry=retry(maxAttempts=2)))

    assert retries.refusal(lowered, at(3600))["reason"] == "attempts"


# --- cost -----------------------------------------------------------------------------------------

MAX_COST = {"amount": "5.00", "currency": "USD"}


def test_cost_is_within_budget_until_the_spend_reaches_max_cost():
    assert not retries.cost_exceeded(MAX_COST, None)
    assert not retries.cost_exceeded(None, {"amount": "9", "currency": "USD"})
    assert not retries.cost_exceeded(MAX_COST, {"amount": "4.99", "currency": "USD"})
    assert retries.cost_exceeded(MAX_COST, {"amount": "5.00", "currency": "USD"})
    assert retries.cost_exceeded(MAX_COST, {"amount": "1", "currency": "EUR"})


def test_a_spent_cost_budget_exhausts_the_failure_and_refuses_the_automatic_retry():
    fresh, _ = active(maxCost=MAX_COST)
    item = replace(fresh, usage={"financial": {"amount": "7.50", "currency": "USD"}})

    outcome = retries.after_failure(item, False, builders.T0)

    assert (outcome.retry_at, outcome.exhausted_by) == (None, "cost")
    assert retries.refusal(replace(item, state=state.FAILED), builders.T0)["reason"] == "cost"
    assert retries.refusal(replace(fresh, state=state.FAILED), builders.T0) is None


def test_a_failure_from_a_child_mission_or_mission_end_sets_no_retry_time():
    item = builders.work_item(state.FAILED)

    assert item.retry_at is None and item.retry_exhausted is None
    assert retries.refusal(item, builders.T0) is None
