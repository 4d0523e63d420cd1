"""mw_bench --load: a mixed agent workload for a fixed time, beside the raw PostgreSQL
transaction rate measured in the same run (http_lifecycles.run_raw, over the same commands).

Each client thread ("lane") is one worker agent, with a rescuer agent of its own, and
runs until the time is up, round-robin over the Groups:

- a lifecycle: work.authorize and work.offer (the coordinator), work.accept_offer,
  work.start, lease.renew ×2 and work.progress ×2 interleaved, the deliverable's blob
  PUT and its signed manifest (artifact.publish), work.submit, and work.accept_result by
  the coordinator with Evidence of its own (the review may still be running);
- every ABANDON-th lifecycle the worker stops after work.start (a 2 s lease, as if its
  process died). Three seconds later the coordinator offers the item to the lane's
  rescuer, which takes it over (the offer fences the lapsed owner), and the first
  worker's late work.progress is refused (counted as `fenced`; accepted, it would be a
  `staleAccepted` error); the rescuer finishes the lifecycle;
- every READ-th lifecycle: the Group's dashboard page (GET /g/<g>/, as the
  MissionOwner's Django session) and the WorkItem over REST.

Meanwhile WebSocket subscribers (apps/bench/load_subscribers.py, a process of their own)
follow every Group, spread over the web processes; after the load they wait until each
has every event up to the heads read then. Commands are signed as they go (the issuedAt
must be fresh), outside the measured time of each request. With Celery workers running
(the bench starts them) the review runs on every submission and beat sweeps."""

import http.client
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict, deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from apps.ledger.models import Group
from mission_weave.protocol.canonical import sha256_hex, sign
from mission_weave.protocol.timefmt import format_time

from . import http_lifecycles
from .harness import (
    ROOT,
    Client,
    celery_worker_command,
    database_url,
    latency_summary,
    percentile_ms,
    run_together,
    server,
)
from .load_subscribers import Subscribers

ABANDON = 10  # every this many lifecycles of a lane, the worker abandons the item
READ = 3  # every this many lifecycles, a dashboard page and a REST read
RESCUE_AFTER = 3.0  # seconds after an abandoned start (2 s lease) before the rescue
FENCED = {"STALE_LEASE", "LEASE_EXPIRED", "STALE_OWNERSHIP"}


@dataclass
class Prepared:
    groups: list
    coordinator: http_lifecycles.Agent
    workers: list
    rescuers: list
    cookie: str  # the MissionOwner's dashboard session


def prepare(run: str, groups: int, clients: int) -> Prepared:
    """Groups with Mission `m`, the coordinator, a worker and a rescuer per lane, and a
    signed-in session of the MissionOwner (http_lifecycles.OWNER) for the dashboard reads."""
    from django.contrib.auth import get_user_model
    from django.test import Client as DjangoClient

    cast, coordinator, agents = http_lifecycles.cast(run, groups, 2 * clients)
    browser = DjangoClient()
    browser.force_login(get_user_model().objects.get(
        username=http_lifecycles.OWNER.removeprefix("user:")))
    name = settings.SESSION_COOKIE_NAME
    return Prepared([g.id for g in cast], coordinator, agents[:clients], agents[clients:],
                    f"{name}={browser.cookies[name].value}")


class Http(Client):
    """harness.Client with the GET and PUT the workload needs. A broken connection is an
    answer with status 0 (counted as an error); the next request opens a new one."""

    def __init__(self, port: int):
        super().__init__(port)
        self.port, self.broken = port, False

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict | None = None) -> tuple[int, bytes]:
        try:
            if self.broken:
                super().__init__(self.port)
                self.broken = False
            self.connection.request(method, path, body, {**self.headers, **(headers or {})})
            response = self.connection.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException) as error:
            self.close()
            self.broken = True
            return 0, json.dumps({"error": {"code": type(error).__name__}}).encode()


@dataclass
class Rescue:
    due: float
    group_id: str
    item: str
    worker: http_lifecycles.Agent
    lease: dict


@dataclass
class Tally:
    """What every lane measured, under one lock."""

    samples: dict = field(default_factory=lambda: defaultdict(list))
    errors: Counter = field(default_factory=Counter)
    first_errors: list = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def sample(self, name: str, seconds: float) -> None:
        with self.lock:
            self.samples[name].append(seconds)

    def error(self, name: str, status: int, body: bytes) -> None:
        code = _code(body) or "UNEXPECTED_RESPONSE"
        with self.lock:
            self.errors[f"{name} {status} {code}"] += 1
            if len(self.first_errors) < 5:
                self.first_errors.append({"operation": name, "status": status,
                                          "body": body[:500].decode(errors="replace")})

    def count(self, name: str) -> None:
        with self.lock:
            self.counts[name] += 1


