"""The Mission's WorkItem graph (§10.4): dependency policies and cycle detection."""

import itertools

import pytest

from mission_weave.core import dag
from mission_weave.core.state import ACTIVE, CANCELLED, FAILED, OPEN, QUEUED, SUBMITTED, VERIFIED


def test_the_policies_are_the_three_of_the_contract():
    assert dag.POLICIES == ("all_verified", "any_verified", "all_terminal")


@pytest.mark.parametrize("policy", dag.POLICIES)
def test_no_dependencies_is_always_met(policy):
    assert dag.dependencies_met(policy, []) is True


@pytest.mark.parametrize(("states", "met"), [
    ([VERIFIED], True),
    ([VERIFIED, VERIFIED, VERIFIED], True),
    ([VERIFIED, SUBMITTED], False),
    ([VERIFIED, CANCELLED], False),
    ([FAILED], False),
    ([OPEN, QUEUED, ACTIVE], False),
])
def test_all_verified(states, met):
    assert dag.dependencies_met("all_verified", states) is met


@pytest.mark.parametrize(("states", "met"), [
    ([VERIFIED], True),
    ([FAILED, CANCELLED, VERIFIED], True),
    ([ACTIVE, VERIFIED], True),
    ([FAILED, CANCELLED], False),
    ([SUBMITTED, ACTIVE, OPEN], False),
])
def test_any_verified(states, met):
    assert dag.dependencies_met("any_verified", states) is met


@pytest.mark.parametrize(("states", "met"), [
    ([VERIFIED, CANCELLED], True),
    ([CANCELLED, CANCELLED], True),
    ([VERIFIED, SUBMITTED], False),
    ([VERIFIED, ACTIVE], False),
    # failed is not terminal (§10.2): it returns control to the Coordinator.
    ([VERIFIED, FAILED], False),
])
def test_all_terminal(states, met):
    assert dag.dependencies_met("all_terminal", states) is met


# --- cycles -------------------------------------------------------------------------------

def test_an_acyclic_addition_is_no_cycle():
    edges = {"b": ("c",), "c": ()}

    assert dag.cycle_through("a", ["b"], edges) is None


def test_a_diamond_is_no_cycle():
    edges = {"b": ("d",), "c": ("d",), "d": ()}

    assert dag.cycle_through("a", ["b", "c"], edges) is None


def test_closing_a_cycle_returns_its_path():
    # c depends on b, b depends on a; making a depend on c closes a -> c -> b -> a.
    edges = {"a": (), "b": ("a",), "c": ("b",)}

    assert dag.cycle_through("a", ["c"], edges) == ["a", "c", "b", "a"]


def test_a_two_cycle_returns_its_path():
    edges = {"b": ("a",)}

    assert dag.cycle_through("a", ["b"], edges) == ["a", "b", "a"]


def test_a_self_dependency_is_a_cycle():
    assert dag.cycle_through("a", ["a"], {}) == ["a", "a"]


def test_a_cycle_elsewhere_in_the_graph_does_not_concern_the_new_edge():
    # x <-> y already loop (never accepted in practice); a -> b does not reach a.
    edges = {"x": ("y",), "y": ("x",), "b": ("x",)}

    assert dag.cycle_through("a", ["b"], edges) is None


def test_a_cycle_through_one_of_several_new_dependencies_is_found():
    edges = {"b": (), "c": ("d",), "d": ("a",)}

    assert dag.cycle_through("a", ["b", "c"], edges) == ["a", "c", "d", "a"]


def test_a_long_chain_without_and_with_the_closing_edge():
    # n1 depends on n2, ..., n999 on n1000: a chain of 1000 WorkItems.
    names = [f"n{i}" for i in range(1, 1001)]
    edges = {name: (nxt,) for name, nxt in itertools.pairwise(names)}

    assert dag.cycle_through("n0", ["n1"], edges) is None
    assert dag.cycle_through("n1000", ["n1"], edges) == ["n1000", *names]
