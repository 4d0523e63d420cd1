"""The log is the outbox. A command's transaction already writes its events; nothing is
added to it for webhooks. Each webhook keeps a cursor into its Group's log instead, and
`fan_out` turns the events after it into deliveries, in one transaction that also moves
the cursor: an event is made into a delivery exactly once per webhook (the cursor, and
the unique (group, webhook, event) key under it), and never lost (the cursor moves only
with the rows it covers). The deliveries are then sent after that commit (tasks.py).

A webhook starts at its Group's head when it is created: it gets what happens after,
not the Group's history."""

from django.conf import settings
from django.db import connection, transaction

from apps.ledger import db, history
from apps.ledger.models import ArchivedEvent, Event, Group

from . import payloads
from .models import Attempt, Delivery, Webhook

WEBHOOKS, DELIVERIES = Webhook._meta.db_table, Delivery._meta.db_table
EVENTS, ARCHIVE, GROUPS = (Event._meta.db_table, ArchivedEvent._meta.db_table,
                           Group._meta.db_table)


def fan_out(group_id: str, webhook_id: str, now) -> tuple[list[str], bool]:
    """Make the deliveries of the next batch (MW_WEBHOOK_BATCH) of the webhook's events
    after its cursor: ([ids of the deliveries made], whether the log now goes on past
    the new cursor). ([], False) when another worker holds the webhook (that one goes on
    to what this one would have done: see the end) or the webhook is gone."""
    batch = settings.MW_WEBHOOK_BATCH
    with transaction.atomic(), connection.cursor() as cursor:
        # SKIP LOCKED: a second fan-out of the same webhook leaves it to the first. By its
        # Group too: one shard's row, as Citus needs for FOR UPDATE.
        cursor.execute(f"SELECT w.format, w.event_types, w.cursor, g.head_sequence "
                       f"FROM {WEBHOOKS} w JOIN {GROUPS} g ON g.id = w.group_id "
                       f"WHERE w.id = %s AND w.group_id = %s FOR UPDATE OF w SKIP LOCKED",
                       [webhook_id, group_id])
        row = cursor.fetchone()
        if row is None:
            return [], False
        format_, types, after, head = row
        if after >= head:
            return [], False
        rows = _events(cursor, group_id, after, head, db.from_json(types) or [], batch)
        upto = rows[-1][1] if len(rows) == batch else head
        made = []
        if rows:
            values = []
            for found in rows:
                document = history.document(found)
                values.append((payloads.delivery_id(webhook_id, document["id"]), group_id,
                               webhook_id, document["id"], document["sequence"],
                               document["type"], payloads.body(format_, webhook_id, document),
                               now, now))
            placeholders = ", ".join(["(%s, %s, %s, %s, %s, %s, %s, 'pending', 0, %s, '', %s)"]
                                     * len(values))
            cursor.execute(
                f"INSERT INTO {DELIVERIES} (id, group_id, webhook_id, event_id, sequence, "
                f"event_type, body, state, attempts, next_attempt_at, claim, created_at) "
                f"VALUES {placeholders} "
                f"ON CONFLICT (group_id, webhook_id, event_id) DO NOTHING RETURNING id",
                [value for row_ in values for value in row_])
            made = [r[0] for r in cursor.fetchall()]
        cursor.execute(f"UPDATE {WEBHOOKS} SET cursor = %s WHERE id = %s", [upto, webhook_id])
    # The head read again after the commit: a fan-out that found this webhook locked
    # meanwhile (SKIP LOCKED) did nothing, and what its hint was for committed before
    # this read, so this one's caller (tasks._fan_out) goes on to it.
    return made, upto < Group.objects.values_list("head_sequence", flat=True).get(id=group_id)


def _events(cursor, group_id: str, after: int, head: int, types: list, limit: int) -> list:
    """The Group's events after..head of the chosen types (all when none are chosen), the
    archive's too (a webhook far behind may find its next events archived), in order.
    Bounds written into the statement, as history.rows does, for the same plan reason."""
    condition = f"group_id = %s AND sequence > {int(after)} AND sequence <= {int(head)}"
    params: list = [group_id]
    if types:
        condition += " AND type = ANY(%s)"
        params.append(list(types))
    cap = f"ORDER BY sequence LIMIT {int(limit)}"
    cursor.execute(f"(SELECT {history.SELECT} FROM {ARCHIVE} WHERE {condition} {cap}) "
                   f"UNION ALL (SELECT {history.SELECT} FROM {EVENTS} WHERE {condition} {cap}) "
                   f"ORDER BY 2 LIMIT {int(limit)}", params + params)
    return cursor.fetchall()


def behind(limit: int = 1000) -> list[tuple[str, str]]:
    """(group id, webhook id) of the webhooks whose cursor is behind their Group's head
    (a hint lost, or a batch left)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT w.group_id, w.id FROM {WEBHOOKS} w JOIN {GROUPS} g "
                       f"ON g.id = w.group_id WHERE w.cursor < g.head_sequence "
                       f"ORDER BY w.id LIMIT %s", [limit])
        return [(group_id, webhook_id) for group_id, webhook_id in cursor.fetchall()]


def prune(before, limit: int) -> int:
    """Forget at most `limit` finished deliveries (delivered or failed) made before
    `before`, with their attempts: how many. The cursor, not these rows, keeps an event
    from being delivered again, so nothing is sent twice for their going."""
    finished = ["delivered", "failed"]
    by_group: dict = {}
    for group_id, delivery_id in (Delivery.objects
                                  .filter(state__in=finished, created_at__lt=before)
                                  .order_by("created_at").values_list("group_id", "id")[:limit]):
        by_group.setdefault(group_id, []).append(delivery_id)
    pruned = 0
    # Locked and deleted a Group at a time (the attempts' key leads with it, and on Citus
    # a row lock is taken by a query of one shard only); the lock keeps a "Send again"
    # that reopened one of them meanwhile from losing it.
    for group_id, ids in by_group.items():
        with transaction.atomic():
            locked = list(Delivery.objects.select_for_update(skip_locked=True)
                          .filter(group_id=group_id, id__in=ids, state__in=finished)
                          .values_list("id", flat=True))
            Attempt.objects.filter(group_id=group_id, delivery_id__in=locked).delete()
            Delivery.objects.filter(group_id=group_id, id__in=locked).delete()
        pruned += len(locked)
    return pruned
