"""mw_bench --sweep: expired leases spread over many Groups, swept to completion by
the real sweeper, beside the raw set-based SQL doing the same updates in the same run,
and the p99 of ordinary commands while the sweep runs against idle.

Setup writes a consistent log fast: per Group, one system transaction through the
append pipeline (`submit_system`: chained events and their projections, in
multi-row statements) with mission.created and, per WorkItem, work.authorized,
work.offer_accepted and work.started, all an hour in the past, so every lease has
expired. `verify_group` checks a sample Group before and after.

The sweep runs in subprocesses (`--sweepers`, from the process start to the last one
done), as Celery workers would; the ordinary commands
(work.authorize, signed in advance, 50 a second) go through `pipeline.submit` in this
process, one client thread, round-robin over the same Groups, so they contend for the Group locks
the sweeper takes; only those sent between the first sweep's start and the last one's end
count. Idle is as many commands before the sweep and after it. Commands are measured
in-process, not through HTTP.
"""

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from datetime import timedelta

import psycopg
from django.conf import settings
from django.utils import timezone

from apps.identity import registry
from apps.identity.principals import Principal
from apps.ledger import pipeline
from apps.ledger.models import Event, Group
from apps.ledger.verify import verify_group
from apps.work import models as work_models
from apps.work import work_store
from mission_weave.core.commands import Draft, derive_id
from mission_weave.core.state import View
from mission_weave.protocol.timefmt import format_time

from .harness import database_url, one_value
from .harness import percentile_ms as ms
from .http_lifecycles import Agent, contract

COORDINATOR = "bsc-"  # and the run: the agent that coordinates the Missions and sends them
# the ordinary commands (per-Mission authority: only the Mission's Coordinator authorizes)


def _drafts(leases: int, worker: str, coordinator: str, setup_at, expires_at: str) -> list:
    """mission.created (coordinated by the agent that sends the ordinary commands), then
    authorized -> accepted -> started for `leases` WorkItems."""
    drafts = [Draft("mission.created", {"missionId": "m", "title": "sweep bench",
                                        "ownerId": "user:bench", "coordinatorId": coordinator,
                                        "budgets": {}, "autoDispatch": False}, "m")]
    start_by = format_time(setup_at + timedelta(hours=1))
    for k in range(leases):
        item = f"wi-{k}"
        lease = derive_id("lease", item)
        drafts += [
            Draft("work.authorized", {"workItemId": item, "proposalId": None,
                                      "contract": {**contract(), "revision": 1}}, "m", item),
            Draft("work.offer_accepted", {"agentId": worker, "ownershipEpoch": 1,
                                          "startBy": start_by, "withdrawn": [],
                                          "contractRevision": 1}, "m", item),
            Draft("work.started", {"leaseId": lease, "expiresAt": expires_at,
                                   "ownershipEpoch": 1, "agentId": worker, "sessionEpoch": 1,
                                   "attempt": 1}, "m", item),
        ]
    return drafts


def prepare(run: str, leases: int, group_count: int, setup_at) -> list:
    groups = [registry.create_group(f"sweep-{run}-{i}")[0].id for i in range(group_count)]
    expires_at = format_time(setup_at + timedelta(seconds=60))
    for index, group_id in enumerate(groups):
        share = leases // group_count + (1 if index < leases % group_count else 0)
        drafts = _drafts(share, f"bw-{run}", f"agent:{COORDINATOR}{run}", setup_at,
                         expires_at)
        pipeline.submit_system(group_id, lambda view, d=drafts: d, setup_at, lambda g: View())
    return groups


