"""The Worker-owned Scheduler (§11.1): the bounds its docstring states, checked by
simulation. A simulated Worker frees one slot at a time, so every `schedule()` call makes
at most one decision and the test can see which Groups were eligible at each one."""

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from types import MappingProxyType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mission_weave.sdk import scheduler
from mission_weave.sdk.scheduler import (
    PRIORITY_CLASS_FACTOR,
    Assignment,
    Fairness,
    GroupPolicy,
    IsolationError,
    QueuedItem,
    SlotTable,
    declare_slots,
    schedule,
)

T0 = datetime(2026, 11, 29, 8, 0, 0, tzinfo=UTC)
URGENCIES = list(scheduler.URGENCY)
IMPACTS = list(scheduler.IMPACT)
SIM = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def item(group: str, n: int, at: datetime = T0, **fields) -> QueuedItem:
    values = dict(group_id=group, work_item_id=f"{group}-wi{n}", mission_id=f"{group}-m",
                  ownership_epoch=1, enqueued_at=at)
    values.update(fields)
    return QueuedItem(**values)


class Runtime:
    """A Worker's runtime around the pure Scheduler: queues, slots, fairness, a clock."""

    def __init__(self, slots: int, max_concurrency: int, policies: dict, capacity=None):
        self.slots = declare_slots(slots, max_concurrency)
        self.max_concurrency = max_concurrency
        self.policies = policies
        self.capacity = capacity or {}
        self.queues = {group: [] for group in policies}
        self.fairness = Fairness()
        self.now = T0
        self.granted = []  # group of every decision, in order
        self.counter = 0

    def add(self, group: str, **fields) -> QueuedItem:
        self.counter += 1
        new = item(group, self.counter, self.now, **fields)
        self.queues[group].append(new)
        return new

    def eligible(self) -> set:
        """The Groups the docstring calls eligible, computed independently of the code."""
        free = dict(self.capacity)
        held = {}
        for a in self.slots.running:
            held[a.group_id] = held.get(a.group_id, 0) + 1
            for kind, amount in a.resources.items():
                free[kind] = free.get(kind, 0) - amount

        def fits(i, room):
            return all(v <= room.get(k, 0) for k, v in i.resources.items())

        contenders = {}
        for group, items in self.queues.items():
            quota = self.policies[group].quota
            if quota is None or held.get(group, 0) < quota:
                gate_open = [i for i in items if i.risk_gate_open]
                if gate_open:
                    contenders[group] = gate_open
        if not contenders:
            return set()
        virtual = self.fairness.virtual_time
        passes = {g: max(self.fairness.passes.get(g, virtual), virtual) for g in contenders}
        reserved = None
        if self.fairness.reservation is not None:
            group, item_id = self.fairness.reservation
            reserved = next((i for i in self.queues.get(group, ())
                             if i.work_item_id == item_id and i.risk_gate_open), None)
        if reserved is None:
            head = min(contenders, key=lambda g: (passes[g],
                                                  self.fairness.last_served.get(g, -1), g))
            top = scheduler.group_order(contenders[head], self.now)[0]
            if not fits(top, free) and fits(top, self.capacity):
                reserved = top
        kinds = {k for k, v in reserved.resources.items() if v} if reserved else set()
        return {group for group, items in contenders.items()
                if any(fits(i, free) and (i is reserved or not kinds & {
                    k for k, v in i.resources.items() if v}) for i in items)}

    def decide(self, limit: int | None = None) -> tuple:
        before = {(i.group_id, i.work_item_id): i for q in self.queues.values() for i in q}
        decision = schedule(self.slots, self.queues, self.policies, self.capacity, self.now,
                            self.fairness, limit)
        self.slots, self.fairness = decision.slots, decision.fairness
        for started in decision.started:
            queued = before[started.group_id, started.work_item_id]
            assert queued.risk_gate_open  # a closed risk gate is never scheduled
            self.queues[started.group_id].remove(queued)
            self.granted.append(started.group_id)
        return decision.started

    def finish(self, slot_id: str) -> None:
        self.slots = self.slots.release(slot_id)

    def tick(self, seconds: int = 30) -> None:
        self.now += timedelta(seconds=seconds)


@st.composite
def policies(draw, quotas=True):
    count = draw(st.integers(2, 5))
    return {f"g{i}": GroupPolicy(
        weight=draw(st.integers(1, 4)),
        priority_class=draw(st.sampled_from(list(PRIORITY_CLASS_FACTOR))),
        quota=draw(st.none() | st.integers(1, 3)) if quotas else None)
        for i in range(count)}


