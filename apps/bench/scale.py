"""mw_bench --scale: how cost grows, each figure beside its raw baseline in the same run.

1. Web processes: lifecycle commands/s through daphne × 1, 2, 4 (http_lifecycles.scenario:
   prepared and signed beforehand, over `groups` Groups), beside the raw SQL command
   transaction rate for the same commands, measured again at each point; the ratio each.
2. Groups: the same for 1, 10, 100, 1,000 Groups, daphne × the cpu count.
3. Log length: one Group's log filled to 10k, 100k, 1M events; at each length the
   latency of `commands` commands on a live lease (lease.renew and work.progress in
   turn, one client, one at a time, through HTTP: daphne × the cpu count, warmed up by
   WARM_UP untimed commands; a fresh WorkItem at each length, taken to `active` just
   before, so that its lease and its `issuedAt`s are new), beside the raw command
   transaction (http_lifecycles.run_raw's: lock the Group row, insert the event, update the
   head and one projection row, commit) against a raw table holding as many events of
   one group.
   A command reads its WorkItem, not the log: the latency must not grow with it.
4. mw_verify (`verify_group`) and the replay it starts with (`verify.replay`), of that
   Group at each length: seconds and µs per event, beside a raw COPY of the same rows
   (replay.run_copy). Linear if the µs per event at the largest length is within 1.5x
   of that at the smallest.

The fill goes through the append path the sweeper uses (submit_prepared: under the
Group lock, a version check, a seal per event, one COPY of the rows, the head, the
projection patch, the publish): work.progress_reported events on a WorkItem of their own
(they change only its revision), each slice made as prepare_system makes its
chain.Templates, except that the canonical form (pure-Python RFC 8785, ~150 µs an
event, most of prepare_system's cost) is written once per FILL_BODIES distinct bodies
and reused with the revision put in (`at_revision`). So a slice costs an `evolve`, a
sha256 and a COPY row per event (~115 µs in all on 2 shared cores, about half of it
PostgreSQL's: four indexes, the deferred foreign key check; 1M events in ~100 s).
`verify_group` re-serializes and checks every event at every length and must find
nothing.
"""

import json
import os
import time
import uuid

import psycopg
from django.db import connection
from django.utils import timezone

from apps.ledger import db, pipeline, verify
from apps.ledger.models import Event, Group
from apps.work import work_store
from mission_weave.core import chain, state
from mission_weave.core.evolve import evolve
from mission_weave.protocol.timefmt import format_time

from . import http_lifecycles, replay
from .harness import database_url, one_value, percentile_ms, server

FILL_ITEM = "fill"  # the WorkItem the filling events report progress on
FILL_SLICE = 10_000  # events per transaction while filling
FILL_BODIES = 100  # distinct progress bodies (templates) the fill cycles through
WARM_UP = 20  # commands sent, untimed, before the first log length's
LINEAR = 1.5  # largest length's µs per event within this of the smallest's: linear


def by_workers(workers: list, groups: int, lifecycles: int, clients: int, report) -> list:
    return [http_lifecycles.scenario(f"workers-{count}", groups, lifecycles, clients, count, report)
            for count in workers]


def by_groups(group_counts: list, lifecycles: int, clients: int, workers: int,
              report) -> list:
    return [http_lifecycles.scenario(f"groups-{count}", count, lifecycles, clients, workers, report)
            for count in group_counts]


# --- 3 and 4: one Group's log, longer and longer ------------------------------------------


def head_of(group_id: str) -> int:
    return Group.objects.get(id=group_id).head_sequence


