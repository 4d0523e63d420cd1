"""Template filters of the artifact reader (apps/dashboard/reader.py, submissions.py)."""

from django import template

register = template.Library()


@register.filter
def submission_count(events) -> int:
    """How many times a WorkItem was submitted, from its audit trail's events."""
    return sum(1 for event in events if event["type"] == "work.submitted")
