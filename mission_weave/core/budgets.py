"""Budgets and usage (§11.5): six dimensions, charged up the budget ancestry. Pure.

A usage delta is charged to the WorkItem it was spent on, that WorkItem's Mission and,
for a child Mission, the parent WorkItem and its Mission, and so on up to the root:
the budget ancestry. The charge is all or nothing: if the new total of any dimension
would exceed the budget of any level that sets one, nothing is charged and the
command is refused with BUDGET_EXCEEDED, naming the level, the dimension, the budget
and what the total would have been. A dimension a level does not budget is counted
but never refuses.

Money is a decimal string with an ISO 4217 currency. There are no exchange rates
here: usage in another currency than a level's budget cannot be compared, so it is
refused as well.
"""

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from mission_weave.protocol.errors import ProtocolError

from .json_types import JsonObject

FINANCIAL = "financial"
COUNTS = ("tokens", "toolCalls", "computeSeconds", "wallClockSeconds", "sideEffects")
DIMENSIONS = (FINANCIAL, *COUNTS)


def add(usage: JsonObject, delta: JsonObject) -> JsonObject:
    """The totals after `delta` (both six-dimension documents; absent means zero)."""
    total = dict(usage)
    for name in COUNTS:
        if delta.get(name):
            total[name] = total.get(name, 0) + delta[name]
    money = delta.get(FINANCIAL)
    if money and Decimal(money["amount"]):
        held = total.get(FINANCIAL)
        if held is not None and held["currency"] != money["currency"]:
            raise ProtocolError("BUDGET_EXCEEDED",
                                f"usage in {money['currency']} cannot be added to usage "
                                f"already counted in {held['currency']}",
                                {"dimension": FINANCIAL, "currency": money["currency"]})
        amount = Decimal(held["amount"]) if held else Decimal(0)
        total[FINANCIAL] = {"amount": format(amount + Decimal(money["amount"]), "f"),
                            "currency": money["currency"]}
    return total


def is_zero(delta: JsonObject) -> bool:
    money = delta.get(FINANCIAL)
    return not any(delta.get(name) for name in COUNTS) and \
        not (money and Decimal(money["amount"]))


def over(budgets: JsonObject, usage: JsonObject) -> tuple[str, Any, Any] | None:
    """The first dimension whose usage exceeds its budget: (dimension, budget, usage)."""
    for name in COUNTS:
        if name in budgets and usage.get(name, 0) > budgets[name]:
            return name, budgets[name], usage[name]
    limit, spent = budgets.get(FINANCIAL), usage.get(FINANCIAL)
    if limit and spent and (spent["currency"] != limit["currency"]
                            or Decimal(spent["amount"]) > Decimal(limit["amount"])):
        return FINANCIAL, limit, spent
    return None


# A level of the budget ancestry: (kind, id, budgets, usage); charged: (kind, id, new usage).
Level = tuple[str, str, JsonObject, JsonObject]


def charge(ancestry: Sequence[Level], delta: JsonObject) -> list[tuple[str, str, JsonObject]]:
    """`ancestry` is [(kind, id, budgets, usage), ...] from the WorkItem up to the root
    Mission. Answers [(kind, id, new usage), ...] or raises BUDGET_EXCEEDED."""
    charged: list[tuple[str, str, JsonObject]] = []
    for kind, level_id, budgets, usage in ancestry:
        total = add(usage, delta)
        overflow = over(budgets, total)
        if overflow is not None:
            dimension, budget, would_be = overflow
            raise ProtocolError(
                "BUDGET_EXCEEDED",
                f"this usage would take the {kind} {level_id} over its {dimension} budget",
                {"level": kind, "id": level_id, "dimension": dimension, "budget": budget,
                 "wouldUse": would_be})
        charged.append((kind, level_id, total))
    return charged