class Lane:
    def __init__(self, index: int, port: int, prepared: Prepared, seconds: float,
                 tally: Tally):
        self.index, self.port, self.prepared = index, port, prepared
        self.worker, self.rescuer = prepared.workers[index], prepared.rescuers[index]
        self.coordinator = prepared.coordinator
        self.seconds, self.tally = seconds, tally
        self.rescues: deque = deque()
        self.sent: list = []  # [[(type, group, token, payload)]] per lifecycle, for run_raw

    def run(self, ready) -> None:
        self.http = Http(self.port)
        ready()
        deadline, k = time.monotonic() + self.seconds, 0
        try:
            while time.monotonic() < deadline:
                if self.rescues and self.rescues[0].due <= time.monotonic():
                    self.rescue(self.rescues.popleft())
                else:
                    self.lifecycle(k)
                    k += 1
        finally:
            self.http.close()

    # --- one request ------------------------------------------------------------------

    def send(self, agent, group_id: str, type_: str, body: dict, expect_fenced=False,
             **fields) -> list | None:
        _id, payload = agent.command(group_id, type_, body, **fields)
        self.sent[-1].append((type_, group_id, agent.token, payload))
        started = time.perf_counter()
        status, answer = self.http.request("POST", f"/api/v1/groups/{group_id}/commands",
                                           payload, {"Authorization": f"Bearer {agent.token}"})
        self.tally.sample(type_, time.perf_counter() - started)
        if expect_fenced:
            code = _code(answer)
            if status == 409 and code in FENCED:
                self.tally.count("fenced")
                return None
            if status == 200:
                self.tally.count("staleAccepted")
            self.tally.error(f"late {type_}", status, answer)
            return None
        if status != 200:
            self.tally.error(type_, status, answer)
            return None
        self.tally.count("commands")
        return json.loads(answer)["events"]

    def read(self, name: str, path: str, headers: dict) -> None:
        started = time.perf_counter()
        status, answer = self.http.request("GET", path, None, headers)
        self.tally.sample(name, time.perf_counter() - started)
        if status != 200:
            self.tally.error(name, status, answer)

    # --- the workload ---------------------------------------------------------------

    def lifecycle(self, k: int) -> None:
        groups = self.prepared.groups
        group_id = groups[(self.index + k * len(self.prepared.workers)) % len(groups)]
        item = f"ld-{self.index}-{k}"
        self.sent.append([])
        self.tally.count("lifecycles")
        expires = format_time(timezone.now() + timedelta(hours=1))
        if not self.send(self.coordinator, group_id, "work.authorize", {
                "workItemId": item, "missionId": "m", "contract": http_lifecycles.contract()}):
            return
        if not self.send(self.coordinator, group_id, "work.offer", {
                "candidates": [self.worker.name], "mode": "sequential", "expiresAt": expires},
                workItemId=item):
            return
        abandon = k % ABANDON == ABANDON - 1
        lease = self.take(self.worker, group_id, item, 2 if abandon else 60)
        if lease is None:
            return
        if abandon:
            self.rescues.append(Rescue(time.monotonic() + RESCUE_AFTER, group_id, item,
                                       self.worker, lease))
            return
        self.finish(self.worker, group_id, item, lease)
        if k % READ == 0:
            self.read("dashboard.group", f"/g/{group_id}/", {"Cookie": self.prepared.cookie})
            self.read("api.work_item", f"/api/v1/groups/{group_id}/work-items/{item}",
                      {"Authorization": f"Bearer {self.coordinator.token}"})

    def rescue(self, rescue: Rescue) -> None:
        """The abandoned item, to the rescuer: the offer fences the lapsed owner."""
        self.sent.append([])
        self.tally.count("rescues")
        expires = format_time(timezone.now() + timedelta(hours=1))
        if not self.send(self.coordinator, rescue.group_id, "work.offer", {
                "candidates": [self.rescuer.name], "mode": "sequential",
                "expiresAt": expires}, workItemId=rescue.item):
            return
        lease = self.take(self.rescuer, rescue.group_id, rescue.item, 60)
        if lease is None:
            return
        self.send(rescue.worker, rescue.group_id, "work.progress", {"phase": "late"},
                  expect_fenced=True, **rescue.lease)
        self.finish(self.rescuer, rescue.group_id, rescue.item, lease)

    def take(self, agent, group_id: str, item: str, seconds: int) -> dict | None:
        accepted = self.send(agent, group_id, "work.accept_offer", {"contractRevision": 1},
                             workItemId=item)
        if not accepted:
            return None
        epoch = accepted[0]["data"]["ownershipEpoch"]
        started = self.send(agent, group_id, "work.start", {"leaseSeconds": seconds},
                            workItemId=item, ownershipEpoch=epoch)
        if not started:
            return None
        return {"workItemId": item, "ownershipEpoch": epoch,
                "leaseId": started[0]["data"]["leaseId"]}

    def finish(self, agent, group_id: str, item: str, lease: dict) -> None:
        for step in range(2):
            if not self.send(agent, group_id, "lease.renew", {"leaseSeconds": 60}, **lease):
                return
            if not self.send(agent, group_id, "work.progress", {"phase": f"step {step}"},
                             **lease):
                return
        name = self.publish(agent, group_id, item, lease)
        if name is None:
            return
        now = format_time(timezone.now())
        if not self.send(agent, group_id, "work.submit", {
                "contractRevision": 1, "artifacts": [name], "evidence": [_evidence(
                    item, agent, now, name, "bench", "pass: written")]}, **lease):
            return
        self.send(self.coordinator, group_id, "work.accept_result", {"evidence": [_evidence(
            f"{item}-review", self.coordinator, now, name, "coordinator-review",
            "pass: read it")]}, workItemId=item)

    def publish(self, agent, group_id: str, item: str, lease: dict) -> str | None:
        data = f"# {item}\n\nWritten by {agent.name} for the load benchmark.\n".encode()
        name = sha256_hex(data)
        started = time.perf_counter()
        status, answer = self.http.request("PUT", f"/api/v1/blobs/{name}", data, {
            "Authorization": f"Bearer {agent.token}",
            "Content-Type": "application/octet-stream"})
        self.tally.sample("blob.put", time.perf_counter() - started)
        if status not in (200, 201):
            self.tally.error("blob.put", status, answer)
            return None
        manifest = {"hash": name, "mediaType": "text/markdown", "schema": None,
                    "size": len(data), "producer": agent.name, "agentCardVersion": "1",
                    "missionId": "m", "groupId": group_id, "workItemId": item, "sources": [],
                    "versions": {"tool": "mw_bench", "model": None, "capability": "1"},
                    "createdAt": format_time(timezone.now()), "classification": "internal",
                    "uri": f"http://127.0.0.1:{self.port}/api/v1/blobs/{name}"}
        signed = sign(manifest, agent.key, agent.key_id)
        return name if self.send(agent, group_id, "artifact.publish", signed, **lease) else None


