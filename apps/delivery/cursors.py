"""ACK: durable Cursors per (principal, Group). Monotonic (a lower one is ignored) and
never above the Group's head. Recording one deletes nothing: the log is the record."""

from django.db import transaction
from django.utils import timezone

from apps.identity import principals
from apps.identity.principals import Principal
from apps.ledger import db
from apps.ledger.models import Group
from mission_weave.protocol.errors import ProtocolError

from .models import Cursor

CURSORS, GROUPS = Cursor._meta.db_table, Group._meta.db_table


def is_group_id(value) -> bool:
    return isinstance(value, str) and bool(value) and "\x00" not in value


def is_sequence(value) -> bool:
    return type(value) is int and 0 <= value < 2**63


def parse(cursors) -> list[tuple[str, int]]:
    """`[{groupId, sequence}]` -> [(group id, sequence)], or VALIDATION_ERROR."""
    if not isinstance(cursors, list) or not cursors:
        raise ProtocolError("VALIDATION_ERROR", "cursors must be a non-empty list of "
                            "{groupId, sequence}")
    parsed = []
    for index, cursor in enumerate(cursors):
        if not isinstance(cursor, dict) or set(cursor) != {"groupId", "sequence"}:
            raise ProtocolError("VALIDATION_ERROR", f"cursors[{index}] must be exactly "
                                "{groupId, sequence}", {"index": index})
        group_id, sequence = cursor["groupId"], cursor["sequence"]
        if not is_group_id(group_id):
            raise ProtocolError("VALIDATION_ERROR", f"cursors[{index}].groupId must be a "
                                "Group id", {"index": index})
        if not is_sequence(sequence):
            raise ProtocolError("VALIDATION_ERROR", f"cursors[{index}].sequence must be a "
                                "non-negative integer", {"index": index})
        parsed.append((group_id, sequence))
    return parsed


def acknowledge(principal: Principal, cursors: list[tuple[str, int]]) -> None:
    """Record every cursor or none: each Group is checked for membership and head first."""
    for group_id, sequence in cursors:
        principals.membership(group_id, principal)
        head = db.fetch(f"SELECT head_sequence FROM {GROUPS} WHERE id = %s", [group_id])[0][0]
        if sequence > head:
            raise ProtocolError("VALIDATION_ERROR", f"sequence {sequence} is above the "
                                f"Group's head {head}",
                                {"groupId": group_id, "headSequence": head})
    now = timezone.now()
    upsert = (
        f"INSERT INTO {CURSORS} (principal, group_id, sequence, updated_at) "
        "VALUES (%s, %s, %s, %s) ON CONFLICT (principal, group_id) DO UPDATE SET "
        # CASE rather than GREATEST: SQLite (embedded) has no GREATEST.
        f"sequence = CASE WHEN EXCLUDED.sequence > {CURSORS}.sequence "
        f"THEN EXCLUDED.sequence ELSE {CURSORS}.sequence END, "
        f"updated_at = CASE WHEN EXCLUDED.sequence > {CURSORS}.sequence "
        f"THEN EXCLUDED.updated_at ELSE {CURSORS}.updated_at END")
    with transaction.atomic():  # every cursor in one round trip
        db.execute_batch([(upsert, [principal.id, group_id, sequence, now])
                          for group_id, sequence in cursors])


def read(principal: Principal, group_id: str) -> dict:
    """The principal's Cursor in a Group it is a member of (0 before any ACK)."""
    principals.membership(group_id, principal)
    rows = db.fetch(f"SELECT sequence, updated_at FROM {CURSORS} "
                    "WHERE principal = %s AND group_id = %s", [principal.id, group_id])
    sequence, updated = rows[0] if rows else (0, None)
    return {"groupId": group_id, "principal": principal.id, "sequence": sequence,
            "updatedAt": db.aware(updated).isoformat().replace("+00:00", "Z") if updated
            else None}
