"""Offer ranking (mission_weave/core/ranking.py), pure: eligibility, order, the selection basis
fields, Presence staleness and deterministic ties. Every time derives from T0."""

from mission_weave.core import ranking
from mission_weave.core.ranking import Candidate, Presence
from tests.unit.builders import T0, at, contract

TTL = 120
CARD = {"version": "1", "capabilities": [{"id": "summarize", "version": "1"}],
        "maxConcurrency": 2}
WORKER = frozenset({"worker"})


def candidate(agent_id, roles=WORKER, card=CARD, presence=None, reliability=None, load=0):
    return Candidate(agent_id, frozenset(roles), card, presence, reliability or {}, load)


def present(slots=1, status="available", seconds_ago=10):
    return Presence(available_slots=slots, status=status, reported_at=at(-seconds_ago))


def history(verified=0, failed=0):
    """WorkItems that required summarize (alone) and ended verified or failed."""
    return {frozenset({"summarize"}): {"verified": verified, "failed": failed}}


def ranked_ids(candidates):
    return [entry["agentId"] for entry in ranking.rank(contract(), candidates, T0, TTL)]


# --- eligibility -----------------------------------------------------------------------------

def test_a_member_without_the_worker_role_is_not_eligible():
    coordinator = candidate("c", roles={"coordinator"})

    assert ranked_ids([coordinator, candidate("w")]) == ["w"]
    assert ranking.excluded(contract(), [coordinator], T0, TTL) == {"c": ["worker-role"]}


def test_a_card_missing_a_required_capability_or_version_is_not_eligible():
    other_version = {**CARD, "capabilities": [{"id": "summarize", "version": "2"}]}
    nothing = {**CARD, "capabilities": []}

    assert ranked_ids([candidate("a", card=other_version), candidate("b", card=nothing)]) == []
    assert ranking.excluded(contract(), [candidate("a", card=other_version)], T0, TTL) == {
        "a": ["capability-required"]}


def test_an_agent_at_its_max_concurrency_is_not_eligible():
    full = candidate("full", load=2)

    assert ranked_ids([full, candidate("free", load=1)]) == ["free"]
    assert ranking.excluded(contract(), [full], T0, TTL) == {"full": ["capacity"]}


def test_a_fresh_presence_of_no_slots_or_offline_is_not_eligible():
    busy = candidate("busy", presence=present(slots=0, status="busy"))
    offline = candidate("offline", presence=present(slots=3, status="offline"))

    assert ranked_ids([busy, offline, candidate("unknown")]) == ["unknown"]


def test_a_stale_presence_counts_as_unknown_not_as_zero():
    stale = candidate("stale", presence=present(slots=0, status="offline", seconds_ago=TTL))

    (entry,) = ranking.rank(contract(), [stale], T0, TTL)

    assert entry["selectionBasis"]["availability"] == {
        "source": "card", "presence": "stale", "status": None, "availableSlots": None,
        "estimate": 2, "load": 0, "maxConcurrency": 2, "reportedAt": None}


# --- order -----------------------------------------------------------------------------------

def test_reliability_for_the_required_capability_orders_first():
    proven = candidate("z-proven", reliability=history(verified=3))
    new = candidate("a-new")
    flaky = candidate("b-flaky", reliability=history(verified=1, failed=3))

    assert ranked_ids([new, flaky, proven]) == ["z-proven", "a-new", "b-flaky"]


def test_reliability_in_another_capability_does_not_count():
    elsewhere = candidate("a", reliability={frozenset({"translate"}): {"verified": 0,
                                                                     "failed": 9}})

    (entry,) = ranking.rank(contract(), [elsewhere], T0, TTL)

    assert entry["selectionBasis"]["reliability"]["perCapability"] == {
        "summarize": {"verified": 0, "failed": 0}}


def test_at_equal_reliability_a_fresh_presence_with_more_slots_goes_first():
    many = candidate("c-many", presence=present(slots=2))
    one = candidate("b-one", presence=present(slots=1))
    unknown = candidate("a-unknown")

    assert ranked_ids([unknown, one, many]) == ["c-many", "b-one", "a-unknown"]


def test_free_slots_are_bounded_by_the_cards_headroom():
    reported_big = candidate("a", presence=present(slots=50), load=1)

    (entry,) = ranking.rank(contract(), [reported_big], T0, TTL)

    assert entry["selectionBasis"]["availability"]["estimate"] == 1
    assert entry["selectionBasis"]["availability"]["availableSlots"] == 50


def test_ties_break_by_agent_id_whatever_the_input_order():
    names = ["w3", "w1", "w2"]

    assert ranked_ids([candidate(n) for n in names]) == ["w1", "w2", "w3"]
    assert ranked_ids([candidate(n) for n in reversed(names)]) == ["w1", "w2", "w3"]


# --- the basis -------------------------------------------------------------------------------

def test_the_basis_carries_every_field_of_section_10_3_and_no_free_text():
    agent = candidate("w1", presence=present(slots=1, seconds_ago=5),
                      reliability=history(verified=2, failed=1), load=1)

    (entry,) = ranking.rank(contract(), [agent], T0, TTL)
    basis = entry["selectionBasis"]

    assert set(basis) == {"capabilityMatch", "authorizationEligible", "availability",
                          "expectedCost", "reliability", "policyRules"}
    assert basis["capabilityMatch"] == {"required": [{"id": "summarize", "version": "1"}],
                                        "missing": [], "matched": True}
    assert basis["authorizationEligible"] is True
    assert basis["availability"] == {
        "source": "presence", "presence": "fresh", "status": "available", "availableSlots": 1,
        "estimate": 1, "load": 1, "maxConcurrency": 2, "reportedAt": "2026-11-29T07:59:55Z"}
    assert basis["expectedCost"] == {"basis": "contract-budgets",
                                     "budgets": contract()["budgets"],
                                     "expectedWaitSeconds": 3600 * 1 // 2}
    assert basis["reliability"] == {"verified": 2, "failed": 1,
                                    "perCapability": {"summarize": {"verified": 2, "failed": 1}},
                                    "scope": "this Group, WorkItems last owned"}
    assert basis["policyRules"] == ["worker-role", "capability-required", "capacity",
                                    "reliability-then-availability", "tie-break:agent-id"]


def test_the_same_facts_always_give_the_same_ranking_and_basis():
    agents = [candidate(f"w{i}", presence=present(slots=i % 3), reliability=history(i % 2, i % 3),
                        load=i % 2) for i in range(8)]

    first = ranking.rank(contract(), agents, T0, TTL)

    assert ranking.rank(contract(), list(reversed(agents)), T0, TTL) == first