def check_invariants(runtime: Runtime) -> None:
    running = runtime.slots.running
    assert len(runtime.slots.slots) <= runtime.max_concurrency
    held = {}
    for a in running:
        held[a.group_id] = held.get(a.group_id, 0) + 1
    for group, count in held.items():
        quota = runtime.policies[group].quota
        assert quota is None or count <= quota
    for kind, capacity in runtime.capacity.items():
        assert sum(a.resources.get(kind, 0) for a in running) <= capacity
    # Isolation: no two running slots share a context, checkpoint or side-effect keys.
    for facet in ("context_id", "checkpoint_namespace", "key_scope"):
        values = [getattr(a, facet) for a in running]
        assert len(values) == len(set(values))


# --- the waiting bound ---------------------------------------------------------------------

@SIM
@given(policies(), st.integers(1, 4), st.integers(0, 2**32))
def test_no_eligible_group_waits_more_than_the_stated_bound(group_policies, slots, seed):
    rnd = random.Random(seed)  # drives arrivals, gates and completions over 300 rounds
    runtime = Runtime(slots, 4, group_policies, capacity={"gpu": 2})
    groups = list(group_policies)
    waited = dict.fromkeys(groups, 0)
    for group in groups:
        for _ in range(rnd.randint(0, 30)):  # floods and trickles
            runtime.add(group, urgency=rnd.choice(URGENCIES), business_impact=rnd.choice(IMPACTS),
                        risk_gate_open=rnd.random() > 0.1,
                        resources={"gpu": rnd.randint(1, 2)} if rnd.random() < 0.2 else {})
    for _ in range(300):
        while runtime.slots.free:  # one decision at a time, eligibility seen before each
            eligible = runtime.eligible()
            started = runtime.decide(limit=1)
            assert len(started) == (1 if eligible else 0)
            if not started:
                break
            chosen = started[0].group_id
            assert chosen in eligible
            for group in groups:
                if group == chosen or group not in eligible:
                    waited[group] = 0
                else:
                    waited[group] += 1
                    assert waited[group] <= scheduler.waiting_bound(group, group_policies,
                                                                    groups), (group, waited)
            check_invariants(runtime)
        running = runtime.slots.running
        if running:
            runtime.finish(rnd.choice(running).slot_id)
        if rnd.random() < 0.3:
            runtime.add(rnd.choice(groups), urgency=rnd.choice(URGENCIES),
                        risk_gate_open=rnd.random() > 0.1)
        runtime.tick()


def test_the_bound_with_equal_weights_is_twice_the_other_groups():
    groups = ["a", "b", "c", "d"]
    assert scheduler.waiting_bound("a", {}, groups) == 2 * 3


def test_the_bound_grows_with_the_heavier_groups_weights():
    weights = {"light": GroupPolicy(weight=1), "heavy": GroupPolicy(weight=5)}
    assert scheduler.waiting_bound("light", weights, weights) == 5 + 1
    assert scheduler.waiting_bound("heavy", weights, weights) == 0 + 1


# --- long-run shares ------------------------------------------------------------------------

@SIM
@given(policies(quotas=False), st.integers(1, 4), st.integers(50, 400))
def test_long_run_shares_track_the_weights(group_policies, slots, decisions):
    """Every Group flooded and eligible throughout: -G·w/W <= c - n·w/W <= 1."""
    runtime = Runtime(slots, 4, group_policies)
    for group in group_policies:
        for _ in range(decisions):
            runtime.add(group, urgency="critical" if group == "g0" else "low")
    runtime.decide()
    while len(runtime.granted) < decisions:
        runtime.finish(runtime.slots.running[0].slot_id)
        runtime.decide()
    n = len(runtime.granted)
    total = sum(p.effective_weight for p in group_policies.values())
    for group, policy in group_policies.items():
        expected = Fraction(n * policy.effective_weight, total)
        error = runtime.granted.count(group) - expected
        tolerance = Fraction(len(group_policies) * policy.effective_weight, total)
        assert -tolerance <= error <= 1, (group, runtime.granted.count(group), expected)


