"""A Group's log filled fast for a page measurement (mw_bench --pages --log-events N): the
events are written straight into ledger_event with COPY, not decided by commands, so no
projection follows them (the Missions and WorkItems they name do not exist; a page of
the log does not read them). They are still a log a member could have: consecutive
sequences after the Group's head, each sealed and chained as the append path seals them
(chain.seal: sha256 of the canonical document), the Group's head and head hash moved
with each slice, so the log page's chain check and mw_verify's chain walk find nothing.

What they look like (LIFECYCLE): Missions of ITEMS_PER_MISSION WorkItems, each Mission
created and approved by its human owner; each WorkItem authorized by a coordinator
agent, offered by the system, accepted, started, renewed, reported on and submitted by
one of WORKERS worker agents, reviewed by the system; every EXPIRED_EVERY-th WorkItem's
lease expires instead (system) and every APPROVAL_EVERY-th needs a human's execution
grant. So about 45% of the events are agents', 50% the system's and under 1% humans';
each Mission holds ~1,200 consecutive events (WorkItems follow one another), and a type
such as mission.created is one event in ~1,200."""

import time
from datetime import timedelta

from django.db import connection, transaction
from django.utils import timezone

from apps.ledger import db
from apps.ledger.models import Event, Group
from mission_weave.core import chain
from mission_weave.core.commands.base import derive_id
from mission_weave.protocol.timefmt import format_time

ITEMS_PER_MISSION = 100
WORKERS = 20
COORDINATORS = 5
OWNER = "user:bench-owner"
EXPIRED_EVERY = 10
APPROVAL_EVERY = 50
SLICE = 50_000  # events per transaction
COLUMNS = ["group_id", "sequence", "event_id", "type", "occurred_at", "actor", "command_id",
           "mission_id", "work_item_id", "revision", "data", "prev_hash", "hash"]

CONTRACT = {"goal": "Summarize the quarter's incident reports into one page",
            "acceptance": ["cites each incident by id", "under 600 words"],
            "budget": {"tokens": 200000, "seconds": 3600},
            "dependencies": {"workItems": [], "artifacts": []},
            "capabilities": ["text.summarize", "files.read"]}


def _lifecycle(item: str, k: int) -> list:
    """(type, actor, data) of WorkItem number k's events, in order."""
    coordinator = f"agent:bench-coordinator-{k % COORDINATORS}"
    worker = f"agent:bench-worker-{k % WORKERS}"
    lease = f"lease_{item}"
    events = [("work.authorized", coordinator, {"workItemId": item, "contract": CONTRACT}),
              ("work.offered", "system", {"offerId": f"offer_{item}", "agentId": worker,
                                           "expiresInSeconds": 120})]
    if k % APPROVAL_EVERY == 0:
        events.append(("approval.execution_granted", OWNER, {"note": "go ahead"}))
    events += [("work.offer_accepted", worker, {"offerId": f"offer_{item}"}),
               ("work.started", worker, {"leaseId": lease, "leaseSeconds": 600,
                                         "ownershipEpoch": 1}),
               ("lease.renewed", worker, {"leaseId": lease, "leaseSeconds": 600}),
               ("work.progress_reported", worker, {"message": "read 40 of 120 reports",
                                                   "percent": 33, "confidence": 0.8}),
               ("work.progress_reported", worker, {"message": "drafted the summary",
                                                   "percent": 80, "confidence": 0.85})]
    if k % EXPIRED_EVERY == 0:
        return [*events, ("lease.expired", "system", {"leaseId": lease, "ownerId": worker})]
    return [*events,
            ("work.submitted", worker, {"evidence": {"artifacts": [f"art_{item}"],
                                                     "summary": "one page, 540 words"}}),
            ("review.checks_completed", "system", {"passed": ["schema", "integrity"],
                                                   "failed": []}),
            ("review.evaluated", "system", {"verdict": "accepted", "score": 0.92}),
            ("work.verified", "system", {"reviewId": f"review_{item}"})]


def _plan():
    """Endless (type, actor, mission, work item, revision, data) in the order logged."""
    k, mission_number = 0, 0
    while True:
        mission = f"bench-m{mission_number}"
        yield ("mission.created", OWNER, mission, None, None,
               {"missionId": mission, "title": f"Quarter report {mission_number}",
                "ownerId": OWNER, "coordinatorId": "agent:bench-coordinator-0"})
        yield ("mission.approved", OWNER, mission, None, None, {"missionId": mission})
        for _ in range(ITEMS_PER_MISSION):
            item = f"{mission}-wi{k}"
            for revision, (type_, actor, data) in enumerate(_lifecycle(item, k), start=1):
                yield type_, actor, mission, item, revision, data
            k += 1
        mission_number += 1


def appended():
    """Endless progress reports of one WorkItem: events appended to a filled log one at
    a time (what a running Group appends most), not a new Mission each time."""
    revision = 100
    while True:
        revision += 1
        yield ("work.progress_reported", "agent:bench-worker-0", "bench-live", "bench-live-wi",
               revision, {"message": "still drafting", "percent": 90, "confidence": 0.9})


def fill(group_id: str, events: int, report=lambda text: None, analyze: bool = True,
         plan=None) -> dict:
    """Append `events` events to the Group's log after its head, from `plan` (default:
    the LIFECYCLE mix from its start); {head, seconds}."""
    started = time.perf_counter()
    head, last_hash = Group.objects.values_list("head_sequence", "head_hash").get(id=group_id)
    end = head + events
    at = timezone.now() - timedelta(seconds=events)  # one event a second, up to now
    plan = plan or _plan()
    while head < end:
        rows = []
        for sequence in range(head + 1, min(head + SLICE, end) + 1):
            type_, actor, mission, item, revision, data = next(plan)
            command_id = f"cmd-{sequence}"
            moment = at + timedelta(seconds=sequence)
            sealed = chain.seal({
                "id": derive_id("evt", f"{group_id}/{command_id}"), "groupId": group_id,
                "sequence": sequence, "type": type_, "occurredAt": format_time(moment),
                "actor": actor, "commandId": command_id, "missionId": mission,
                "workItemId": item, "revision": revision, "data": data,
                "prevHash": last_hash})
            last_hash = sealed["hash"]
            rows.append((group_id, sequence, sealed["id"], type_, moment, actor, command_id,
                         mission, item, revision, db.to_json(data), sealed["prevHash"],
                         last_hash))
        with transaction.atomic():
            db.copy(Event._meta.db_table, COLUMNS, rows)
            Group.objects.filter(id=group_id).update(head_sequence=rows[-1][1],
                                                     head_hash=last_hash)
        head = rows[-1][1]
        report(f"[log] {head} events")
    if not analyze:
        return {"head": head, "seconds": round(time.perf_counter() - started, 1)}
    with connection.cursor() as cursor:  # what autovacuum would do after such a load
        cursor.execute(f"VACUUM ANALYZE {Event._meta.db_table}")
    return {"head": head, "seconds": round(time.perf_counter() - started, 1)}
