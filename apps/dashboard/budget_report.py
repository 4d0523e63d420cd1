"""The budgets view (§11.5): per Mission and per WorkItem, allowed against charged in each of
the six dimensions, and the usage refused because it would have overflowed a budget.

What is charged is the projection's `usage`, which usage.record keeps for every level of the
budget ancestry (mission_weave/core/commands/usage.py): a WorkItem's includes what its child
Missions charged, and a Mission's what its WorkItems, children's included, charged. `rows`
is pure; the rest reads the projections and the CommandRecords."""

from decimal import Decimal

from apps.ledger.models import CommandRecord
from apps.work import models as work_models
from mission_weave.core import budgets, state, state_documents
from mission_weave.core.commands.usage import MAX_DEPTH
from mission_weave.core.json_types import JsonObject

LABELS = {"financial": "Money", "tokens": "Tokens", "toolCalls": "Tool calls",
          "computeSeconds": "Compute time", "wallClockSeconds": "Wall-clock time",
          "sideEffects": "Side effects"}
UNITS = {"computeSeconds": "s", "wallClockSeconds": "s"}
LEVELS = {"workItem": "WorkItem", "mission": "Mission"}  # the levels a refusal names
OVERSPENDS_SHOWN = 50


def rows(allowed: dict, charged: dict) -> list[dict]:
    """Per dimension, in budgets.DIMENSIONS order: {dimension, label, allowed (None: no
    budget), charged, left, percent (of allowed, rounded down; None without a budget),
    over, unit, charged_unit, note}. Money is Decimal in its currency; charged in another
    currency than the budget's, it is not compared (left and percent None, `note` says
    why) and it counts as over, as budgets.over counts it: any further money is refused."""
    found = []
    for name in budgets.DIMENSIONS:
        limit, spent = allowed.get(name), charged.get(name)
        row: JsonObject = {"dimension": name, "label": LABELS[name], "allowed": limit,
               "charged": spent or 0, "unit": UNITS.get(name), "charged_unit": UNITS.get(name),
               "note": None,
               "over": budgets.over(_only(name, allowed), _only(name, charged)) is not None}
        if name == budgets.FINANCIAL:
            row.update(_money(limit, spent))
        if row["allowed"] is not None and row["note"] is None:
            row["left"] = row["allowed"] - row["charged"]
            row["percent"] = _percent(row["charged"], row["allowed"])
        else:
            row["left"] = row["percent"] = None
        found.append(row)
    return found


def _only(name: str, document: dict) -> dict:
    return {name: document[name]} if name in document else {}


def _money(limit: dict | None, spent: dict | None) -> dict:
    currency = (limit or spent or {}).get("currency")
    money = {"allowed": Decimal(limit["amount"]) if limit else None,
             "charged": Decimal(spent["amount"]) if spent else Decimal(0),
             "unit": currency, "charged_unit": currency}
    if limit and spent and spent["currency"] != limit["currency"]:
        money.update(charged_unit=spent["currency"],
                     note=f"charged in {spent['currency']}, budgeted in {limit['currency']}: "
                          f"not comparable without an exchange rate")
    return money


def _percent(spent, limit) -> int:
    if not limit:  # a budget of zero: untouched is 0%, anything spent is all of it
        return 100 if spent else 0
    return int(spent * 100 // limit)


def mission_budgets(viewer_group_id: str, mission: state.Mission,
                    items: list[state.WorkItem] | None = None) -> dict:
    """The Mission's budgets against its usage, each of its WorkItems' contract budgets
    against theirs, and the refused overspends of its WorkItems and of its child Missions'.
    `items`: the Mission's WorkItems in id order, when the caller has read them already."""
    if items is None:
        items = [state_documents.item_from_doc(r.doc) for r in work_models.WorkItem.objects.filter(
            group_id=viewer_group_id, mission_id=mission.id).order_by("work_item_id")]
    per_item = [{"item": item, "budgets": rows(item.contract["budgets"], item.usage)}
                for item in items]
    return {"budgets": rows(mission.budgets, mission.usage), "item_budgets": per_item,
            "overspends": _refusals(viewer_group_id, [item.id for item in items])}


def item_budgets(viewer_group_id: str, item: state.WorkItem) -> dict:
    """The WorkItem's contract budgets against its usage, and the refused overspends of the
    item and of its child Missions' WorkItems."""
    return {"budgets": rows(item.contract["budgets"], item.usage),
            "overspends": _refusals(viewer_group_id, [item.id])}


def refused_overspends(group_id: str, mission_id: str | None = None,
                       work_item_id: str | None = None) -> list[dict]:
    """The usage.record attempts refused with BUDGET_EXCEEDED that would have been charged
    to this Mission or WorkItem (attempted on it, on one of its WorkItems or below, in a
    child Mission), newest first, at most OVERSPENDS_SHOWN."""
    if work_item_id is not None:
        return _refusals(group_id, [work_item_id])
    return _refusals(group_id, list(work_models.WorkItem.objects.filter(
        group_id=group_id, mission_id=mission_id).values_list("work_item_id", flat=True)))


def _refusals(group_id: str, item_ids: list) -> list[dict]:
    # The partial index command_refused_by_item (group, work_item_id, created_at) WHERE NOT
    # accepted finds the refusals of these items; the error code, inside the JSON response,
    # is checked on those rows only (no index reaches into it), and they are few.
    records = CommandRecord.objects.filter(
        group_id=group_id, accepted=False, work_item_id__in=_charged_from(group_id, item_ids),
        response__error__code="BUDGET_EXCEEDED").order_by("-created_at", "-id")
    return [_overspend(record) for record in records[:OVERSPENDS_SHOWN]]


def _charged_from(group_id: str, item_ids: list) -> list:
    """These WorkItems and every WorkItem below them in child Missions: the ones whose usage
    is charged to them. One query per level of nesting."""
    found, level = [], list(item_ids)
    for _ in range(MAX_DEPTH):
        if not level:
            break
        found += level
        children = work_models.Mission.objects.filter(
            group_id=group_id, parent_work_item_id__in=level).values("mission_id")
        level = list(work_models.WorkItem.objects.filter(
            group_id=group_id, mission_id__in=children).values_list("work_item_id", flat=True))
    return found


def _overspend(record: CommandRecord) -> dict:
    """Who tried to charge what, when, and which level of the ancestry would have overflowed
    (`level` None when the refusal names none: money in a currency already counted in
    another)."""
    error = record.response["error"]
    details: JsonObject = error.get("details") or {}
    dimension: str | None = details.get("dimension")
    level: str | None = details.get("level")
    delta = (record.envelope or {}).get("body") or {}  # what the refused command reported
    return {"command_id": record.command_id, "actor": record.actor, "at": record.created_at,
            "work_item_id": record.work_item_id,
            "attempted": [(LABELS[name], _amount(name, delta[name])) for name in
                          budgets.DIMENSIONS if not budgets.is_zero(_only(name, delta))],
            "message": error["message"],
            "level": LEVELS.get(level) if level is not None else None,
            "level_id": details.get("id"),
            "dimension": LABELS.get(dimension, dimension) if dimension is not None else None,
            "budget": _amount(dimension, details["budget"]) if "budget" in details else None,
            "would_use": (_amount(dimension, details["wouldUse"])
                          if "wouldUse" in details else None)}


def _amount(dimension: str | None, value) -> str:
    if isinstance(value, dict):  # money
        return f"{value['amount']} {value['currency']}"
    unit = UNITS.get(dimension) if dimension is not None else None
    return f"{value} {unit}" if unit else str(value)
