"""mw_bench --replay: a Group's log replayed to one client, in events per second, over
HTTP paging (GET .../events?after=N&limit=1000) and over the WebSocket (SUBSCRIBE with
afterSequence 0), beside a raw `COPY (SELECT ...) TO STDOUT` of the same rows, in the
same run. Each client parses what it receives (JSON) as a real one would; the COPY
baseline only counts bytes.

The log is filled through the pipeline (submit_system): one WorkItem, then progress
reports on it, each event about the size of a real `work.progress_reported`."""

import http.client
import json
import time
import uuid

import psycopg
from django.db import connection
from django.utils import timezone

from apps.ledger import pipeline
from apps.ledger.models import Event, Group
from apps.work import work_store
from mission_weave.core.commands import Draft

from . import http_lifecycles
from .harness import database_url, server

PAGE = 1000
SLICE = 2000  # events appended per transaction while filling


def progress(n: int) -> dict:
    return {"phase": f"phase {n % 7}", "milestones": [f"step {k}" for k in range(n % 4)],
            "nextCheckpoint": "2030-01-01T00:00:00Z", "blockers": [],
            "estimate": {"remainingSeconds": 600 - n % 600, "confidence": 0.8},
            "evidenceRefs": [f"sha256:{uuid.uuid4().hex}{uuid.uuid4().hex}"]}


def prepare(run: str, events: int) -> dict:
    group = http_lifecycles.bench_group(f"bench-replay-{run}")
    coordinator = http_lifecycles.Agent(f"brc-{run}", [group], ["coordinator"])
    reader = http_lifecycles.Agent(f"brr-{run}", [group], ["observer"])
    _id, body = coordinator.command(group.id, "mission.create", {
        "missionId": "m", "title": "replay", "ownerId": http_lifecycles.OWNER,
        "coordinatorId": f"agent:{coordinator.name}"})
    http_lifecycles.submit_here(coordinator, group.id, body)
    _id, body = coordinator.command(group.id, "work.authorize", {
        "workItemId": "wi", "missionId": "m", "contract": http_lifecycles.contract()})
    http_lifecycles.submit_here(coordinator, group.id, body)
    now = timezone.now()
    while (head := _head(group.id)) < events:
        count = min(SLICE, events - head)
        pipeline.submit_system(
            group.id, lambda view, count=count, head=head: [
                Draft("work.progress_reported", progress(head + k), "m", "wi")
                for k in range(count)],
            now, lambda group_id: work_store.load_items(group_id, ["wi"]))
    with connection.cursor() as cursor:  # what autovacuum would do for a log this size
        cursor.execute(f"ANALYZE {Event._meta.db_table}")
    return {"groupId": group.id, "token": reader.token, "head": _head(group.id)}


def _head(group_id: str) -> int:
    return Group.objects.get(id=group_id).head_sequence


def run_copy(group_id: str) -> dict:
    """The same rows, straight out of PostgreSQL in COPY's text format."""
    with psycopg.connect(database_url()) as connection, connection.cursor() as cursor:
        started = time.perf_counter()
        size, rows = 0, 0
        with cursor.copy("COPY (SELECT group_id, sequence, event_id, type, occurred_at, actor, "
                         "command_id, mission_id, work_item_id, revision, data, prev_hash, hash "
                         "FROM ledger_event WHERE group_id = %s ORDER BY sequence) TO STDOUT",
                         [group_id]) as copy:
            for chunk in copy:
                size += len(chunk)
                rows += bytes(chunk).count(b"\n")
        elapsed = time.perf_counter() - started
    return _rate(rows, elapsed, size)


def run_http(port: int, prepared: dict) -> dict:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    headers = {"Authorization": f"Bearer {prepared['token']}"}
    path = f"/api/v1/groups/{prepared['groupId']}/events"
    after, size, pages = 0, 0, 0
    started = time.perf_counter()
    while after < prepared["head"]:
        connection.request("GET", f"{path}?after={after}&limit={PAGE}", headers=headers)
        response = connection.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"GET events answered {response.status}: {body[:300]!r}")
        events = json.loads(body)["events"]
        size, pages = size + len(body), pages + 1
        _check(events, after)
        after = events[-1]["sequence"]
    elapsed = time.perf_counter() - started
    connection.close()
    return {**_rate(after, elapsed, size), "pages": pages}


def run_websocket(port: int, prepared: dict) -> dict:
    from websockets.sync.client import connect

    url = f"ws://127.0.0.1:{port}/ws/v1/"
    with connect(url, additional_headers={"Authorization": f"Bearer {prepared['token']}"},
                 max_size=None, open_timeout=30) as socket:
        started = time.perf_counter()
        socket.send(json.dumps({"op": "SUBSCRIBE", "groupId": prepared["groupId"],
                                "afterSequence": 0}))
        sent, size = 0, 0
        while sent < prepared["head"]:
            text = socket.recv(timeout=60, decode=True)  # text frames, as str
            frame = json.loads(text)
            size += len(text)
            if frame.get("op") != "EVENT":
                if frame.get("op") == "ERROR":
                    raise RuntimeError(f"the WebSocket answered {text[:300]}")
                continue
            sequence = frame["event"]["sequence"]
            if sequence <= sent:
                continue  # a duplicate is allowed (PROTOCOL §4)
            if sequence != sent + 1:
                raise RuntimeError(f"event {sequence} after {sent}: a gap")
            sent = sequence
        elapsed = time.perf_counter() - started
    return _rate(sent, elapsed, size)


def _check(events: list, after: int) -> None:
    if not events or events[0]["sequence"] != after + 1:
        raise RuntimeError(f"the page after {after} does not continue the log")


def _rate(events: int, seconds: float, size: int) -> dict:
    return {"events": events, "seconds": round(seconds, 3),
            "eventsPerSecond": round(events / seconds, 1), "megabytes": round(size / 1e6, 2)}


def scenario(events: int, workers: int, report, port: int | None = None,
             websocket: bool = True) -> dict:
    run = uuid.uuid4().hex[:8]
    report(f"[replay] filling a Group's log with {events} events...")
    prepared = prepare(run, events)
    report("[replay] raw COPY of the same rows...")
    raw = run_copy(prepared["groupId"])
    result = {"scenario": "replay", "events": prepared["head"], "webWorkers": workers,
              "raw": raw}
    with server(workers, port) as port:
        report(f"[replay] HTTP paging, {PAGE} per page...")
        result["http"] = run_http(port, prepared)
        result["httpOverRaw"] = round(result["http"]["eventsPerSecond"]
                                      / raw["eventsPerSecond"], 3)
        if websocket:
            report("[replay] WebSocket SUBSCRIBE afterSequence=0...")
            try:
                result["websocket"] = run_websocket(port, prepared)
                result["websocketOverRaw"] = round(result["websocket"]["eventsPerSecond"]
                                                   / raw["eventsPerSecond"], 3)
            except Exception as error:  # the WebSocket is new: report, keep the HTTP figure
                result["websocket"] = {"error": f"{type(error).__name__}: {error}"}
    return result
