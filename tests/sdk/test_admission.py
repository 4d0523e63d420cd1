"""Admission control (§10.3, sdk/src/mission_weave/sdk/admission.py) without a server: one test
(or more) per dimension of the pure decision, the version-range syntax, the fold of
offer windows and usage, and the Worker declining through it with its estimate hooks."""

from datetime import UTC, datetime, timedelta

import pytest

from mission_weave.protocol.timefmt import format_time
from mission_weave.sdk import admission
from mission_weave.sdk.admission import Facts, admit, assess, version_matches
from tests.samples import contract
from tests.sdk.test_queues import Log, accepted, authorized
from tests.sdk.test_worker_decisions import offered, tick, worker_on

NOW = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
CARD = {"version": "1", "maxConcurrency": 2,
        "capabilities": [{"id": "summarize", "version": "1"}]}


def facts(**overrides) -> Facts:
    base = {"now": NOW, "card": CARD, "roles": frozenset({"worker"}), "slots": 2,
            "estimate_seconds": 60, "start_by": NOW + timedelta(minutes=10)}
    return Facts(**{**base, **overrides})


def reasons(work_contract, **overrides) -> list:
    return [(d.reason, d.dimension) for d in assess(work_contract, facts(**overrides))]


def test_a_contract_the_worker_can_commit_to_is_admitted():
    assert admit(contract(), facts()) is None


# --- the seven dimensions -------------------------------------------------------------

def test_queue_capacity_declines_when_enough_accepted_items_wait_for_a_slot():
    assert reasons(contract(), waiting=1, owned=1, queue_capacity=1) == [
        ("capacity", "queue capacity")]
    assert reasons(contract(), waiting=1, owned=1, queue_capacity=2) == []
    # by default the queue holds as many as there are slots (concurrency says it first)
    assert reasons(contract(), waiting=2, owned=2, slots=2) == [
        ("capacity", "concurrency"), ("capacity", "queue capacity")]


def test_concurrency_declines_when_every_slot_is_owned():
    assert reasons(contract(), owned=2, waiting=0, slots=2) == [("capacity", "concurrency")]
    assert reasons(contract(), owned=1, waiting=0, slots=2) == []
    decline = admit(contract(), facts(owned=2, slots=2))
    assert decline.body() == {"reason": "capacity",
                              "detail": "no free slot: 2 WorkItems owned, maxConcurrency 2"}


def test_a_revision_of_an_owned_item_is_not_counted_against_capacity():
    assert reasons(contract(), owned=2, waiting=2, slots=2, check_capacity=False) == []


def test_capability_ids_and_exact_versions_come_from_the_card():
    assert reasons(contract(capabilities=[{"id": "welding", "version": "1"}])) == [
        ("capability", "capability")]
    assert reasons(contract(capabilities=[{"id": "summarize", "version": "2"}])) == [
        ("capability", "capability")]
    decline = admit(contract(capabilities=[{"id": "summarize", "version": "2"}]), facts())
    assert decline.detail == "no matching capability for summarize 2"


def test_a_declared_version_range_adds_versions_to_the_cards_exact_ones():
    ranged = {"summarize": ">=1,<3"}
    for version, ok in (("1", True), ("2", True), ("2.9", True), ("3", False), ("0.9", False)):
        needed = contract(capabilities=[{"id": "summarize", "version": version}])
        assert (reasons(needed, capability_ranges=ranged) == []) is ok, version
    # the card's exact version stays accepted even outside the range
    assert reasons(contract(), capability_ranges={"summarize": ">=2"}) == []
    # a range for an id the card does not list: the worker's own declaration counts
    assert reasons(contract(capabilities=[{"id": "translate", "version": "4"}]),
                   capability_ranges={"translate": "*"}) == []


@pytest.mark.parametrize("version, spec, matches", [
    ("1", "1", True), ("1", "==1", True), ("1.0", "1", True), ("1.10", ">1.9", True),
    ("2", ">=1,<3", True), ("3", ">=1,<3", False), ("2", "!=2", False), ("7", "*", True),
    ("beta", "beta", True), ("beta", "!=alpha", True), ("beta", ">=1", False),
    ("1", ">=beta", False), ("1.2.3", "<=1.2.3", True), ("1.2.4", "<=1.2.3", False),
])
def test_version_ranges(version, spec, matches):
    assert version_matches(version, spec) is matches


@pytest.mark.parametrize("spec", ["", " ", ">=", ">=1,,<2", "=>1", "1 2"])
def test_a_malformed_range_is_refused(spec):
    with pytest.raises(admission.VersionSpecError):
        admission.parse_spec(spec)


def test_authorization_needs_the_worker_role_and_contract_permission_for_what_it_uses():
    assert reasons(contract(), roles=frozenset({"reviewer"})) == [
        ("authorization", "authorization")]
    assert reasons(contract(), roles=None) == []  # membership not read: the server decides
    # tests/samples' contract allows tools [search] and operations [read]
    assert reasons(contract(), needs={"tools": ("search",), "operations": ("read",)}) == []
    decline = admit(contract(), facts(needs={"tools": ("search", "browser"),
                                             "operations": ("write",)}))
    assert (decline.reason, decline.detail) == (
        "authorization", "the contract does not allow what this worker uses: tools browser; "
        "operations write")
    assert reasons(contract(allowed={}), needs={"data": ("crm",)}) == [
        ("authorization", "authorization")]