def fill(group_id: str, length: int, now) -> int:
    """Append work.progress_reported events on FILL_ITEM until the Group's head is at
    least `length`; the head. Each slice is what prepare_system would make of its drafts
    (evolved one by one for their revisions and the projection patch), with templates
    from `fill_templates`, written by submit_prepared."""
    bodies = [replay.progress(k) for k in range(FILL_BODIES)]
    templates = fill_templates(group_id, bodies, now)
    at = connection.ops.adapt_datetimefield_value(now)
    data = [db.to_json(body) for body in bodies]
    while (head := head_of(group_id)) < length:
        count = min(FILL_SLICE, length - head)
        before = work_store.load_items(group_id, [FILL_ITEM]).items[FILL_ITEM]
        alone = state.View({}, {FILL_ITEM: before})
        slice_templates, rows = [], []
        for k in range(count):
            evolve(alone, state.Event("work.progress_reported", bodies[k % FILL_BODIES],
                                      now, "m", FILL_ITEM))
            revision = alone.items[FILL_ITEM].revision
            slice_templates.append(at_revision(templates[k % FILL_BODIES], revision))
            rows.append(("work.progress_reported", at, "m", FILL_ITEM, revision,
                         data[k % FILL_BODIES]))
        prepared = pipeline.Prepared(
            FILL_ITEM, work_store.versions(group_id, [FILL_ITEM])[FILL_ITEM],
            tuple(slice_templates),
            tuple(rows), work_store.item_patch(group_id, before, alone.items[FILL_ITEM]))
        appended = pipeline.submit_prepared(group_id, [prepared])  # None only if skip_locked
        if appended is None or len(appended) != count:
            raise RuntimeError("the fill lost a race for its WorkItem")
    with connection.cursor() as cursor:  # what autovacuum would do for a log this size
        cursor.execute(f"ANALYZE {Event._meta.db_table}")
    return head_of(group_id)


REVISION_PIECE = ',"revision":{},"sequence":'


def fill_templates(group_id: str, bodies: list, now) -> list:
    """A chain.Template per progress body (as prepare_system makes them), at revision 0.
    The canonical form (RFC 8785) orders the members by name, so `revision` sits alone
    between the prevHash and sequence marks, written as its digits: `at_revision` gives
    the same event at another revision without serializing it again."""
    templates = []
    for body in bodies:
        template = chain.Template({
            "id": None, "groupId": group_id, "sequence": None,
            "type": "work.progress_reported", "occurredAt": format_time(now),
            "actor": "system", "commandId": None, "missionId": "m", "workItemId": FILL_ITEM,
            "revision": 0, "data": body, "prevHash": None})
        if template.pieces[3] != REVISION_PIECE.format(0):
            raise RuntimeError(f"chain.Template's pieces changed: {template.pieces[3]!r}")
        templates.append(template)
    return templates


def at_revision(template: chain.Template, revision: int) -> chain.Template:
    """`template` (of fill_templates) at `revision`. A mistake here would show: every
    length's verify_group re-serializes each event and checks its hash."""
    moved = object.__new__(chain.Template)  # not __init__: that would serialize it again
    moved.pieces = [*template.pieces[:3], REVISION_PIECE.format(revision), template.pieces[4]]
    moved.document = {**template.document, "revision": revision}
    return moved


def live_commands(coordinator, worker, group_id: str, item: str, count: int) -> list:
    """A new WorkItem taken to `active` here, then `count` signed commands under its
    lease, lease.renew and work.progress in turn: one client's plan for run_http."""
    steps = http_lifecycles.start_steps(coordinator, worker, group_id, item)
    for agent, _type, _id, payload in steps:
        http_lifecycles.submit_here(agent, group_id, payload)
    fields = {"workItemId": item, "ownershipEpoch": 1,
              "leaseId": http_lifecycles.derive_id("lease", steps[-1][2])}
    commands = []
    for k in range(count):
        type_, body = (("lease.renew", {"leaseSeconds": 600}) if k % 2 == 0
                       else ("work.progress", replay.progress(k)))
        commands.append((type_, group_id, worker.token,
                         worker.command(group_id, type_, body, **fields)[1]))
    return [[commands]]


RAW_SCHEMA = http_lifecycles.raw_schema("mw_bench_scale") + \
    "INSERT INTO mw_bench_scale.grp VALUES ('g', 0, '');"


