"""The Group's event feed as delivery reads it: events after a sequence, in order.

One function for every transport (REST paging, WebSocket replay, gap filling), so the
online floor and `CURSOR_TOO_OLD` are decided in one place.

On PostgreSQL the database writes each event's JSON (`EVENT_JSON`): a page of 1000
costs a few milliseconds of Python instead of tens, and a transport that only forwards
events (REST paging, the WebSocket) never decodes them at all. The text is the same
document as `pipeline.event_document` (tests compare them and check the hash chain over
it), written compactly; `data` is as PostgreSQL writes jsonb."""

import json

from . import db, history, snapshots
from .models import Group

# PROTOCOL §3's event document, concatenated (a fifth cheaper than json_build_object,
# and compact); occurredAt as timefmt.format_time writes it (whole seconds unless the
# moment has a fraction, then microseconds; UTC with `Z`).
EVENT_JSON = """'{"id":' || to_json(e.event_id) || ',"groupId":' || to_json(e.group_id)
    || ',"sequence":' || e.sequence || ',"type":' || to_json(e.type)
    || ',"occurredAt":"' || to_char(e.occurred_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
    || CASE WHEN e.occurred_at = date_trunc('second', e.occurred_at) THEN ''
            ELSE to_char(e.occurred_at AT TIME ZONE 'UTC', '.US') END
    || 'Z","actor":' || to_json(e.actor)
    || ',"commandId":' || coalesce(to_json(e.command_id)::text, 'null')
    || ',"missionId":' || coalesce(to_json(e.mission_id)::text, 'null')
    || ',"workItemId":' || coalesce(to_json(e.work_item_id)::text, 'null')
    || ',"revision":' || coalesce(e.revision::text, 'null') || ',"data":' || e.data::text
    || ',"prevHash":' || to_json(e.prev_hash) || ',"hash":' || to_json(e.hash) || '}'"""

EVENT_FRAME_PREFIX = '{"op":"EVENT","event":'

# One statement, so one snapshot: the Group's floor and head as of the events read.
# (Archiving raises the floor and deletes the rows below it in one transaction, so if
# the floor is at or below `after` here, the events read start right after `after`.)
# The Group row comes first, so a page with no events still reads the floor.
PAGE_SQL = """SELECT g.online_floor, g.head_sequence, e.sequence, {expression}
    FROM {groups} g LEFT JOIN LATERAL (
        SELECT * FROM {events} WHERE group_id = g.id AND sequence > %s
        ORDER BY sequence LIMIT %s) e ON true
    WHERE g.id = %s ORDER BY e.sequence"""


def head(group_id: str) -> int:
    return Group.objects.filter(id=group_id).values_list("head_sequence", flat=True)[0]


def events_after(group_id: str, after: int, limit: int) -> list[dict]:
    """Up to `limit` event documents with sequence > `after`, in sequence order.
    Raises CURSOR_TOO_OLD (with the snapshot to resume from) when `after` is below the
    online floor: those events were archived (apps/ledger/archive.py)."""
    return [json.loads(text) for _sequence, text in _read(group_id, after, limit)[0]]


def event_frames_after(group_id: str, after: int, limit: int) -> list[tuple[int, str]]:
    """The same events as (sequence, WebSocket EVENT frame) pairs, the frames written by
    the database: `{"op":"EVENT","event":{...}}` (PROTOCOL §4)."""
    return _read(group_id, after, limit, frames=True)[0]


def page_json(group_id: str, after: int, limit: int) -> str:
    """GET .../events as its JSON body: {"events": [...], "headSequence": H}."""
    rows, head_sequence = _read(group_id, after, limit)
    return f'{{"events":[{",".join(text for _sequence, text in rows)}],' \
           f'"headSequence":{head_sequence}}}'


def _read(group_id: str, after: int, limit: int, frames: bool = False):
    """([(sequence, text), ...], head) of up to `limit` events after `after`."""
    expression = f"'{EVENT_FRAME_PREFIX}' || {EVENT_JSON} || '}}'" if frames else EVENT_JSON
    sql = PAGE_SQL.format(expression=expression, groups=Group._meta.db_table,
                          events=history.EVENTS)
    found = db.fetch(sql, [after, limit, group_id])
    floor, head_sequence = found[0][:2] if found else (0, 0)  # no such Group: no events
    rows = [(sequence, text) for _f, _h, sequence, text in found if sequence is not None]
    if after < floor:
        raise snapshots.cursor_too_old(group_id, after, floor)
    return rows, head_sequence