def test_a_flood_of_critical_work_in_one_group_cannot_starve_another():
    runtime = Runtime(1, 1, {"flood": GroupPolicy(), "quiet": GroupPolicy()})
    for _ in range(1000):
        runtime.add("flood", urgency="critical", business_impact="critical",
                    deadline=T0 + timedelta(minutes=5))
    runtime.decide()
    runtime.finish("slot-0")
    runtime.decide()
    late = runtime.add("quiet", urgency="low", business_impact="low")
    decisions_before = len(runtime.granted)
    while late in runtime.queues["quiet"]:
        runtime.finish("slot-0")
        runtime.decide()

    waited = len(runtime.granted) - decisions_before - 1
    assert waited <= scheduler.waiting_bound("quiet", runtime.policies, runtime.policies) == 2
    assert len(runtime.queues["flood"]) > 990


def test_a_higher_priority_class_gets_a_larger_but_finite_share():
    group_policies = {"critical": GroupPolicy(priority_class="critical"),
                      "low": GroupPolicy(priority_class="low")}
    runtime = Runtime(1, 1, group_policies)
    for group in group_policies:
        for _ in range(90):
            runtime.add(group)
    for _ in range(90):
        runtime.decide()
        runtime.finish("slot-0")

    assert runtime.granted.count("critical") == 80
    assert runtime.granted.count("low") == 10


def test_a_group_that_was_idle_does_not_bank_credit():
    runtime = Runtime(1, 1, {"busy": GroupPolicy(), "idle": GroupPolicy()})
    for _ in range(50):
        runtime.add("busy")
    for _ in range(40):
        runtime.decide()
        runtime.finish("slot-0")
    for _ in range(10):
        runtime.add("idle")
    for _ in range(10):
        runtime.decide()
        runtime.finish("slot-0")

    # Alternation from the moment it rejoins, not ten grants in a row to repay the past.
    assert runtime.granted[40:] in (["idle", "busy"] * 5, ["busy", "idle"] * 5)


# --- quotas, risk gates, resources, slots ------------------------------------------------------

def test_a_group_at_its_quota_yields_its_slots_to_others():
    runtime = Runtime(3, 3, {"capped": GroupPolicy(weight=4, quota=1), "other": GroupPolicy()})
    for _ in range(5):
        runtime.add("capped")
        runtime.add("other")

    started = runtime.decide()

    assert sorted(a.group_id for a in started) == ["capped", "other", "other"]


def test_a_closed_risk_gate_is_never_scheduled_even_in_an_empty_runtime():
    runtime = Runtime(2, 2, {"g": GroupPolicy()})
    gated = runtime.add("g", urgency="critical", risk_gate_open=False)

    assert runtime.decide() == ()
    runtime.queues["g"] = [replace(gated, risk_gate_open=True)]
    assert [a.work_item_id for a in runtime.decide()] == [gated.work_item_id]


def test_resources_in_use_are_not_handed_out_twice():
    runtime = Runtime(3, 3, {"a": GroupPolicy(), "b": GroupPolicy()}, capacity={"gpu": 1})
    runtime.add("a", resources={"gpu": 1})
    runtime.add("b", resources={"gpu": 1})
    runtime.add("b")

    started = runtime.decide()

    assert sum(a.resources.get("gpu", 0) for a in started) == 1
    assert len(started) == 2


def test_small_items_cannot_starve_a_large_one_of_a_resource():
    runtime = Runtime(3, 3, {"small": GroupPolicy(weight=4), "large": GroupPolicy()},
                      capacity={"gpu": 2})
    for _ in range(200):
        runtime.add("small", resources={"gpu": 1}, urgency="critical")
    runtime.decide()  # two small items hold both GPUs
    large = runtime.add("large", resources={"gpu": 2})
    finished = 0
    while large in runtime.queues["large"] and finished < 40:
        running = [a for a in runtime.slots.running if a.resources.get("gpu")]
        runtime.finish(running[0].slot_id)
        finished += 1
        runtime.decide()

    # The small Group's next item already held the reservation when the large one
    # arrived (it waited first); then the large one's holds both GPUs for it.
    assert finished == 3
    assert [a.work_item_id for a in runtime.slots.running
            if a.group_id == "large"] == [large.work_item_id]


def test_a_reservation_holds_back_only_the_kinds_it_waits_for():
    runtime = Runtime(3, 3, {"a": GroupPolicy(), "b": GroupPolicy()}, capacity={"gpu": 2})
    runtime.add("a", resources={"gpu": 2})
    runtime.add("b", resources={"gpu": 1})
    runtime.decide(limit=1)  # the fairest (a) takes both GPUs
    runtime.add("a", resources={"gpu": 2})
    runtime.add("b")  # needs no GPU

    started = runtime.decide()

    assert [a.group_id for a in started] == ["b"]
    assert started[0].resources == {}


