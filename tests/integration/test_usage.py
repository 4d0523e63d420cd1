"""usage.record (§11.5): the lease holder's six-dimension usage is charged to the WorkItem
and its whole budget ancestry in one event, or refused with BUDGET_EXCEEDED and nothing
appended; money spent counts against the retry cost budget (§11.4)."""

from apps.ledger.verify import verify_group
from mission_weave.core import state
from tests.support import Scenario, assert_error, evidence

MAX = {"financial": {"amount": "10.00", "currency": "USD"}, "tokens": 1000, "toolCalls": 10,
       "computeSeconds": 600, "wallClockSeconds": 3600, "sideEffects": 1}


def mission_usage(s, mission_id=None) -> dict:
    return s.c.get(f"missions/{mission_id or s.mission_id}").json()["usage"]


def test_usage_is_charged_to_the_item_and_its_mission(db, clock):
    s = Scenario()
    item_id, _ = s.running(budgets=MAX)
    events = s.w1.ok("usage.record", {"tokens": 400, "financial": {"amount": "2.50",
                                                                   "currency": "USD"}},
                     **s.lease_fields(item_id))
    s.w1.ok("usage.record", {"tokens": 100, "toolCalls": 2}, **s.lease_fields(item_id))

    assert events[0]["type"] == state.USAGE_RECORDED
    assert events[0]["data"]["delta"]["tokens"] == 400
    expected = {"tokens": 500, "toolCalls": 2,
                "financial": {"amount": "2.50", "currency": "USD"}}
    assert s.item(item_id)["usage"] == expected
    assert mission_usage(s) == expected
    assert verify_group(s.world.group.id) == []


def test_an_overflow_of_the_item_budget_is_refused_and_changes_nothing(db, clock):
    s = Scenario()
    item_id, _ = s.running(budgets=MAX)
    s.w1.ok("usage.record", {"tokens": 900}, **s.lease_fields(item_id))
    head = s.world.head

    error = assert_error(s.w1.send("usage.record", {"tokens": 101, "sideEffects": 1},
                                   **s.lease_fields(item_id)), 409, "BUDGET_EXCEEDED")

    assert error["details"] == {"level": "workItem", "id": item_id, "dimension": "tokens",
                                "budget": 1000, "wouldUse": 1001}
    assert s.world.head == head
    assert s.item(item_id)["usage"] == {"tokens": 900}


def test_the_mission_budget_bounds_the_sum_of_its_items(db, clock):
    s = Scenario()
    s.mission_id = s.c.ok("mission.create", {
        "title": "Tight", "ownerId": s.owner.principal, "coordinatorId": s.c.principal,
        "budgets": {"tokens": 1500}})[0]["missionId"]
    first, _ = s.running(budgets=MAX)
    second, _ = s.running(budgets=MAX)
    s.w1.ok("usage.record", {"tokens": 1000}, **s.lease_fields(first))
    head = s.world.head

    error = assert_error(s.w1.send("usage.record", {"tokens": 600}, **s.lease_fields(second)),
                         409, "BUDGET_EXCEEDED")

    assert (error["details"]["level"], error["details"]["id"]) == ("mission", s.mission_id)
    assert s.world.head == head and mission_usage(s) == {"tokens": 1000}


def test_usage_in_a_child_mission_is_charged_to_the_parent_item_too(db, clock):
    s = Scenario()
    parent = s.authorize(budgets={**MAX, "tokens": 300})
    s.in_child_mission(parent)
    child_item, _ = s.running(budgets=MAX)

    s.w1.ok("usage.record", {"tokens": 250}, **s.lease_fields(child_item))
    error = assert_error(s.w1.send("usage.record", {"tokens": 100},
                                   **s.lease_fields(child_item)), 409, "BUDGET_EXCEEDED")

    assert (error["details"]["level"], error["details"]["id"]) == ("workItem", parent)
    assert s.item(parent)["usage"] == {"tokens": 250}
    assert verify_group(s.world.group.id) == []


def test_only_the_lease_holder_records_usage(db, clock):
    s = Scenario()
    item_id, _ = s.running(budgets=MAX)
    fields = s.lease_fields(item_id)
    assert_error(s.w2.send("usage.record", {"tokens": 1}, **fields), 409, "STALE_LEASE")
    assert_error(s.w1.send("usage.record", {"tokens": 1}, **{**fields, "leaseId": "lease_old"}),
                 409, "STALE_LEASE")
    assert_error(s.w1.send("usage.record", {}, **fields), 400, "VALIDATION_ERROR")
    assert_error(s.w1.send("usage.record", {"tokens": -1}, **fields), 400, "VALIDATION_ERROR")
    assert_error(s.w1.send("usage.record", {"gpuHours": 1}, **fields), 400, "VALIDATION_ERROR")


def test_money_spent_exhausts_the_retry_cost_budget(db, clock):
    s = Scenario()
    retry = {"maxAttempts": 5, "backoff": {"strategy": "fixed", "initialSeconds": 1,
                                           "maxSeconds": 1},
             "maxCost": {"amount": "3.00", "currency": "USD"}}
    item_id, _ = s.running(budgets=MAX, retry=retry)
    s.w1.ok("usage.record", {"financial": {"amount": "3.00", "currency": "USD"}},
            **s.lease_fields(item_id))

    failed = s.w1.ok("work.fail", {"evidence": [evidence(["ac1"], result="tool outage")]},
                     **s.lease_fields(item_id))[-1]

    assert (failed["data"]["exhausted"], failed["data"]["exhaustedBy"]) == (True, "cost")
