"""What the fault tests check in the database after a fault: each returns a list of
problems as sentences ([] is healthy), the way `mw_verify` does.

- `partial_states`: no command half applied (events without their command record, a
  record without all of its events);
- `gapless`: each Group's log is 1..head with no hole, and the head is its last event;
- `one_live_owner`: replaying the log, every action only a lease holder may take came
  from the WorkItem's one live owner, inside its lease;
- `after_kill`: all of the above for the Group of a command whose process was killed at
  a fault point, plus whether that command was committed as the point says it must be.
"""

import json

from django.db import connection

from apps.ledger import history
from apps.ledger.models import CommandRecord, Event
from apps.ledger.verify import apply, verify_group
from mission_weave.core import state
from mission_weave.protocol.timefmt import parse_time

# Events only the lease holder's commands append (PROTOCOL §11.3).
LEASE_HOLDER_EVENTS = frozenset({"lease.renewed", "work.progress_reported", "work.submitted",
                                 "work.checkpointed", "work.blocked"})
# Events only the owner's commands append, with or without a lease (a queued item's owner).
OWNER_EVENTS = frozenset({"work.started", "work.schedule_disclosed"})


def partial_states(group_id: str) -> list:
    problems = []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT e.command_id FROM ledger_event e WHERE e.group_id = %s "
            "AND e.actor <> 'system' AND NOT EXISTS (SELECT 1 FROM ledger_commandrecord r "
            "WHERE r.group_id = e.group_id AND r.command_id = e.command_id AND r.accepted)",
            [group_id])
        problems += [f"events of command {c} without its acceptance record"
                     for (c,) in cursor.fetchall()]
        cursor.execute(
            "SELECT r.command_id, r.response, (SELECT count(*) FROM ledger_event e "
            "WHERE e.group_id = r.group_id AND e.command_id = r.command_id) "
            "FROM ledger_commandrecord r WHERE r.group_id = %s AND r.accepted", [group_id])
        for command_id, response, count in cursor.fetchall():
            if isinstance(response, str):  # Django reads jsonb as text
                response = json.loads(response)
            first, last = response["sequences"]
            if count != last - first + 1:
                problems.append(f"command {command_id} was accepted with events {first}..{last} "
                                f"but the log holds {count} of its events")
    return problems


def gapless(group_ids: list) -> list:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT g.id, g.head_sequence, count(e.sequence), coalesce(max(e.sequence), 0), "
            "coalesce(min(e.sequence), 1) FROM ledger_group g LEFT JOIN ledger_event e "
            "ON e.group_id = g.id WHERE g.id = ANY(%s) GROUP BY g.id", [list(group_ids)])
        rows = cursor.fetchall()
    return [f"Group {g}: head {head}, {count} events from {low} to {high}"
            for g, head, count, high, low in rows
            if not (count == high == head and low == 1) and not (head == count == 0)]


def one_live_owner(group_id: str) -> list:
    """Replay the Group: before each event a lease holder's command appended, that agent
    must be the item's owner with an open lease that had not expired when it was decided;
    a `work.offer_accepted` only when the item had no owner left (the offer fenced it)."""
    view, problems = state.View(), []
    for document in history.history(group_id, after=0, chunk=2000):
        item = view.items.get(document["workItemId"]) if document["workItemId"] else None
        actor = document["actor"]
        if item is not None and actor.startswith("agent:"):
            agent = actor.removeprefix("agent:")
            at = parse_time(document["occurredAt"])
            where = f"sequence {document['sequence']} ({document['type']} of {item.id})"
            if document["type"] in LEASE_HOLDER_EVENTS:
                lease = item.live_lease
                if item.owner != agent or lease is None or lease.agent_id != agent:
                    problems.append(f"{where}: by {agent}, but the live owner is {item.owner} "
                                    f"(lease {lease.id if lease else None})")
                elif not at < lease.expires_at:
                    problems.append(f"{where}: by {agent} after its lease expired at "
                                    f"{lease.expires_at.isoformat()}")
            elif document["type"] in OWNER_EVENTS and item.owner != agent:
                problems.append(f"{where}: by {agent}, the owner is {item.owner}")
            elif document["type"] == "work.offer_accepted" and item.owner is not None:
                problems.append(f"{where}: accepted by {agent} while {item.owner} still owned it")
        apply(view, document)
    return problems


def after_kill(group_id: str, command_id: str, point: str, before: bool = False) -> dict:
    """The Group after a process died at `point` with `command_id` in flight: replay
    equals the projections (mw_verify), nothing half applied, and the command committed
    exactly when the point is past the commit, or when it was `before` (committed by an
    earlier attempt, and this one its retry)."""
    problems = verify_group(group_id) + partial_states(group_id)
    record = CommandRecord.objects.filter(group_id=group_id, command_id=command_id).first()
    events = Event.objects.filter(group_id=group_id, command_id=command_id).count()
    committed = record is not None
    if point == "after_commit" and not committed:
        problems.append(f"killed after the commit of {command_id}, which is not recorded")
    if point != "after_commit" and committed and not before:
        problems.append(f"killed at {point}, before the commit, yet {command_id} is recorded")
    if not committed and events:
        problems.append(f"{events} events of the unrecorded command {command_id}")
    return {"problems": problems, "committed": committed,
            "accepted": record.accepted if record else None, "events": events}