def raw_fill(dsn: str, length: int) -> None:
    """The raw group's events up to `length`, written by the database itself."""
    with psycopg.connect(dsn, autocommit=True) as raw:
        head = one_value(raw.execute("SELECT head_sequence FROM mw_bench_scale.grp"))
        if head < length:
            raw.execute(
                "INSERT INTO mw_bench_scale.event (group_id, sequence, type, data, hash) "
                "SELECT 'g', s, 'work.progress_reported', %s::jsonb, md5(s::text) "
                "FROM generate_series(%s::bigint, %s::bigint) AS s",
                (json.dumps(replay.progress(0)), head + 1, length))
            raw.execute("UPDATE mw_bench_scale.grp SET head_sequence = %s", (length,))
            raw.execute("ANALYZE mw_bench_scale.event")


def raw_latency(dsn: str, plan: list) -> dict:
    """The raw command transaction (http_lifecycles.run_raw's), one at a time, for the same
    commands, on the raw group: p50/p99 ms."""
    document, samples = json.dumps(http_lifecycles.contract()), []
    with psycopg.connect(dsn) as raw:
        for type_, _group, _token, payload in plan:
            started = time.perf_counter()
            with raw.transaction():
                head = one_value(raw.execute("SELECT head_sequence FROM mw_bench_scale.grp "
                                             "WHERE id = 'g' FOR UPDATE")) + 1
                raw.execute("INSERT INTO mw_bench_scale.event (group_id, sequence, type, "
                            "data, hash) VALUES ('g', %s, %s, %s, 'sha256:x')",
                            (head, type_, payload.decode()))
                raw.execute("UPDATE mw_bench_scale.grp SET head_sequence = %s, "
                            "head_hash = 'sha256:x' WHERE id = 'g'", (head,))
                raw.execute("INSERT INTO mw_bench_scale.item VALUES ('g', 'live', %s, %s) "
                            "ON CONFLICT (group_id, item_id) DO UPDATE "
                            "SET state = excluded.state, doc = excluded.doc", (type_, document))
            samples.append(time.perf_counter() - started)
    return {"n": len(samples), "p50Ms": percentile_ms(samples, 0.5),
            "p99Ms": percentile_ms(samples, 0.99)}


def timed_verify(group_id: str) -> dict:
    """verify_group, timed whole, and of it the replay it starts with (verify.replay,
    wrapped for the call): one pass over the log gives both figures."""
    original, seconds = verify.replay, {}

    def timed(*args, **kwargs):
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            seconds["replay"] = time.perf_counter() - started

    verify.replay = timed
    try:
        started = time.perf_counter()
        problems = verify.verify_group(group_id)
        seconds["verify"] = time.perf_counter() - started
    finally:
        verify.replay = original
    return {"problems": problems, **seconds}


def per_event_us(seconds: float, events: int) -> float:
    return round(seconds / events * 1e6, 2)


