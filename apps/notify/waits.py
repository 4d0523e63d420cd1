"""What waits on whom, kept in step with a Group's log: the log is the outbox.

`look(group_id, now)` takes the Group's notify Cursor with FOR UPDATE SKIP LOCKED (two
workers never do the same Group: the second moves on, and the first looks again before it
lets go), reads the events after it (MW_NOTIFY_BATCH at most), and for each Mission they
touched asks the pure core (core/waiting.py, the home page's own rules) what waits on the
Mission's owner and coordinators now. A wait found that was not open is recorded with its
first mail; an open wait no longer found is resolved (its unsent mail dropped). Then the
Cursor moves past those events, all in one transaction: a crash before the commit leaves
the Cursor behind, and the next look (beat's catch_up) does it again.

Nothing here runs in a command's transaction: the command path is not slowed, and what it
committed is in the log, which this reads. Rows are written under the Cursor's lock only
(reminders take it too), so the partial unique index on open waits is a backstop."""

from django.conf import settings
from django.db import connection, transaction

from apps.identity.models import Membership
from apps.ledger.models import ArchivedEvent, Event, Group
from apps.work import models as work_models
from mission_weave.core import state, state_documents
from mission_weave.core.commands import authority
from mission_weave.core.waiting import ANSWERS, REFUSED, refusal_status, waiting

from .models import Cursor, Mail, Wait

LOOKS_PER_CALL = 20  # batches one call takes before it leaves the rest to the next


def look(group_id: str, now) -> list[int]:
    """Bring the Group's waits up to its log; the ids of the mails created. Looks again
    while the log is ahead (a commit that came while the Cursor was held has its hint
    skipped), up to LOOKS_PER_CALL batches."""
    _cursor_exists(group_id)
    created: list[int] = []
    for _ in range(LOOKS_PER_CALL):
        with transaction.atomic():
            found = _one_batch(group_id, now)
        if found is None:  # another worker holds the Group, or nothing is new
            break
        created += found
    return created


def behind() -> list[str]:
    """The Groups whose log is ahead of their notify Cursor (or that have none yet)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT g.id FROM ledger_group g LEFT JOIN notify_cursor c "
                       "ON c.group_id = g.id WHERE g.head_sequence > COALESCE(c.sequence, 0) "
                       "ORDER BY g.id")
        return [row[0] for row in cursor.fetchall()]


def _cursor_exists(group_id: str) -> None:
    with connection.cursor() as cursor:
        # From the Group's row: a hint about a Group since deleted (a task that outlived
        # it in the broker) finds no Cursor, and looks at nothing.
        cursor.execute("INSERT INTO notify_cursor (group_id, sequence, updated_at) "
                       "SELECT id, 0, now() FROM ledger_group WHERE id = %s "
                       "ON CONFLICT (group_id) DO NOTHING", [group_id])


def locked_cursor(group_id: str) -> int | None:
    """The Group's Cursor, locked until the transaction ends; None if another holds it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT sequence FROM notify_cursor WHERE group_id = %s "
                       "FOR UPDATE SKIP LOCKED", [group_id])
        row = cursor.fetchone()
    return None if row is None else row[0]


def _one_batch(group_id: str, now) -> list[int] | None:
    at = locked_cursor(group_id)
    if at is None:
        return None
    head, floor = Group.objects.values_list("head_sequence", "online_floor").get(id=group_id)
    if at >= head:
        return None
    if at < floor:
        # Archived since: look at every active Mission once, and go on from the floor.
        missions = set(work_models.Mission.objects.filter(
            group_id=group_id, state=state.MISSION_ACTIVE).values_list("mission_id", flat=True))
        last = floor
    else:
        rows = list(Event.objects.filter(group_id=group_id, sequence__gt=at)
                    .order_by("sequence").values_list("sequence", "mission_id", "work_item_id")
                    [:settings.MW_NOTIFY_BATCH])
        if not rows:
            return None
        last = rows[-1][0]
        missions = {m for _, m, _ in rows if m}
        loose = {i for _, m, i in rows if not m and i}  # an item's event without its Mission
        if loose:
            missions |= set(work_models.WorkItem.objects.filter(
                group_id=group_id, work_item_id__in=loose).values_list("mission_id", flat=True))
    created = recompute(group_id, missions, now)
    Cursor.objects.filter(group_id=group_id).update(sequence=last)
    return created


