"""The requested priority of queued work (§11.1, §11.3: "Priority changes immediately
reorder queued WorkItems"). A WorkItem's rank is derived from its current contract
whenever the contract is written (apps/work/work_store.py keeps it in indexed columns), so
a revised urgency, impact or deadline reorders the queue at once.

This is the Coordinator's *request* within one Group. The Worker-owned Scheduler
(mission_weave.sdk.scheduler) keeps final authority over the order across Groups.

Order: urgency (critical first), then business impact, then the earlier deadline,
then the WorkItem id, so that equal requests always list the same way. An unknown
value comes after every known one (apps/work/models.py, WorkItemQuerySet.in_priority_order).
"""

from datetime import datetime

from mission_weave.protocol.timefmt import parse_time

from .json_types import JsonObject

URGENCY = ("critical", "high", "normal", "low")
BUSINESS_IMPACT = ("critical", "high", "medium", "low")


def rank(contract: JsonObject | None) -> tuple[int, int, datetime | None]:
    """(urgency rank, business impact rank, deadline): ascending is the requested order,
    a missing deadline last."""
    contract = contract or {}
    deadline = contract.get("deadline")
    return (_index(URGENCY, contract.get("urgency")),
            _index(BUSINESS_IMPACT, contract.get("businessImpact")),
            parse_time(deadline) if deadline else None)


def _index(scale: tuple[str, ...], value: str | None) -> int:
    return scale.index(value) if value in scale else len(scale)
