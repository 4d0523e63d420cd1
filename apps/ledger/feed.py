"""The Group's event feed as delivery reads it: events after a sequence, in order.

One function for every transport (REST paging, WebSocket replay, gap filling), so the
online floor and `CURSOR_TOO_OLD` are decided in one place.

On PostgreSQL the database writes each event's JSON (`EVENT_JSON`): a page of 1000
costs a few milliseconds of Python instead of tens, and a transport that only forwards
events (REST paging) never decodes them at all. The text is the same document as
`pipeline.event_document` (tests check the hash chain over it), key order and spacing
aside."""

import json

from . import db, history, snapshots
from .models import Group

# PROTOCOL §3's event document; occurredAt as timefmt.format_time writes it (whole
# seconds unless the moment has a fraction, then microseconds; UTC with `Z`).
EVENT_JSON = """json_build_object(
    'id', event_id, 'groupId', group_id, 'sequence', sequence, 'type', type,
    'occurredAt', to_char(occurred_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
        || CASE WHEN occurred_at = date_trunc('second', occurred_at) THEN ''
                ELSE to_char(occurred_at AT TIME ZONE 'UTC', '.US') END || 'Z',
    'actor', actor, 'commandId', command_id, 'missionId', mission_id,
    'workItemId', work_item_id, 'revision', revision, 'data', data::json,
    'prevHash', prev_hash, 'hash', hash)::text"""


def head(group_id: str) -> int:
    return Group.objects.filter(id=group_id).values_list("head_sequence", flat=True)[0]


def events_after(group_id: str, after: int, limit: int) -> list[dict]:
    """Up to `limit` event documents with sequence > `after`, in sequence order.
    Raises CURSOR_TOO_OLD (with the snapshot to resume from) when `after` is below the
    online floor: those events were archived (apps/ledger/archive.py)."""
    return [json.loads(text) for text in events_after_json(group_id, after, limit)]


def events_after_json(group_id: str, after: int, limit: int) -> list[str]:
    """The same events as JSON texts, for a transport that only forwards them."""
    where = "FROM {} WHERE group_id = %s AND sequence > %s ORDER BY sequence LIMIT %s" \
        .format(history.EVENTS)
    if db.is_postgres():
        texts = [text for (text,) in db.fetch(f"SELECT {EVENT_JSON} {where}",
                                              [group_id, after, limit])]
    else:  # the embedded try-out
        texts = [json.dumps(history.document(row), separators=(",", ":"))
                 for row in db.fetch(f"SELECT {history.SELECT} {where}", [group_id, after, limit])]
    # The floor is read after the events and only rises: if it is still at or below
    # `after` now, it was when the events were read, so they start right after `after`.
    floor = history.floor(group_id)
    if after < floor:
        raise snapshots.cursor_too_old(group_id, after, floor)
    return texts


def page_json(group_id: str, after: int, limit: int) -> str:
    """GET .../events as its JSON body: {"events": [...], "headSequence": H}."""
    events = events_after_json(group_id, after, limit)
    return f'{{"events":[{",".join(events)}],"headSequence":{head(group_id)}}}'