def _evidence(key: str, agent, at: str, artifact: str, method: str, result: str) -> dict:
    return {"id": f"ev-{key}", "subject": "deliverable:out", "criteria": ["ok"],
            "method": method, "result": result, "producer": f"agent:{agent.name}",
            "timestamp": at, "artifacts": [artifact]}


def _code(body: bytes) -> str | None:
    try:
        return json.loads(body)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None


def socket_plan(ports: list, groups: list, subscribers: int) -> list:
    """[(ws url, [group ids])]: the subscribers spread over the web processes, each Group
    followed by at least one of them."""
    shares = max(1, min(subscribers, len(groups)))
    return [(f"ws://127.0.0.1:{ports[i % len(ports)]}/ws/v1/",
             [g for j, g in enumerate(groups) if j % shares == i % shares])
            for i in range(subscribers)]


def heads(group_ids: list) -> dict:
    return dict(Group.objects.filter(id__in=group_ids).values_list("id", "head_sequence"))


def drive(ports: list, prepared: Prepared, seconds: float, sockets: list, report) -> dict:
    """The workload against the web processes on `ports` (lane i on ports[i % n]) for
    `seconds`, with WebSocket subscribers on `sockets`; what it measured, and the
    commands sent (`plans`, for http_lifecycles.run_raw)."""
    tally = Tally()
    subscribers = None
    if sockets:
        report(f"[load] {len(sockets)} WebSocket subscriber(s) connecting...")
        subscribers = Subscribers(sockets, prepared.workers[0].token, heads(prepared.groups))
    report(f"[load] {len(prepared.workers)} lanes for {seconds:g} s over "
           f"{len(prepared.groups)} Groups, {len(ports)} web port(s)...")
    lanes = [Lane(i, ports[i % len(ports)], prepared, seconds, tally)
             for i in range(len(prepared.workers))]
    elapsed = run_together(lambda lane, ready: lane.run(ready), lanes)
    operations = sum(len(v) for v in tally.samples.values())
    result = {"seconds": round(elapsed, 2), "operations": operations,
              "operationsPerSecond": round(operations / elapsed, 1),
              "commands": tally.counts["commands"],
              "commandsPerSecond": round(tally.counts["commands"] / elapsed, 1),
              "lifecycles": tally.counts["lifecycles"], "rescues": tally.counts["rescues"],
              "fenced": tally.counts["fenced"], "staleAccepted": tally.counts["staleAccepted"],
              "errors": dict(tally.errors), "errorCount": sum(tally.errors.values()),
              "firstErrors": tally.first_errors, "latency": latency_summary(tally.samples)}
    websocket = None
    if subscribers is not None:
        final = heads(prepared.groups)
        report("[load] waiting for the subscribers to have every event...")
        got = subscribers.finish(final, 30)
        latencies = got["latencies"]
        websocket = {"subscribers": len(sockets), "deliveries": len(latencies),
                     "deliveriesPerSecond": round(len(latencies) / elapsed, 1),
                     "duplicates": sum(s["duplicates"] for s in got["sockets"]),
                     "reconnects": sum(s["reconnects"] for s in got["sockets"]),
                     "missing": sum(len(m) for s in got["sockets"]
                                    for m in s["missing"].values()),
                     "p50Ms": percentile_ms(latencies, 0.5),
                     "p99Ms": percentile_ms(latencies, 0.99), "sockets": got["sockets"]}
    return {"api": result, "websocket": websocket,
            "plans": [lane.sent for lane in lanes]}