def test_a_large_item_is_not_starved_by_small_items_of_its_own_group():
    runtime = Runtime(2, 2, {"mixed": GroupPolicy(), "other": GroupPolicy()},
                      capacity={"gpu": 2})
    runtime.add("other", resources={"gpu": 1})
    runtime.add("other", resources={"gpu": 1})
    runtime.decide()  # both GPUs busy
    large = runtime.add("mixed", resources={"gpu": 2}, urgency="critical")
    for _ in range(50):
        runtime.add("mixed", resources={"gpu": 1})
        runtime.add("other", resources={"gpu": 1})
    rounds = 0
    while large in runtime.queues["mixed"] and rounds < 40:
        runtime.finish(runtime.slots.running[0].slot_id)
        runtime.decide()
        rounds += 1

    # Without the reservation a single freed GPU would go to the next small item forever.
    assert large not in runtime.queues["mixed"]
    assert rounds == 2


def test_an_item_needing_more_than_the_capacity_reserves_nothing():
    runtime = Runtime(1, 1, {"a": GroupPolicy(), "b": GroupPolicy()}, capacity={"gpu": 1})
    runtime.add("a", resources={"gpu": 4})
    runtime.add("b", resources={"gpu": 1})

    assert [a.group_id for a in runtime.decide()] == ["b"]


def test_an_item_needing_an_undeclared_resource_waits():
    runtime = Runtime(1, 1, {"a": GroupPolicy()})
    runtime.add("a", resources={"tpu": 1})
    assert runtime.decide() == ()


@pytest.mark.parametrize("count", [5, -1])
def test_slots_beyond_max_concurrency_cannot_be_declared(count):
    with pytest.raises(ValueError, match=r"Agent Card allows 0\.\.4"):
        declare_slots(count, 4)


@given(st.integers(0, 8), st.integers(0, 40))
def test_a_decision_never_fills_more_slots_than_are_free(slots, queued):
    runtime = Runtime(slots, 8, {"g": GroupPolicy(), "h": GroupPolicy()})
    for n in range(queued):
        runtime.add("g" if n % 2 else "h")

    started = runtime.decide()

    assert len(started) == min(slots, queued)
    assert len(runtime.slots.running) <= slots <= 8
    assert scheduler.available_slots(runtime.slots) == slots - len(started)


def test_running_items_are_not_started_twice():
    runtime = Runtime(2, 2, {"g": GroupPolicy()})
    only = runtime.add("g")
    runtime.decide()
    # The Worker's queue still lists it until its work.started arrives.
    runtime.queues["g"].append(only)
    assert runtime.decide() == ()


# --- isolation ----------------------------------------------------------------------------------

def assignment(slot_id: str, work_item_id: str = "wi-1", **fields) -> Assignment:
    values = dict(slot_id=slot_id, group_id="g", mission_id="m", work_item_id=work_item_id,
                  ownership_epoch=1, started_at=T0, resources=MappingProxyType({}),
                  tool_budget=MappingProxyType({}))
    values.update(fields)
    return Assignment(**values)


def test_two_slots_cannot_hold_the_same_work_item():
    table = declare_slots(2, 2).assign(assignment("slot-0"))
    with pytest.raises(IsolationError, match="share a work item"):
        table.assign(assignment("slot-1"))


def test_two_slots_cannot_share_a_credential_or_a_lease():
    table = declare_slots(2, 2).assign(assignment("slot-0").with_lease("lease-1", "cap-1"))
    with pytest.raises(IsolationError, match="credential"):
        table.assign(assignment("slot-1", "wi-2").with_lease("lease-2", "cap-1"))
    with pytest.raises(IsolationError, match="lease"):
        table.assign(assignment("slot-1", "wi-2").with_lease("lease-1", "cap-2"))


def test_the_same_item_in_two_groups_gets_two_contexts_but_the_same_mission_ids_share_keys():
    # Ids are per Group, so the context names the Group; side-effect keys are derived from
    # Mission, WorkItem and Ownership Epoch (§16), so equal triples are refused outright.
    table = declare_slots(2, 2).assign(assignment("slot-0", group_id="g1"))
    with pytest.raises(IsolationError, match="side-effect keys"):
        table.assign(assignment("slot-1", group_id="g2"))
    other = table.assign(assignment("slot-1", group_id="g2", ownership_epoch=2))
    contexts = {a.context_id for a in other.running}
    assert len(contexts) == 2


