"""The one controlled path that moves events from the online log into the archive
(PROTOCOL §4: archiving moves events out of the online log; it never deletes history;
apps/ledger/history.py reads both).

Every event is in exactly one of the two tables at any committed moment: a move copies
the rows, raises the Group's `online_floor` over them and deletes them from the online
log in one transaction, under the Group lock the pipeline takes. PostgreSQL refuses that
delete unless the transaction asked for it and the rows are already in the archive
(migration 0004), so nothing else can drop an event.
"""

from django.conf import settings
from django.db import connection, transaction

from .history import ARCHIVE, EVENTS, GROUPS, SELECT, floor
from .models import Snapshot
from .pipeline import _lock as lock_group  # the pipeline's Group lock: appends wait for a move


def archive_through(snapshot: Snapshot, chunk: int | None = None) -> int:
    """Move the Group's events up to the snapshot's sequence into the archive and raise
    the online floor to it; answers the floor. Idempotent. In transactions of at most
    `chunk` events (MW_ARCHIVE_CHUNK), so a command waits on at most one chunk; the floor
    rises with each, and the snapshot (at or above it) is what CURSOR_TOO_OLD points to."""
    chunk = chunk or settings.MW_ARCHIVE_CHUNK
    while True:
        with transaction.atomic():
            lock_group(snapshot.group_id)
            current = floor(snapshot.group_id)
            if current >= snapshot.sequence:
                return current
            _move(snapshot.group_id, current, min(snapshot.sequence, current + chunk))


def _move(group_id: str, after: int, through: int) -> None:
    """One chunk, inside the caller's transaction and Group lock."""
    span = [group_id, after, through]
    where = "WHERE group_id = %s AND sequence > %s AND sequence <= %s"
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {ARCHIVE} ({SELECT}) SELECT {SELECT} FROM {EVENTS} {where}",
                       span)
        copied = cursor.rowcount
        cursor.execute(f"UPDATE {GROUPS} SET online_floor = %s WHERE id = %s",
                       [through, group_id])
        # The trigger's permission, for this transaction only. A SET LOCAL statement, not
        # set_config(): on Citus only the statement reaches the shards' trigger
        # (citus.propagate_set_commands, set by mw_distribute).
        cursor.execute("SET LOCAL mw.archiving = on")
        cursor.execute(f"DELETE FROM {EVENTS} {where}", span)
        deleted = cursor.rowcount
        cursor.execute("SET LOCAL mw.archiving = off")
    if not copied == deleted == through - after:
        # the online log lacked some of these events: refuse rather than leave a hole
        raise RuntimeError(f"archiving Group {group_id} {after + 1}..{through}: copied "
                           f"{copied}, deleted {deleted} of {through - after} events")
