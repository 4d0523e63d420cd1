"""The Group's event feed as delivery reads it: events after a sequence, in order.

One function for every transport (REST paging, WebSocket replay, gap filling), so the
online floor and `CURSOR_TOO_OLD` are decided in one place."""

from .models import Event, Group
from .pipeline import event_document


def head(group_id: str) -> int:
    return Group.objects.filter(id=group_id).values_list("head_sequence", flat=True)[0]


def events_after(group_id: str, after: int, limit: int) -> list[dict]:
    """Up to `limit` event documents with sequence > `after`, in sequence order."""
    rows = Event.objects.filter(group_id=group_id, sequence__gt=after).order_by("sequence")
    return [event_document(row) for row in rows[:limit]]