def test_dependencies_not_satisfied_in_the_workers_view_decline():
    assert reasons(contract(), dependencies_met=False) == [("dependency", "dependency")]
    assert "all_verified" in admit(contract(), facts(dependencies_met=False)).detail


def test_a_deadline_the_estimate_cannot_meet_declines():
    soon = contract(deadline=format_time(NOW + timedelta(minutes=5)))
    assert reasons(soon, estimate_seconds=240) == []
    assert reasons(soon, estimate_seconds=360) == [("deadline", "deadline")]
    assert reasons(contract(deadline=format_time(NOW - timedelta(seconds=1)))) == [
        ("deadline", "deadline")]
    # waiting for a slot counts too
    assert reasons(soon, estimate_seconds=240, start_delay_seconds=120) == [
        ("deadline", "deadline")]


def test_a_start_by_the_worker_cannot_meet_declines():
    assert reasons(contract(), start_by=NOW + timedelta(seconds=30),
                   start_delay_seconds=60) == [("deadline", "deadline")]
    assert reasons(contract(), start_by=NOW + timedelta(seconds=30),
                   start_delay_seconds=10) == []
    decline = admit(contract(), facts(start_by=NOW, start_delay_seconds=1))
    assert "startBy 2026-11-29T08:00:00Z" in decline.detail


def test_a_budget_whose_remainder_cannot_cover_the_estimate_declines():
    # tests/samples: tokens 100000, wallClockSeconds 3600, financial 10.00 USD
    assert reasons(contract(), estimate_cost={"tokens": 90000}) == []
    assert reasons(contract(), estimate_cost={"tokens": 90000},
                   usage={"tokens": 20000}) == [("budget", "budget")]
    decline = admit(contract(), facts(estimate_cost={"tokens": 90000},
                                      usage={"tokens": 20000}))
    assert decline.detail == ("the tokens budget cannot cover it: estimate 90000, remaining "
                              "80000 (budget 100000, used 20000)")
    assert reasons(contract(), estimate_cost={"wallClockSeconds": 3601}) == [
        ("budget", "budget")]
    assert reasons(contract(), estimate_cost={"sideEffects": 1}) == [("budget", "budget")]


def test_money_is_compared_as_decimals_in_the_budgets_currency():
    usd = {"currency": "USD"}
    assert reasons(contract(), estimate_cost={"financial": {"amount": "9.99", **usd}}) == []
    assert reasons(contract(), estimate_cost={"financial": {"amount": "4.00", **usd}},
                   usage={"financial": {"amount": "6.50", **usd}}) == [("budget", "budget")]
    assert reasons(contract(), estimate_cost={"financial": {"amount": "1", "currency": "EUR"}}
                   ) == [("budget", "budget")]


def test_a_dimension_the_contract_does_not_budget_never_declines():
    unbudgeted = contract(budgets={"wallClockSeconds": 600})
    assert reasons(unbudgeted, estimate_cost={"tokens": 10**9, "sideEffects": 5,
                                              "financial": {"amount": "100", "currency": "USD"}}
                   ) == []


def test_every_failing_dimension_is_reported_and_the_first_is_sent():
    bad = contract(capabilities=[{"id": "welding", "version": "1"}],
                   deadline=format_time(NOW - timedelta(hours=1)))
    found = reasons(bad, roles=frozenset(), dependencies_met=False, owned=2, waiting=2,
                    estimate_cost={"tokens": 10**6})
    assert [r for r, _ in found] == ["authorization", "capability", "dependency", "capacity",
                                     "capacity", "deadline", "budget"]
    assert admit(bad, facts(roles=frozenset())).reason == "authorization"


# --- the fold of what admission needs beyond queues.py ---------------------------------

def test_offer_windows_and_usage_are_folded_from_the_log_and_a_snapshot():
    log = Log()
    authorized(log, "a")
    log.add("work.offered", "a", mode="sequential", offers=[], startWithinSeconds=45)
    log.add(admission.USAGE_EVENT, "a", chargedTo=[
        {"level": "workItem", "id": "a", "usage": {"tokens": 700}},
        {"level": "mission", "id": "m1", "usage": {"tokens": 900}}])
    view = admission.AdmissionView()
    for event in log.events + log.events:  # delivered twice: folded once
        view.apply(event)

    assert view.start_within == {"a": 45}
    assert view.usage == {"a": {"tokens": 700}}

    view.load_snapshot(10, [{"id": "b", "start_within_seconds": None,
                             "usage": {"toolCalls": 3}}])
    assert (view.applied, view.usage, view.start_within) == (10, {"b": {"toolCalls": 3}},
                                                             {"b": None})


# --- the Worker declines through it --------------------------------------------------

def decisions(client) -> dict:
    return {i: (t, b) for t, i, b in client.commands
            if t in ("work.accept_offer", "work.decline_offer")}