def by_log_length(lengths: list, commands: int, workers: int, report) -> dict:
    run = uuid.uuid4().hex[:8]
    groups, coordinator, (worker,) = http_lifecycles.cast(f"log-{run}", 1, 1)
    group_id = groups[0].id
    _id, body = coordinator.command(group_id, "work.authorize", {
        "workItemId": FILL_ITEM, "missionId": "m", "contract": http_lifecycles.contract()})
    http_lifecycles.submit_here(coordinator, group_id, body)
    dsn = database_url()
    with psycopg.connect(dsn, autocommit=True) as raw:
        raw.execute(RAW_SCHEMA)
    latency, verifying = [], []
    try:
        with server(workers) as port:
            # Untimed: the web processes' first requests (imports, connections, caches).
            http_lifecycles.run_http(port, live_commands(coordinator, worker, group_id, "warm-up",
                                                   WARM_UP))
            for length in sorted(lengths):
                report(f"[scale] filling Group {group_id}'s log to {length} events...")
                before, started = head_of(group_id), time.perf_counter()
                head = fill(group_id, length, timezone.now())
                filled = time.perf_counter() - started
                raw_fill(dsn, head)
                plan = live_commands(coordinator, worker, group_id, f"live-{length}",
                                     commands)
                report(f"[scale] {commands} commands at {head} events, through daphne × "
                       f"{workers}, and raw...")
                api = http_lifecycles.run_http(port, plan)
                latency.append({
                    "events": head, "fillSeconds": round(filled, 1),
                    "fillEventsPerSecond": round((head - before) / filled, 1) if filled else None,
                    "api": api, "raw": raw_latency(dsn, plan[0][0])})
                report(f"[scale] mw_verify, replay and raw COPY at {head_of(group_id)} "
                       "events...")
                events = head_of(group_id)
                checked = timed_verify(group_id)
                if checked["problems"]:
                    raise RuntimeError(f"mw_verify fails on the filled log: "
                                       f"{checked['problems'][:5]}")
                copied = replay.run_copy(group_id)
                verifying.append({
                    "events": events, "problems": checked["problems"],
                    "verifySeconds": round(checked["verify"], 3),
                    "verifyUsPerEvent": per_event_us(checked["verify"], events),
                    "replaySeconds": round(checked["replay"], 3),
                    "replayUsPerEvent": per_event_us(checked["replay"], events),
                    "raw": {"seconds": copied["seconds"],
                            "usPerEvent": per_event_us(copied["seconds"], copied["events"])}})
                verifying[-1]["verifyRatio"] = verify_ratio(verifying[-1])
    finally:
        with psycopg.connect(dsn, autocommit=True) as raw:
            raw.execute("DROP SCHEMA IF EXISTS mw_bench_scale CASCADE")
    return {"groupId": group_id, "commands": commands, "webWorkers": workers,
            "latency": latency, "verify": verifying, "linear": linearity(verifying)}


def verify_ratio(row: dict) -> dict:
    """mw_verify's and its replay's time per event over the raw COPY's, at one length."""
    raw = row["raw"]["usPerEvent"]
    return {"events": row["events"],
            "verify": round(row["verifyUsPerEvent"] / raw, 2) if raw else None,
            "replay": round(row["replayUsPerEvent"] / raw, 2) if raw else None}


def linearity(rows: list) -> dict:
    """µs per event at the largest length over that at the smallest, for verify,
    replay and the raw COPY; linear if within LINEAR."""
    if len(rows) < 2:
        return {}
    first, last = rows[0], rows[-1]
    growth = {"verify": last["verifyUsPerEvent"] / first["verifyUsPerEvent"],
              "replay": last["replayUsPerEvent"] / first["replayUsPerEvent"],
              "raw": last["raw"]["usPerEvent"] / first["raw"]["usPerEvent"]}
    return {what: {"perEventGrowth": round(g, 2), "linear": g <= LINEAR}
            for what, g in growth.items()}


def scenario(workers: list, group_counts: list, lengths: list, lifecycles: int, groups: int,
             clients: int, commands: int, report, web_workers: int | None = None) -> dict:
    """Each part for its list; an empty list skips it. `groups` is part 1's Group count,
    `web_workers` parts 2 and 3's web processes (default: the cpu count)."""
    web_workers = web_workers or os.cpu_count() or 2
    result = {"scenario": "scale", "lifecycles": lifecycles, "clients": clients,
              "loadAverage": os.getloadavg()}
    if workers:
        report(f"[scale] web processes {workers}: {lifecycles} lifecycles over {groups} "
               f"Groups each...")
        result["workers"] = by_workers(workers, groups, lifecycles, clients, report)
    if group_counts:
        report(f"[scale] Groups {group_counts}: {lifecycles} lifecycles, daphne × "
               f"{web_workers}...")
        result["groups"] = by_groups(group_counts, lifecycles, clients, web_workers, report)
    if lengths:
        result["log"] = by_log_length(lengths, commands, web_workers, report)
    result["loadAverageAfter"] = os.getloadavg()
    return result