RAW_SCHEMA = """
CREATE SCHEMA IF NOT EXISTS mw_bench_sweep;
DROP TABLE IF EXISTS mw_bench_sweep.grp, mw_bench_sweep.item, mw_bench_sweep.event;
CREATE TABLE mw_bench_sweep.grp AS SELECT id, head_sequence, head_hash FROM {groups}
    WHERE id = ANY(%(groups)s);
ALTER TABLE mw_bench_sweep.grp ADD PRIMARY KEY (id);
CREATE TABLE mw_bench_sweep.item AS SELECT group_id, work_item_id, state, owner, lease_id,
    lease_expires_at, doc FROM {items} WHERE group_id = ANY(%(groups)s);
ALTER TABLE mw_bench_sweep.item ADD PRIMARY KEY (group_id, work_item_id);
CREATE INDEX ON mw_bench_sweep.item (lease_expires_at);
CREATE TABLE mw_bench_sweep.event (group_id text NOT NULL, sequence bigint NOT NULL,
    event_id text NOT NULL, type text NOT NULL, occurred_at timestamptz NOT NULL,
    actor text NOT NULL, command_id text NOT NULL, mission_id text, work_item_id text,
    revision integer, data jsonb NOT NULL, prev_hash text NOT NULL, hash text NOT NULL,
    UNIQUE (group_id, sequence));
ANALYZE mw_bench_sweep.item;
"""

# Per Group, one transaction: lock the Group, one UPDATE of its expired leases (closing
# the lease in the columns and the document; the owner stays recorded, no longer live,
# as the sweeper leaves it), one INSERT of one lease.expired event each.
RAW_SWEEP = """
WITH due AS (
    SELECT work_item_id, lease_id FROM mw_bench_sweep.item
    WHERE group_id = %(group)s AND state = 'active' AND lease_expires_at <= %(now)s
    FOR UPDATE),
expired AS (
    UPDATE mw_bench_sweep.item i SET lease_id = NULL, lease_expires_at = NULL,
        doc = jsonb_set(jsonb_set(i.doc, '{lease,closedAt}', to_jsonb(%(at)s::text)),
                        '{lease,closeReason}', '"expired"')
    FROM due WHERE i.group_id = %(group)s AND i.work_item_id = due.work_item_id),
numbered AS (
    SELECT due.*, row_number() OVER (ORDER BY due.work_item_id) AS n FROM due)
INSERT INTO mw_bench_sweep.event SELECT %(group)s, %(head)s + n, md5(%(group)s || n),
    'lease.expired', %(now)s, 'system', 'raw', 'm', work_item_id, 0,
    jsonb_build_object('leaseId', lease_id, 'reason', 'timeout'),
    'sha256:x', 'sha256:x'
FROM numbered
"""


def run_raw(groups: list, now) -> dict:
    with psycopg.connect(database_url(), autocommit=True) as connection:
        schema = RAW_SCHEMA.format(groups=Group._meta.db_table,
                                   items=work_models.WorkItem._meta.db_table)
        for statement in filter(str.strip, schema.split(";")):
            connection.execute(statement, {"groups": groups} if "%(" in statement else None)
    events = 0
    with psycopg.connect(database_url()) as connection:
        started = time.perf_counter()
        for group_id in groups:
            with connection.transaction():
                head = one_value(connection.execute(
                    "SELECT head_sequence FROM mw_bench_sweep.grp WHERE id = %s FOR UPDATE",
                    (group_id,)))
                inserted = connection.execute(RAW_SWEEP, {
                    "group": group_id, "now": now, "at": format_time(now),
                    "head": head}).rowcount
                connection.execute("UPDATE mw_bench_sweep.grp SET head_sequence = %s, "
                                   "head_hash = 'sha256:x' WHERE id = %s",
                                   (head + inserted, group_id))
                events += inserted
        elapsed = time.perf_counter() - started
    with psycopg.connect(database_url(), autocommit=True) as connection:
        connection.execute("DROP SCHEMA mw_bench_sweep CASCADE")
    # One lease.expired per expired lease, as the sweeper appends.
    return {"leases": events, "events": events, "seconds": round(elapsed, 3),
            "leasesPerSecond": round(events / elapsed, 1)}