def recompute(group_id: str, mission_ids, now) -> list[int]:
    """Open the waits now found in these Missions, with their first mail, and resolve the
    open ones no longer found. Call with the Group's Cursor locked. The mails' ids."""
    mission_ids = set(mission_ids)
    if not mission_ids:
        return []
    found = current(group_id, mission_ids, now)
    open_waits = {_key(w): w for w in Wait.objects.filter(
        group_id=group_id, mission_id__in=mission_ids, resolved_at__isnull=True)}
    gone = [w.id for key, w in open_waits.items() if key not in found]
    if gone:
        Wait.objects.filter(id__in=gone).update(resolved_at=now)
        Mail.objects.filter(group_id=group_id, wait_id__in=gone, state=Mail.PENDING).update(
            state=Mail.DROPPED, reason="decided before the mail went out")
    new = [Wait(group_id=group_id, principal=principal, kind=kind, mission_id=mission_id,
                work_item_id=item_id, what=entry.what, title=entry.mission.title,
                since=entry.since, opened_at=now, last_mailed_at=now)
           for (principal, kind, mission_id, item_id), entry in found.items()
           if (principal, kind, mission_id, item_id) not in open_waits]
    if not new:
        return []
    Wait.objects.bulk_create(new)
    mails = Mail.objects.bulk_create([
        Mail(group_id=group_id, principal=w.principal, kind=Mail.NOTICE, wait_id=w.id,
             number=0, created_at=now) for w in new])
    return [m.id for m in mails]


def current(group_id: str, mission_ids: set, now) -> dict:
    """{(principal, kind, mission, item or ""): core Waiting} of everything that waits on
    a human member in these Missions now, as the home page would list it."""
    missions = [state_documents.mission_from_doc(r.doc) for r in work_models.Mission.objects
                .filter(group_id=group_id, mission_id__in=mission_ids,
                        state=state.MISSION_ACTIVE)]
    if not missions:
        return {}
    items: dict[str, list] = {}
    for row in work_models.WorkItem.objects.filter(group_id=group_id,
                                                   mission_id__in=[m.id for m in missions]):
        items.setdefault(row.mission_id, []).append(state_documents.item_from_doc(row.doc))
    people = {p for m in missions for p in (m.owner_id, *authority.coordinators(m))
              if p and p.startswith("user:")}
    roles = dict(Membership.objects.filter(group_id=group_id, principal__in=people, active=True)
                 .values_list("principal", "roles"))
    refused = open_refusals(group_id, missions, items)
    proposals = open_proposals(group_id, [m.id for m in missions])
    found = {}
    for mission in missions:
        for principal in sorted(people & {mission.owner_id, *authority.coordinators(mission)}):
            if principal not in roles:
                continue  # not a member (any more): nothing waits on them here
            for entry in waiting(mission, items.get(mission.id, []), principal,
                                 roles[principal], now, refusal_open=mission.id in refused,
                                 proposals=proposals.get(mission.id, [])):
                found[(principal, entry.kind, mission.id,
                       entry.item.id if entry.item else "")] = entry
    return found


def open_proposals(group_id: str, mission_ids: list) -> dict:
    """{mission id: [state.Proposal], oldest first} of these Missions' proposals not yet
    authorized. The dashboard asks it too (Waiting on me, the Mission page)."""
    found: dict[str, list] = {}
    for row in work_models.Proposal.objects.filter(group_id=group_id, status="open",
                                                   mission_id__in=mission_ids):
        found.setdefault(row.mission_id, []).append(state_documents.proposal_from_doc(row.doc))
    for proposals in found.values():
        proposals.sort(key=lambda p: (p.created_at is None, p.created_at, p.id))
    return found


def open_refusals(group_id: str, missions: list, items: dict) -> set:
    """The ids of `missions` whose latest refusal of the final Approval is unanswered: the
    refusals and their answers from the online log and the archive, in one statement. A
    Mission whose projection holds no refusal has none open (evolve clears it on
    work.authorized and work.contract_revised, which are answers too). The home page's
    Waiting on me asks it too."""
    refused = [m.id for m in missions if m.approval_refusal is not None]
    if not refused:
        return set()
    item_ids = [i.id for m in refused for i in items.get(m, [])]
    columns = ("sequence", "type", "mission_id")
    where = {"group_id": group_id, "mission_id__in": refused}
    answers = {"work_item_id__in": item_ids, "type__in": list(ANSWERS)}
    mine = {"work_item_id__isnull": True, "type": REFUSED}
    query = None
    for model in (Event, ArchivedEvent):
        for part in (answers, mine):
            rows = model.objects.filter(**where, **part).values_list(*columns)
            query = rows if query is None else query.union(rows, all=True)
    by_mission: dict[str, list] = {}
    for sequence, type_, mission_id in sorted(query or []):
        by_mission.setdefault(mission_id, []).append({"sequence": sequence, "type": type_})
    return {m for m in refused if (status := refusal_status(by_mission.get(m, [])))
            is not None and status["answer"] is None}


def _key(wait: Wait) -> tuple:
    return (wait.principal, wait.kind, wait.mission_id, wait.work_item_id)
