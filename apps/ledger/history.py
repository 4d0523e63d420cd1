"""The Group's whole history: the archive and the online log read together, so that
archiving (apps/ledger/archive.py) moves events without any reader losing one.
Every event is in exactly one of the two tables at any committed moment."""

from collections.abc import Iterator

from mission_weave.protocol.timefmt import format_time

from . import db
from .models import ArchivedEvent, Event, Group

EVENTS, ARCHIVE, GROUPS = (Event._meta.db_table, ArchivedEvent._meta.db_table,
                           Group._meta.db_table)
COLUMNS = ["group_id", "sequence", "event_id", "type", "occurred_at", "actor", "command_id",
           "mission_id", "work_item_id", "revision", "data", "prev_hash", "hash"]
SELECT = ", ".join(COLUMNS)
CHUNK = 2000  # rows per read


def document(row: tuple) -> dict:
    """The wire form (PROTOCOL §3) of a row of COLUMNS, from either table."""
    (group_id, sequence, event_id, type_, occurred_at, actor, command_id, mission_id,
     work_item_id, revision, data, prev_hash, hash_) = row
    return {"id": event_id, "groupId": group_id, "sequence": sequence, "type": type_,
            "occurredAt": format_time(db.aware(occurred_at)), "actor": actor,
            "commandId": command_id, "missionId": mission_id, "workItemId": work_item_id,
            "revision": revision, "data": db.from_json(data), "prevHash": prev_hash,
            "hash": hash_}


def _both(group_id: str, condition: str, params: list, limit: int | None = None,
          select: str = SELECT) -> list:
    """Rows of both tables matching `condition`, in sequence order (`select`'s second
    column is the sequence). One statement, so one snapshot of the database: an event
    being moved is seen once, in one table or the other, never in neither."""
    # With a limit, each branch is ordered and limited on its own as well, so that each
    # reads its (group, sequence) index instead of the whole Group being sorted.
    cap = f" ORDER BY 2 LIMIT {int(limit)}" if limit is not None else ""
    sql = (f"(SELECT {select} FROM {ARCHIVE} WHERE group_id = %s AND {condition}{cap}) "
           f"UNION ALL (SELECT {select} FROM {EVENTS} WHERE group_id = %s AND {condition}{cap}) "
           f"ORDER BY 2" + (f" LIMIT {int(limit)}" if limit is not None else ""))
    return db.fetch(sql, [group_id, *params, group_id, *params])


def history(group_id: str, after: int = 0, through: int | None = None,
            chunk: int = CHUNK) -> Iterator[dict]:
    """Every event document of the Group with `after` < sequence (<= `through`), from the
    archive and the online log, in sequence order, read `chunk` rows at a time."""
    for row in rows(group_id, after, through, chunk):
        yield document(row)


def rows(group_id: str, after: int = 0, through: int | None = None, chunk: int = CHUNK,
         select: str = SELECT) -> Iterator[tuple]:
    """history()'s events as rows of `select` (default COLUMNS; its second column must
    be the sequence), for a reader that needs less than the documents."""
    bound = through if through is not None else 2**62
    while True:
        # The bounds are written into the statement, not bound: a statement run again
        # with new parameters is prepared (settings: prepare_threshold) and PostgreSQL
        # may then keep a generic plan, which does not know how few rows are above
        # `after` and sorts every one of them for each page: paging a log of 100,000
        # events then took 30 us an event instead of 1 (issue 27).
        found = _both(group_id, f"sequence > {int(after)} AND sequence <= {int(bound)}", [],
                      chunk, select)
        yield from found
        if len(found) < chunk:
            return
        after = found[-1][1]


def events_between(group_id: str, first: int, last: int) -> list[dict]:
    """The events first..last wherever they are now (a repeated command's answer)."""
    return [document(row) for row in
            _both(group_id, "sequence >= %s AND sequence <= %s", [first, last])]


def events_of_work_item(group_id: str, work_item_id: str) -> list[dict]:
    """A WorkItem's whole event history (its audit trail), archive included."""
    return [document(row) for row in _both(group_id, "work_item_id = %s", [work_item_id])]


def archived_after(group_id: str, after: int, limit: int) -> list[dict]:
    """Archived events with sequence > `after`, for an auditor."""
    rows = db.fetch(f"SELECT {SELECT} FROM {ARCHIVE} WHERE group_id = %s AND sequence > %s "
                    f"ORDER BY sequence LIMIT {int(limit)}", [group_id, after])
    return [document(row) for row in rows]


def floor(group_id: str) -> int:
    """Events at or below this sequence are in the archive, the rest online (0: none
    archived, or no such Group)."""
    return Group.objects.filter(id=group_id).values_list("online_floor", flat=True).first() or 0