SWEEP_TO_COMPLETION = """
import json, os, sys, time
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mission_weave.settings")
import django
django.setup()
from apps.work import sweeper
from mission_weave.protocol.timefmt import parse_time
now, limit = parse_time(sys.argv[1]), int(sys.argv[2])
total, rounds = {}, 0
began = time.time()
while True:
    result = sweeper.sweep(now=now, limit=limit)
    rounds += 1
    for key, value in result.items():
        total[key] = total.get(key, 0) + value
    if result["expiredLeases"] + result["expiredOwnerships"] == 0 and not result["skippedGroups"]:
        break
total.update(began=began, ended=time.time(), rounds=rounds)
print(json.dumps(total))
"""


PACE = 0.02  # seconds between ordinary commands: 50 a second


class Commands:
    """Ordinary commands (work.authorize) through pipeline.submit, one client thread."""

    def __init__(self, run: str, groups: list, count: int):
        self.agent = Agent(f"{COORDINATOR}{run}", [Group.objects.get(id=g) for g in groups],
                           ["coordinator"])
        self.principal = Principal(f"agent:{self.agent.name}", self.agent.session_epoch)
        self.groups = groups
        self.envelopes = [json.loads(self.agent.command(
            groups[k % len(groups)], "work.authorize",
            {"missionId": "m", "contract": contract()})[1]) for k in range(count)]
        self.next = 0
        self.locked = 0.0  # seconds the last command spent taking its Group lock

    @contextmanager
    def timing_locks(self):
        """Time each command's lock round trip (BEGIN, the Group lock and the first read,
        `work_store.load_after`): where the tail comes from, lock waits or CPU."""
        original = work_store.load_after

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.locked = time.perf_counter() - started
        work_store.load_after = timed
        try:
            yield
        finally:
            work_store.load_after = original

    def measure(self, until=None, count: int | None = None) -> list:
        """(wall clock at send, latency in s, of which taking the lock) of commands sent at
        a steady PACE: `count` of them, or while `until()` is false. Paced, not back to
        back, so that the client does not take a core of its own from the sweep it is
        measuring beside."""
        samples: list[tuple[float, float, float]] = []
        due = time.perf_counter()
        while self.next < len(self.envelopes):
            due += PACE
            time.sleep(max(0.0, due - time.perf_counter()))
            if count is not None and len(samples) >= count:
                break
            if until is not None and until():
                break
            envelope = self.envelopes[self.next]
            self.next += 1
            started, at, self.locked = time.perf_counter(), time.time(), 0.0
            answer = pipeline.submit(envelope["groupId"], envelope, self.principal)
            samples.append((at, time.perf_counter() - started, self.locked))
            assert answer.status == 200, answer.body
        return samples


# Idle commands before the sweep and as many after it: a p99 of one short window is the
# machine's worst moments in it (an fsync stall), not the server's.
IDLE_COMMANDS = 500


def _latency(samples: list) -> dict:
    """Percentiles of (at, latency, lock) samples: of the whole command, of its lock
    round trip, and of the rest (Python, the writes, the commit: CPU and I/O)."""
    total = [latency for _, latency, _ in samples]
    lock = [locked for _, _, locked in samples]
    rest = [latency - locked for _, latency, locked in samples]
    return {"commands": len(samples), "p50Ms": ms(total, 0.5), "p99Ms": ms(total, 0.99),
            "lockP50Ms": ms(lock, 0.5), "lockP99Ms": ms(lock, 0.99),
            "restP50Ms": ms(rest, 0.5), "restP99Ms": ms(rest, 0.99)}


