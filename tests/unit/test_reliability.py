"""Reliability in the selection basis (core/ranking.py, §10.3): which of a worker's verified
and failed WorkItems count for a contract. Issue 25: a worker with three verified items
showed "reliability: 0 verified", and `auto` ranked on that, when the contract required no
capability; an item that required two of the contract's capabilities counted twice."""

from mission_weave.core import ranking
from mission_weave.core.ranking import Candidate
from tests.unit.builders import T0, contract

TTL = 120
CARD = {"version": "1", "maxConcurrency": 2,
        "capabilities": [{"id": "research", "version": "1"}, {"id": "writing", "version": "1"}]}
RESEARCH = [{"id": "research", "version": "1"}]
BOTH = [{"id": "research", "version": "1"}, {"id": "writing", "version": "1"}]


def worker(agent_id, history=None):
    return Candidate(agent_id, frozenset({"worker"}), CARD, reliability=history or {})


def ended(*capabilities, verified=0, failed=0):
    return {frozenset(capabilities): {"verified": verified, "failed": failed}}


def basis_of(capabilities, candidate):
    (entry,) = ranking.rank(contract(capabilities=capabilities), [candidate], T0, TTL)
    return entry["selectionBasis"]["reliability"]


def test_a_contract_requiring_no_capability_counts_every_item_the_worker_ended():
    proven = worker("z-proven", {**ended("research", verified=2), **ended(verified=1),
                                 **ended("writing", failed=1)})

    reliability = basis_of([], proven)

    assert (reliability["verified"], reliability["failed"]) == (3, 1)
    assert reliability["perCapability"] == {}
    assert reliability["scope"] == ranking.SCOPE_ANY


def test_with_no_capability_required_the_proven_worker_ranks_first():
    proven = worker("z-proven", ended(verified=3))
    fresh = worker("a-fresh")

    ranked = ranking.rank(contract(capabilities=[]), [fresh, proven], T0, TTL)

    assert [e["agentId"] for e in ranked] == ["z-proven", "a-fresh"]


def test_an_item_that_required_several_of_the_capabilities_counts_once():
    agent = worker("w1", ended("research", "writing", verified=3))

    reliability = basis_of(BOTH, agent)

    assert (reliability["verified"], reliability["failed"]) == (3, 0)
    assert reliability["perCapability"] == {"research": {"verified": 3, "failed": 0},
                                            "writing": {"verified": 3, "failed": 0}}


def test_an_item_counts_when_it_required_any_of_the_contracts_capabilities():
    agent = worker("w1", {**ended("research", "writing", verified=1),
                          **ended("research", failed=1), **ended("writing", verified=5),
                          **ended(verified=7)})

    reliability = basis_of(RESEARCH, agent)

    assert (reliability["verified"], reliability["failed"]) == (1, 1)
    assert reliability["perCapability"] == {"research": {"verified": 1, "failed": 1}}
    assert reliability["scope"] == ranking.SCOPE
