"""Presence (§11.1): an Agent reports its current capacity, `{availableSlots, status}`.
It is not part of any Group's log; offer ranking reads the last report and treats one
older than MW_PRESENCE_TTL_SECONDS as unknown."""

from datetime import datetime

from mission_weave.core.jsonschema_check import check, compile_schema
from mission_weave.protocol.timefmt import format_time

from .models import Presence

REPORT = compile_schema({
    "type": "object", "additionalProperties": False, "required": ["availableSlots", "status"],
    "properties": {"availableSlots": {"type": "integer", "minimum": 0, "maximum": 1000},
                   "status": {"enum": list(Presence.STATUSES)}},
})


def report(agent_id: str, body: dict, now: datetime) -> dict:
    """Record the agent's report (the last one wins) and answer it as stored."""
    check(REPORT, body, "VALIDATION_ERROR", "Presence report", prefix="body")
    Presence.objects.update_or_create(agent_id=agent_id, defaults={
        "available_slots": body["availableSlots"], "status": body["status"],
        "reported_at": now})
    return {"agentId": agent_id, "availableSlots": body["availableSlots"],
            "status": body["status"], "reportedAt": format_time(now)}
