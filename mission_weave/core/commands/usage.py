"""usage.record (§11.5): the lease holder reports what it spent, in six dimensions; it is
charged to the WorkItem and its whole budget ancestry at once, or refused with
BUDGET_EXCEEDED and nothing charged (mission_weave/core/budgets.py). A command buffered
offline is charged its binding's usage the same way, in its own transaction (`reconcile`)."""

from dataclasses import replace
from typing import Any

from mission_weave.protocol.errors import ProtocolError

from .. import budgets, offline_binding
from ..json_types import JsonObject
from ..state import USAGE_RECORDED, View, WorkItem
from .base import Command, Context, Draft, item_draft, parent_item, target_item

MAX_DEPTH = 64  # child Missions nest; a longer chain means a broken projection, not a budget


def usage_record(view: View, command: Command, context: Context) -> list[Draft]:
    item = target_item(view, command, fenced_at=context.now)
    delta = command.body
    if budgets.is_zero(delta):
        raise ProtocolError("VALIDATION_ERROR", "usage.record needs a nonzero delta in at least "
                            "one of " + ", ".join(budgets.DIMENSIONS))
    return [charge(view, item, delta)]


def charge(view: View, item: WorkItem, delta: JsonObject, **data: Any) -> Draft:
    """The usage event charging `delta` to the item and its whole budget ancestry (more
    `data` beside), or BUDGET_EXCEEDED with nothing charged."""
    charged = budgets.charge(ancestry(view, item), delta)
    assert item.lease is not None, "usage is charged under a lease"
    return item_draft(item, USAGE_RECORDED, {
        "leaseId": item.lease.id, "ownershipEpoch": item.ownership_epoch, "delta": delta,
        "chargedTo": [{"level": kind, "id": level_id, "usage": usage}
                      for kind, level_id, usage in charged], **data})


def reconcile(view: View, command: Command, context: Context,
              drafts: list[Draft]) -> list[Draft]:
    """A command buffered offline (§11.5), already checked by its handler: its offline
    usage charged first (a zero delta charges nothing), then its own events, every one
    saying which lease, buffer time and sessions it was reconciled from."""
    assert command.offline is not None and command.work_item_id is not None, \
        "a buffered command carries its binding and names its WorkItem"
    record = offline_binding.record(command.offline, context.facts.get("sessions", {}),
                                    command.session_epoch)
    own = [replace(draft, data={**draft.data, "offline": record}) for draft in drafts]
    delta = command.offline["usage"]
    if budgets.is_zero(delta):
        return own
    return [charge(view, view.items[command.work_item_id], delta, offline=record), *own]


def ancestry(view: View, item: WorkItem) -> list[budgets.Level]:
    """[(kind, id, budgets, usage)] from the WorkItem up to the root Mission."""
    levels: list[budgets.Level] = []
    current: WorkItem | None = item
    while current is not None and len(levels) < MAX_DEPTH:
        mission = view.missions[current.mission_id]
        levels += [("workItem", current.id, current.contract["budgets"], current.usage),
                   ("mission", mission.id, mission.budgets, mission.usage)]
        current = parent_item(view, mission)
    return levels
