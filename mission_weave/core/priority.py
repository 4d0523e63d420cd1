"""The requested priority of queued work (§11.1, §11.3: "Priority changes immediately
reorder queued WorkItems"). The order is computed from the current contract on every
read, so a revised urgency, impact or deadline reorders the queue at once.

This is the Coordinator's *request* within one Group. The Worker-owned Scheduler
(mission_weave.sdk.scheduler) keeps final authority over the order across Groups.

Order: urgency (critical first), then business impact, then the earlier deadline,
then the WorkItem id, so that equal requests always list the same way. An unknown
value comes after every known one (apps/work/models.py, WorkItemQuerySet.in_priority_order).
"""

URGENCY = ("critical", "high", "normal", "low")
BUSINESS_IMPACT = ("critical", "high", "medium", "low")