def test_the_worker_declines_a_deadline_its_estimate_cannot_meet():
    log = Log()
    soon = format_time(datetime.now(UTC) + timedelta(minutes=5))
    authorized(log, "quick", deadline=soon)
    authorized(log, "slow", deadline=soon, goal="Write the long report")
    offered(log, "quick")
    offered(log, "slow")
    worker, client = worker_on(log)
    worker.estimate_seconds = lambda c: 3600 if "long" in c["goal"] else 30

    tick(worker)

    made = decisions(client)
    assert made["quick"] == ("work.accept_offer", {"contractRevision": 1})
    assert made["slow"][0] == "work.decline_offer"
    assert made["slow"][1]["reason"] == "deadline"
    assert "after the deadline" in made["slow"][1]["detail"]


def test_the_worker_declines_a_start_by_the_offer_sets_too_short_for_it():
    log = Log()
    authorized(log, "a")
    offered(log, "a")
    log.events[-1]["data"]["startWithinSeconds"] = 5
    authorized(log, "busy")
    accepted(log, "busy", epoch=1)  # owns one already: with one slot the next must wait
    worker, _client = worker_on(log)
    worker.slots.capacity, worker.offers.queue_capacity = 1, 5
    worker.estimate_seconds = lambda c: 60

    item = worker.work["grp_q"].items["a"]
    found = assess(item.contract, worker.admission_facts("grp_q", item,
                                                         datetime.now(UTC)))

    # every slot taken: concurrency declines first; the startBy is missed too (its one
    # slot frees in about 60 s, the offer wants a start within 5)
    assert [(d.reason, d.dimension) for d in found] == [("capacity", "concurrency"),
                                                        ("deadline", "deadline")]
    assert "after its startBy" in found[1].detail


def test_the_worker_declines_what_its_cost_estimate_does_not_fit_in_the_remaining_budget():
    log = Log()
    authorized(log, "a")
    authorized(log, "b")
    offered(log, "a")
    offered(log, "b")
    log.add(admission.USAGE_EVENT, "b", chargedTo=[
        {"level": "workItem", "id": "b", "usage": {"tokens": 60000}}])
    worker, client = worker_on(log)
    worker.estimate_cost = lambda c: {"tokens": 50000}

    tick(worker)

    made = decisions(client)
    assert made["a"][0] == "work.accept_offer"
    assert made["b"] == ("work.decline_offer", {
        "reason": "budget", "detail": "the tokens budget cannot cover it: estimate 50000, "
        "remaining 40000 (budget 100000, used 60000)"})


def test_the_default_cost_estimate_is_the_duration_estimate_as_wall_clock():
    log = Log()
    authorized(log, "a", budgets={"wallClockSeconds": 100})
    offered(log, "a")
    worker, client = worker_on(log)
    worker.slots.durations["grp_q"] = [150.0, 170.0, 190.0]  # its past runs: median 170 s

    assert worker.estimate_seconds({}) == 170
    assert worker.estimate_cost({}) == {"wallClockSeconds": 170}
    tick(worker)
    assert decisions(client)["a"][1]["reason"] == "budget"


def test_the_worker_declines_an_item_whose_dependencies_its_view_does_not_see_met():
    log = Log()
    authorized(log, "first")
    authorized(log, "second", dependencies={"workItems": ["first"], "policy": "all_verified"})
    offered(log, "second")
    worker, client = worker_on(log)

    tick(worker)

    assert decisions(client)["second"][1]["reason"] == "dependency"


def test_the_worker_declines_without_the_worker_role_or_permission_for_its_tools():
    log = Log()
    authorized(log, "a")
    offered(log, "a")
    worker, client = worker_on(log)
    worker.offers.needs = {"tools": ("browser",)}

    tick(worker)

    assert decisions(client)["a"][1]["reason"] == "authorization"
    assert "tools browser" in decisions(client)["a"][1]["detail"]

    log2 = Log()
    authorized(log2, "a")
    offered(log2, "a")
    worker, client = worker_on(log2)
    worker.session.roles = {"grp_q": frozenset({"observer"})}
    tick(worker)
    assert decisions(client)["a"][1]["reason"] == "authorization"


def test_the_worker_accepts_a_version_its_declared_range_covers():
    log = Log()
    authorized(log, "v2", capabilities=[{"id": "summarize", "version": "2"}])
    authorized(log, "v3", capabilities=[{"id": "summarize", "version": "3"}])
    offered(log, "v2")
    offered(log, "v3")
    worker, client = worker_on(log)
    worker.offers.capability_ranges = {"summarize": ">=1,<3"}

    tick(worker)

    made = decisions(client)
    assert made["v2"][0] == "work.accept_offer"
    assert made["v3"][1]["reason"] == "capability"


def test_a_malformed_range_is_refused_when_the_worker_is_made():
    from mission_weave.sdk.worker import Worker
    with pytest.raises(admission.VersionSpecError):
        Worker(None, ["g"], None, ":memory:", capability_ranges={"summarize": ">=x,<"})
