"""apps/dashboard/budgets.rows: allowed against charged in the six dimensions."""

from decimal import Decimal

from apps.dashboard.budget_report import rows
from mission_weave.core import budgets


def by_dimension(allowed: dict, charged: dict) -> dict:
    return {row["dimension"]: row for row in rows(allowed, charged)}


def test_every_dimension_in_a_fixed_order_even_without_budgets_or_usage():
    found = rows({}, {})
    assert [row["dimension"] for row in found] == list(budgets.DIMENSIONS)
    assert [row["label"] for row in found] == ["Money", "Tokens", "Tool calls", "Compute time",
                                               "Wall-clock time", "Side effects"]
    for row in found:
        assert (row["allowed"], row["charged"], row["left"], row["percent"], row["over"]) == (
            None, 0, None, None, False)


def test_usage_without_a_budget_is_counted_but_never_over():
    row = by_dimension({}, {"tokens": 5000})["tokens"]
    assert (row["allowed"], row["charged"], row["left"], row["percent"], row["over"]) == (
        None, 5000, None, None, False)


def test_a_partly_spent_budget_shows_what_is_left_and_the_share_rounded_down():
    found = by_dimension({"tokens": 1000, "computeSeconds": 600, "toolCalls": 3},
                         {"tokens": 999, "computeSeconds": 150})
    assert (found["tokens"]["left"], found["tokens"]["percent"]) == (1, 99)
    assert found["computeSeconds"] == {
        "dimension": "computeSeconds", "label": "Compute time", "allowed": 600, "charged": 150,
        "left": 450, "percent": 25, "over": False, "unit": "s", "charged_unit": "s",
        "note": None}
    assert (found["toolCalls"]["charged"], found["toolCalls"]["percent"]) == (0, 0)


def test_spending_exactly_the_budget_is_not_over():
    row = by_dimension({"toolCalls": 10}, {"toolCalls": 10})["toolCalls"]
    assert (row["left"], row["percent"], row["over"]) == (0, 100, False)


def test_usage_past_a_budget_lowered_after_the_charge_is_over():
    row = by_dimension({"tokens": 800}, {"tokens": 1200})["tokens"]
    assert (row["left"], row["percent"], row["over"]) == (-400, 150, True)


def test_a_zero_budget_untouched_is_at_zero_and_spent_is_over():
    assert by_dimension({"sideEffects": 0}, {})["sideEffects"]["percent"] == 0
    row = by_dimension({"sideEffects": 0}, {"sideEffects": 1})["sideEffects"]
    assert (row["left"], row["percent"], row["over"]) == (-1, 100, True)


def test_money_is_decimal_in_its_currency():
    row = by_dimension({"financial": {"amount": "10.00", "currency": "USD"}},
                       {"financial": {"amount": "2.5", "currency": "USD"}})["financial"]
    assert (row["allowed"], row["charged"], row["left"], row["percent"]) == (
        Decimal("10.00"), Decimal("2.5"), Decimal("7.50"), 25)
    assert (row["unit"], row["charged_unit"], row["over"], row["note"]) == (
        "USD", "USD", False, None)


def test_money_over_its_budget_and_money_with_no_budget():
    over = by_dimension({"financial": {"amount": "1.00", "currency": "EUR"}},
                        {"financial": {"amount": "1.01", "currency": "EUR"}})["financial"]
    assert (over["left"], over["over"]) == (Decimal("-0.01"), True)
    unbudgeted = by_dimension({}, {"financial": {"amount": "3", "currency": "GBP"}})["financial"]
    assert (unbudgeted["allowed"], unbudgeted["charged"], unbudgeted["unit"]) == (
        None, Decimal(3), "GBP")
    nothing = by_dimension({"financial": {"amount": "5", "currency": "USD"}}, {})["financial"]
    assert (nothing["charged"], nothing["left"], nothing["unit"]) == (0, Decimal(5), "USD")


def test_money_in_another_currency_is_not_compared_and_says_so():
    row = by_dimension({"financial": {"amount": "10.00", "currency": "USD"}},
                       {"financial": {"amount": "3.00", "currency": "EUR"}})["financial"]
    assert (row["allowed"], row["unit"], row["charged"], row["charged_unit"]) == (
        Decimal("10.00"), "USD", Decimal("3.00"), "EUR")
    assert (row["left"], row["percent"]) == (None, None)
    assert "EUR" in row["note"] and "USD" in row["note"] and "not comparable" in row["note"]
    # budgets.over counts it as over: any further money would be refused
    assert row["over"] is True