def test_a_table_with_shared_state_cannot_be_built_directly():
    with pytest.raises(IsolationError):
        SlotTable((("slot-0", assignment("slot-0")), ("slot-1", assignment("slot-1"))))
    with pytest.raises(IsolationError, match="placed in"):
        SlotTable((("slot-0", assignment("slot-1")),))


@given(st.lists(st.tuples(st.sampled_from(["g1", "g2"]), st.sampled_from(["m1", "m2"]),
                          st.integers(1, 3)), min_size=2, max_size=6, unique=True))
def test_side_effect_keys_and_budgets_are_private_to_each_slot(items):
    budget = {"toolCalls": 5, "financial": {"amount": "1.00", "currency": "USD"}}
    runtime = Runtime(len(items), 8, {"g1": GroupPolicy(), "g2": GroupPolicy()})
    for n, (group, mission, epoch) in enumerate(items):
        runtime.queues[group].append(item(group, n, mission_id=mission, ownership_epoch=epoch,
                                          tool_budget=budget))

    started = runtime.decide()

    assert len(started) == len(items)
    keys = {a.side_effect_key("send-email") for a in started}
    assert len(keys) == len(started)
    for a in started:
        with pytest.raises(TypeError):
            a.tool_budget["toolCalls"] = 99
        with pytest.raises(TypeError):
            a.tool_budget["financial"]["amount"] = "99"
        assert a.tool_budget == {"toolCalls": 5,
                                 "financial": {"amount": "1.00", "currency": "USD"}}
    budget["toolCalls"] = 0  # the caller's dict changing later reaches no slot
    assert all(a.tool_budget["toolCalls"] == 5 for a in started)
    check_invariants(runtime)


def test_a_slot_key_is_the_protocol_idempotency_key():
    from mission_weave.protocol.idempotency import idempotency_key

    a = assignment("slot-0", mission_id="m9", work_item_id="wi-9", ownership_epoch=4)
    assert a.side_effect_key("op-1") == idempotency_key("m9", "wi-9", 4, "op-1")


# --- order within a Group -----------------------------------------------------------------------

def test_a_priority_change_reorders_the_queue_at_the_next_decision():
    runtime = Runtime(1, 1, {"g": GroupPolicy()})
    first = runtime.add("g", urgency="normal")
    second = runtime.add("g", urgency="normal")
    runtime.queues["g"] = [first, replace(second, urgency="critical",
                                          deadline=T0 + timedelta(minutes=10))]

    (started,) = runtime.decide()

    assert started.work_item_id == second.work_item_id


@given(st.lists(st.tuples(st.sampled_from(URGENCIES), st.sampled_from(IMPACTS),
                          st.integers(0, 7200), st.none() | st.integers(-3600, 86400 * 2)),
                min_size=1, max_size=12), st.integers(0, 11), st.sampled_from(URGENCIES))
def test_the_item_started_is_the_best_by_current_data(specs, revised, urgency):
    now = T0 + timedelta(hours=2)
    items = [item("g", n, T0 + timedelta(seconds=s), urgency=u, business_impact=i,
                  deadline=None if d is None else now + timedelta(seconds=d))
             for n, (u, i, s, d) in enumerate(specs)]
    index = revised % len(items)
    items[index] = replace(items[index], urgency=urgency)  # a revised contract

    decision = schedule(declare_slots(1, 1), {"g": items}, {}, {}, now)

    best = max(scheduler.score(i, now) for i in items)
    assert scheduler.score(next(i for i in items
                                if i.work_item_id == decision.started[0].work_item_id),
                           now) == best


@given(st.sampled_from(URGENCIES), st.sampled_from(IMPACTS), st.integers(1, 3600))
def test_aging_bounds_how_long_later_urgent_work_can_overtake(urgency, impact, extra):
    lead = scheduler.max_score_lead() * scheduler.AGING_SECONDS
    now = T0 + timedelta(seconds=lead + extra + 10)
    old = item("g", 1, T0, urgency="low", business_impact="low")
    young = item("g", 2, T0 + timedelta(seconds=lead + extra), urgency=urgency,
                 business_impact=impact, deadline=now)

    assert scheduler.group_order([young, old], now)[0] == old