@contextmanager
def celery_workers(count: int, env: dict, folder: Path, seconds: float = 120):
    """`count` Celery workers (the first with beat: the sweeper, the review's resume),
    each in a process group of its own; the block starts once every one answers a ping
    (one that came up after the load would find every submission already accepted, and
    review nothing). Stopped (the group) after the block."""
    names = [f"mw{k}-{uuid.uuid4().hex[:6]}@{socket.gethostname()}" for k in range(count)]
    logs = [folder / f"celery-{k}.log" for k in range(count)]
    processes = []
    try:
        for k, (name, log) in enumerate(zip(names, logs)):
            beat = ["--beat", "--schedule", str(folder / "beat")] if k == 0 else []
            with log.open("ab") as out:
                processes.append(subprocess.Popen(
                    celery_worker_command("-n", name, *beat), cwd=ROOT, env=env, stdout=out,
                    stderr=subprocess.STDOUT, start_new_session=True))
        _answering(names, processes, logs, seconds)
        yield processes
    finally:
        for process in processes:
            _stop_group(process)


def _answering(names: list, processes: list, logs: list, seconds: float) -> None:
    from mission_weave.celery import app

    deadline = time.monotonic() + seconds
    waiting = set(names)
    while waiting:
        for reply in app.control.ping(destination=sorted(waiting), timeout=1):
            waiting -= reply.keys()
        if waiting and (time.monotonic() > deadline
                        or any(p.poll() is not None for p in processes)):
            ends = "".join(f"\n--- {log}:\n{log.read_text(errors='replace')[-3000:]}"
                           for log in logs)
            raise RuntimeError(f"Celery workers {sorted(waiting)} did not answer a ping "
                               f"within {seconds:g} s{ends}")


def _stop_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def scenario(seconds: float, groups: int, clients: int, web_workers: int, subscribers: int,
             celery: int, report) -> dict:
    run = uuid.uuid4().hex[:8]
    report(f"[load] preparing {groups} Groups, {clients} lanes...")
    prepared = prepare(f"load-{run}", groups, clients)
    with tempfile.TemporaryDirectory(prefix="mw-bench-load-") as folder:
        # The server's and the workers' blobs and data here, not in the checkout's .mw/;
        # this process's database and SECRET_KEY (the dashboard session is signed with it).
        env = {**os.environ, "DATABASE_URL": database_url(), "DEBUG": "0",
               "SECRET_KEY": settings.SECRET_KEY, "MW_DATA_DIR": folder,
               "MW_BLOB_ROOT": str(Path(folder) / "blobs"), "MW_SWEEP_IN_PROCESS": "0"}
        with celery_workers(celery, env, Path(folder)), server(web_workers, env=env) as port:
            measured = drive([port], prepared, seconds,
                             socket_plan([port], prepared.groups, subscribers), report)
    report(f"[load] raw SQL baseline over the same {measured['api']['commands']} "
           f"commands, {clients} clients...")
    raw = http_lifecycles.run_raw(measured.pop("plans"), prepared.groups)
    api = measured["api"]
    return {"scenario": "load", "groups": groups, "clients": clients,
            "webWorkers": web_workers, "celeryWorkers": celery, **measured, "raw": raw,
            "ratio": round(api["commandsPerSecond"] / raw["transactionsPerSecond"], 3)}
