"""mission_weave/core/budgets.py: six-dimension totals, all-or-nothing charges up the ancestry."""

import pytest

from mission_weave.core import budgets
from mission_weave.protocol.errors import ProtocolError

USD = {"amount": "10.00", "currency": "USD"}


def test_add_sums_counts_and_money_exactly():
    total = budgets.add({"tokens": 5, "financial": {"amount": "0.1", "currency": "USD"}},
                        {"tokens": 7, "toolCalls": 2,
                         "financial": {"amount": "0.2", "currency": "USD"}})
    assert total == {"tokens": 12, "toolCalls": 2,
                     "financial": {"amount": "0.3", "currency": "USD"}}


def test_money_in_another_currency_cannot_be_added():
    with pytest.raises(ProtocolError) as refused:
        budgets.add({"financial": {"amount": "1", "currency": "USD"}},
                    {"financial": {"amount": "1", "currency": "EUR"}})
    assert refused.value.code == "BUDGET_EXCEEDED"


def test_a_zero_delta_is_zero():
    assert budgets.is_zero({"tokens": 0, "financial": {"amount": "0.000", "currency": "USD"}})
    assert not budgets.is_zero({"sideEffects": 1})


def test_reaching_a_budget_is_within_it_and_passing_it_is_not():
    assert budgets.over({"tokens": 10, "financial": USD},
                        {"tokens": 10, "financial": USD}) is None
    assert budgets.over({"tokens": 10}, {"tokens": 11}) == ("tokens", 10, 11)
    assert budgets.over({"financial": USD}, {"financial": {"amount": "10.01",
                                                          "currency": "USD"}})[0] == "financial"


def test_an_unbudgeted_dimension_never_refuses():
    assert budgets.over({"tokens": 10}, {"toolCalls": 10**9}) is None


def test_a_charge_names_the_first_level_it_would_overflow_and_charges_nothing():
    ancestry = [("workItem", "wi_1", {"tokens": 100}, {"tokens": 10}),
                ("mission", "msn_1", {"tokens": 50}, {"tokens": 45})]
    with pytest.raises(ProtocolError) as refused:
        budgets.charge(ancestry, {"tokens": 10})
    assert refused.value.details == {"level": "mission", "id": "msn_1", "dimension": "tokens",
                                     "budget": 50, "wouldUse": 55}


def test_a_charge_within_every_level_gives_every_new_total():
    ancestry = [("workItem", "wi_1", {"tokens": 100}, {}), ("mission", "msn_1", {}, {"tokens": 3})]
    assert budgets.charge(ancestry, {"tokens": 4}) == [("workItem", "wi_1", {"tokens": 4}),
                                                      ("mission", "msn_1", {"tokens": 7})]