def scenario(leases: int, group_count: int, batch: int, sweepers: int, report) -> dict:
    run = uuid.uuid4().hex[:8]
    setup_at = timezone.now() - timedelta(hours=1)
    report(f"[sweep] writing {leases} expired leases over {group_count} Groups...")
    started = time.perf_counter()
    groups = prepare(run, leases, group_count, setup_at)
    with psycopg.connect(database_url(), autocommit=True) as connection:  # as the raw side's
        for table in (Group._meta.db_table, work_models.WorkItem._meta.db_table,
                      Event._meta.db_table):
            connection.execute(f"ANALYZE {table}")
    setup_seconds = round(time.perf_counter() - started, 1)
    sample = groups[0]
    assert verify_group(sample) == [], "the prepared log does not verify"
    now = timezone.now()

    report(f"[sweep] raw set-based SQL baseline (set up in {setup_seconds} s)...")
    raw = run_raw(groups, now)

    commands = Commands(run, groups, 6000)
    report("[sweep] ordinary commands, idle...")
    with commands.timing_locks():
        idle_before = commands.measure(count=IDLE_COMMANDS)

    report(f"[sweep] sweeping to completion (batch {batch}, {sweepers} sweeper process(es)) "
           "while commands run...")
    processes = [subprocess.Popen([sys.executable, "-c", SWEEP_TO_COMPLETION, format_time(now),
                                   str(batch)], cwd=settings.BASE_DIR, env=dict(os.environ),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(sweepers)]
    busy = []
    with commands.timing_locks():
        client = threading.Thread(target=lambda: busy.extend(commands.measure(
            until=lambda: all(p.poll() is not None for p in processes))))
        client.start()
        outputs = [p.communicate() for p in processes]
        client.join()
    for process, (_, err) in zip(processes, outputs):
        if process.returncode != 0:
            raise RuntimeError("the sweep failed: " + err[-2000:])
    # From the first sweep's start to the last one's end: process start-up is not sweeping.
    results = [json.loads(out) for out, _ in outputs]
    swept = {"seconds": max(r["ended"] for r in results) - min(r["began"] for r in results)}
    for result in results:
        for key, value in result.items():
            if key not in ("began", "ended"):
                swept[key] = swept.get(key, 0) + value
    # Only commands sent while a sweep ran: not those of the processes' start-up.
    began, ended = min(r["began"] for r in results), max(r["ended"] for r in results)
    during = _latency([sample for sample in busy if began <= sample[0] <= ended])
    report("[sweep] ordinary commands, idle again...")
    with commands.timing_locks():
        idle_after = commands.measure(count=IDLE_COMMANDS)
    idle = _latency(idle_before + idle_after)

    problems = verify_group(sample)
    expired = Event.objects.filter(group_id=sample, type="lease.expired").count()
    fenced = Event.objects.filter(group_id=sample, type="work.ownership_expired").count()
    # A lease timeout appends lease.expired only: one event per lease, no ownerships.
    # (The sweepers also sweep whatever else of this database is due: count ours.)
    ours = Event.objects.filter(group_id__in=groups, type="lease.expired").count()
    assert ours == raw["leases"] == leases <= swept["expiredLeases"], (swept, raw, ours)
    assert swept["expiredOwnerships"] == 0 and fenced == 0, (swept, fenced)
    ratio = raw["leasesPerSecond"] / (swept["expiredLeases"] / swept["seconds"])
    return {
        "scenario": "sweep", "groups": group_count, "leases": leases, "batch": batch,
        "sweepers": sweepers, "groupChunk": settings.MW_SWEEP_GROUP_CHUNK,
        "setupSeconds": setup_seconds,
        "sweep": {"leases": swept["expiredLeases"], "ownerships": swept["expiredOwnerships"],
                  "rounds": swept["rounds"], "skippedGroups": swept["skippedGroups"],
                  "seconds": round(swept["seconds"], 3),
                  "leasesPerSecond": round(swept["expiredLeases"] / swept["seconds"], 1)},
        "raw": raw, "rawOverSweep": round(ratio, 2),
        "commands": {"idle": idle, "idleBeforeP99Ms": _latency(idle_before)["p99Ms"],
                     "idleAfterP99Ms": _latency(idle_after)["p99Ms"], "duringSweep": during,
                     "p99Ratio": round(during["p99Ms"] / idle["p99Ms"], 2),
                     "path": "pipeline.submit in-process (no HTTP)"},
        "verify": {"groupId": sample, "leaseExpiredEvents": expired,
                   "ownershipExpiredEvents": fenced, "problems": problems},
    }
