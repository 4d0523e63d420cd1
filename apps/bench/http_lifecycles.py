"""mw_bench (default): full WorkItem lifecycles through the real HTTP stack, beside
the raw SQL transaction the same commands boil down to, in the same run.

A lifecycle is seven commands: authorize, offer, accept, start, artifact.publish (the
deliverable's manifest; its bytes are stored beforehand), submit, accept_result (with
the Coordinator's own Evidence). All are built and signed before the clock starts (ids
the server derives, such as the lease id, are derived here the same way), so the
clients only send bytes.
"""

import json
import tempfile
import time
import uuid
from collections import defaultdict
from datetime import timedelta

import psycopg
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.contrib.auth import get_user_model
from django.db import connection as django_connection
from django.test.utils import override_settings
from django.utils import timezone

from apps.artifacts import blobs
from apps.identity import principals, registry
from apps.identity.principals import Principal
from apps.ledger import pipeline
from apps.work import recovery
from mission_weave.core.commands import derive_id
from mission_weave.core.json_types import JsonObject
from mission_weave.protocol.canonical import public_key_b64url, sha256_hex, sign
from mission_weave.protocol.timefmt import format_time

from .harness import (
    Client,
    CpuMeter,
    ceilings,
    database_url,
    free_port,
    group_commit_batches,
    latency_summary,
    percentile_ms,
    run_together,
    start_server,
    stop_server,
)

CARD = {"version": "1", "capabilities": [{"id": "bench", "version": "1"}],
        "maxConcurrency": 1000}


def contract() -> dict:
    return {
        "schema": "mwp.work-contract/1", "goal": "Benchmark work",
        "deliverables": [{"id": "out", "description": "the output"}],
        "acceptanceCriteria": [{"id": "ok", "description": "it is done"}],
        "dependencies": {"workItems": [], "policy": "all_verified"},
        "capabilities": [{"id": "bench", "version": "1"}],
        "deadline": "2030-01-01T00:00:00Z", "urgency": "normal", "businessImpact": "low",
        "budgets": {"tokens": 1000},
        "retry": {"maxAttempts": 1, "backoff": {"strategy": "fixed", "initialSeconds": 0,
                                                "maxSeconds": 0}},
        "risk": {"class": "low", "requiresExecutionApproval": False},
    }


class Agent:
    def __init__(self, name: str, groups: list, roles: list):
        self.name, self.key = name, Ed25519PrivateKey.generate()
        self.key_id = registry.register_agent(name, public_key_b64url(self.key), CARD).key_id
        for group in groups:
            registry.add_member(group, f"agent:{name}", roles)
        request = {"agentId": name, "keyId": self.key_id, "nonce": uuid.uuid4().hex,
                   "issuedAt": format_time(timezone.now())}
        opened = recovery.open_session(sign(request, self.key, self.key_id), timezone.now())
        self.token, self.session_epoch = opened["token"], opened["sessionEpoch"]

    def command(self, group_id: str, type_: str, body: dict, **fields) -> tuple[str, bytes]:
        envelope = {"id": f"b-{uuid.uuid4().hex}", "type": type_, "groupId": group_id,
                    "actor": f"agent:{self.name}", "issuedAt": format_time(timezone.now()),
                    "sessionEpoch": self.session_epoch, "membershipEpoch": 1, "body": body,
                    **fields}
        return envelope["id"], json.dumps(sign(envelope, self.key, self.key_id)).encode()


OWNER = "user:bench"  # the MissionOwner of every bench Mission (a human member)
# One command of a plan as a client sends it: (type, Group id, bearer token, signed bytes).
# A plan is a list per client of lifecycles, each a list of these.
Step = tuple[str, str, str, bytes]


def bench_group(slug: str):
    """A Group whose MissionOwner is the bench's human, as mission.create requires."""
    group = registry.create_group(slug)[0]
    # Created once: its password's hash costs ~0.5 s here (1,000 Groups took 8 minutes).
    owner = OWNER.removeprefix("user:")
    if not get_user_model().objects.filter(username=owner).exists():
        registry.create_user(owner, "bench")
    registry.add_member(group, OWNER, ["owner"])
    return group


def cast(run: str, group_count: int, clients: int) -> tuple[list, Agent, list]:
    """Groups with a Mission `m`, one coordinator and a worker per client thread."""
    groups = [bench_group(f"bench-{run}-{i}") for i in range(group_count)]
    coordinator = Agent(f"bc-{run}", groups, ["coordinator"])
    workers = [Agent(f"bw-{run}-{t}", groups, ["worker"]) for t in range(clients)]
    for group in groups:
        _id, body = coordinator.command(group.id, "mission.create", {
            "missionId": "m", "title": "bench", "ownerId": OWNER,
            "coordinatorId": f"agent:{coordinator.name}"})
        submit_here(coordinator, group.id, body)
    return groups, coordinator, workers


def submit_here(agent: Agent, group_id: str, payload: bytes) -> dict:
    """Run a prepared command in this process (for setup, not for measuring)."""
    answer = pipeline.submit(group_id, json.loads(payload),
                             Principal(f"agent:{agent.name}", agent.session_epoch))
    assert answer.status == 200, answer.body
    return answer.body


def start_steps(coordinator: Agent, worker: Agent, group_id: str, item: str) -> list:
    """The commands that take a new WorkItem to `active`: [(agent, type, command id, bytes)]."""
    expires = format_time(timezone.now() + timedelta(hours=1))
    steps: list[tuple[Agent, str, JsonObject, JsonObject]] = [
        (coordinator, "work.authorize", {"workItemId": item, "missionId": "m",
                                         "contract": contract()}, {}),
        (coordinator, "work.offer", {"candidates": [worker.name], "mode": "sequential",
                                     "expiresAt": expires}, {"workItemId": item}),
        (worker, "work.accept_offer", {"contractRevision": 1}, {"workItemId": item}),
        (worker, "work.start", {}, {"workItemId": item, "ownershipEpoch": 1}),
    ]
    return [(agent, type_, *agent.command(group_id, type_, body, **fields))
            for agent, type_, body, fields in steps]


def prepare(run: str, group_count: int, lifecycles: int, clients: int) -> dict:
    groups, coordinator, workers = cast(run, group_count, clients)
    expires = format_time(timezone.now() + timedelta(hours=1))
    plans: list[list[list[Step]]] = [[] for _ in range(clients)]
    for k in range(lifecycles):
        thread, group = k % clients, groups[k % group_count]
        worker, item = workers[thread], f"wi-{k}"
        steps = start_steps(coordinator, worker, group.id, item)
        lifecycle = [(type_, group.id, agent.token, payload)
                     for agent, type_, _id, payload in steps]
        lease = derive_id("lease", steps[-1][2])  # the id the server derives for work.start
        under_lease = {"workItemId": item, "ownershipEpoch": 1, "leaseId": lease}
        # The deliverable's bytes are stored now (a blob PUT is not a command); its signed
        # manifest, the submission citing it and the Coordinator's acceptance with Evidence
        # of its own (no review to wait for) are the lifecycle's last three commands.
        deliverable = deliverable_of(worker, group.id, item)
        for agent, type_, body, fields in (
                (worker, "artifact.publish", deliverable["manifest"], under_lease),
                (worker, "work.submit", {"contractRevision": 1,
                                         "artifacts": [deliverable["name"]],
                                         "evidence": [evidence_of(worker, deliverable, expires)]},
                 under_lease),
                (coordinator, "work.accept_result",
                 {"evidence": [evidence_of(coordinator, deliverable, expires, "review")]},
                 {"workItemId": item})):
            _id, payload = agent.command(group.id, type_, body, **fields)
            lifecycle.append((type_, group.id, agent.token, payload))
        plans[thread].append(lifecycle)
    return {"plans": plans, "groups": [g.id for g in groups]}


def deliverable_of(worker: Agent, group_id: str, item: str) -> dict:
    """The bytes of `item`'s deliverable, stored as a blob, and their signed manifest."""
    data = f"# {item}\n\nWritten by {worker.name} for the lifecycle benchmark.\n".encode()
    name = sha256_hex(data)
    blobs.put(blobs.parse_name(name), [data], f"agent:{worker.name}", timezone.now())
    manifest: JsonObject = {
        "hash": name, "mediaType": "text/markdown", "schema": None, "size": len(data),
        "producer": worker.name, "agentCardVersion": "1", "missionId": "m",
        "groupId": group_id, "workItemId": item, "sources": [],
        "versions": {"tool": "mw_bench", "model": None, "capability": "1"},
        "createdAt": format_time(timezone.now()), "classification": "internal",
        "uri": f"http://127.0.0.1/api/v1/blobs/{name}"}
    return {"name": name, "manifest": sign(manifest, worker.key, worker.key_id)}


def evidence_of(agent: Agent, deliverable: dict, at: str, key: str = "work") -> dict:
    return {"id": f"ev-{key}", "subject": "deliverable:out", "criteria": ["ok"],
            "method": "bench", "result": "pass", "producer": f"agent:{agent.name}",
            "timestamp": at, "artifacts": [deliverable["name"]]}


def run_http(port: int, plans: list, server_pid: int | None = None) -> dict:
    """The plans' commands from a keep-alive client each; with `server_pid`, the CPU the
    server and PostgreSQL spent per command too."""
    samples = defaultdict(list)
    failures = []

    def client(plan, ready):
        http = Client(port)
        ready()
        for lifecycle in plan:
            for type_, group_id, token, payload in lifecycle:
                started = time.perf_counter()
                status, answer = http.post(f"/api/v1/groups/{group_id}/commands", payload, token)
                samples[type_].append(time.perf_counter() - started)
                if status != 200:
                    failures.append(answer)
        http.close()

    meter = CpuMeter(server_pid).start() if server_pid else None
    elapsed = run_together(client, plans)
    commands = sum(len(v) for v in samples.values())
    every = [seconds for values in samples.values() for seconds in values]
    result = {"commands": commands, "seconds": round(elapsed, 3),
              "commandsPerSecond": round(commands / elapsed, 1), "failures": len(failures),
              "firstFailure": failures[0] if failures else None,
              "latency": latency_summary(samples),
              "latencyAll": {"p50Ms": percentile_ms(every, 0.5),
                             "p99Ms": percentile_ms(every, 0.99)}}
    if meter:
        result["cpuMsPerCommand"] = meter.stop(commands)
    return result


# What the server spends carrying a request that does no work: /healthz is answered by the
# first middleware (the server, the ASGI handler and the request log); the public
# /api/v1/authority goes through every middleware and DRF, with no database.
FLOOR_PATHS = ("/healthz", "/api/v1/authority")


def run_floor(port: int, server_pid: int, clients: int, requests: int) -> dict:
    """The server's CPU per request on each of FLOOR_PATHS, `requests` GETs from
    `clients` keep-alive clients: the share of a command's cost that is the HTTP stack's,
    not the command's."""
    floor = {}
    for path in FLOOR_PATHS:
        statuses: list[int] = []

        def client(_plan, ready, path=path, statuses=statuses):
            http = Client(port)
            ready()
            statuses.extend(http.get(path) for _ in range(requests // clients))
            http.close()

        meter = CpuMeter(server_pid).start()
        run_together(client, [None] * clients)
        cpu = meter.stop(len(statuses))
        assert set(statuses) == {200}, f"{path} answered {sorted(set(statuses))}"
        floor[path] = cpu["server"]
    return floor


def in_process_share(count: int, clients: int) -> int:
    """How many of `count` lifecycles (or leases) to run again in-process: a fifth, and
    one per client at least."""
    return max(count // 5, clients)


def run_in_process(plans: list) -> dict:
    """The plans' commands through `pipeline.submit` in this process, one at a time,
    authenticated as the API authenticates them (a command's bearer token from the
    session cache, checked again under the Group lock: apps/api/auth.py): the CPU a
    command costs the pipeline and PostgreSQL with no HTTP server, no client and no other
    command running beside it."""
    commands = [command for plan in plans for lifecycle in plan for command in lifecycle]
    failures = []
    with override_settings(DEBUG=False):  # as the servers run: no query log
        meter = CpuMeter().start()
        for _type, group_id, token, payload in commands:
            principal = principals.authenticate_bearer(token, timezone.now(), group_id,
                                                       cached=True)
            answer = pipeline.submit(group_id, json.loads(payload), principal)
            if answer.status != 200:
                failures.append(answer.body)
        cpu = meter.stop(len(commands))
    return {"commands": len(commands), "failures": len(failures),
            "firstFailure": failures[0] if failures else None,
            "cpuMsPerCommand": {"pipeline": cpu["client"], "postgres": cpu["postgres"]}}


def beside_the_pipeline_alone(raw: dict, api: dict, plans: list) -> dict:
    """`plans` run in-process (`inProcess`), and the ratio ceilings of the HTTP path and
    of the pipeline alone (`ceiling`), for a scenario's result."""
    alone = run_in_process(plans)
    return {"inProcess": alone,
            "ceiling": ceilings(raw["transactionsPerSecond"], http=api["cpuMsPerCommand"],
                                pipelineAlone=alone["cpuMsPerCommand"])}


def round_trips(trace: str) -> int:
    """Round trips in a libpq trace: each run of frontend messages the backend answers
    (as tests/integration/test_round_trips.py counts them)."""
    trips, last, sent = 0, None, False
    for line in trace.splitlines():
        fields = line.split("\t")
        if len(fields) < 4:
            continue
        direction = fields[1]
        if direction == "F" and last == "B":
            trips += 1
        sent = sent or direction == "F"
        last = direction
    return trips + 1 if sent and last is not None else trips


def count_round_trips(plans: list) -> dict:
    """The plans' commands through `pipeline.submit` in this process, one at a time, each
    with its bearer token checked as the API checks it (from the session cache after the
    sender's first command, as tests/integration/test_round_trips.py counts), with
    libpq's trace on: {command type: PostgreSQL round trips per command (the median over
    its runs)}. The HTTP path has no other query; a round trip is one send and its
    answer, however many statements it pipelines."""
    counted: dict[str, list[int]] = defaultdict(list)
    django_connection.ensure_connection()
    raw = django_connection.connection
    with override_settings(DEBUG=False):
        for plan in plans:
            for lifecycle in plan:
                for type_, group_id, token, payload in lifecycle:
                    with tempfile.TemporaryFile("w+") as trace:  # a fresh file each
                        raw.pgconn.trace(trace.fileno())
                        try:
                            principal = principals.authenticate_bearer(
                                token, timezone.now(), group_id, cached=True)
                            answer = pipeline.submit(group_id, json.loads(payload), principal)
                        finally:
                            raw.pgconn.untrace()
                        assert answer.status == 200, answer.body
                        trace.seek(0)
                        counted[type_].append(round_trips(trace.read()))
    return {type_: sorted(n)[len(n) // 2] for type_, n in sorted(counted.items())}


def run_one_at_a_time(port: int, plans: list) -> dict:
    """The plans' commands over HTTP from one client, one after the other: the latency of
    a command alone (no other command queued beside it)."""
    return run_http(port, [[lifecycle for plan in plans for lifecycle in plan]])


def ratios(api: dict, raw: dict, alone: dict, raw_alone: dict, trips: dict) -> dict:
    """The figures a script reads (docs/performance.md, "Running the benchmarks"), each as
    a ratio to the raw transaction measured in the same run."""
    raw_cpu = sum(raw["cpuMsPerTransaction"].values())
    cpu = api.get("cpuMsPerCommand", {})
    raw_latency = raw_alone["latency"]
    floor = api.get("serverCpuMsPerRequestDoingNothing", {})
    return {
        "cpuRatio": round(sum(cpu.values()) / raw_cpu, 2) if raw_cpu else None,
        "serverCpuRatio": round(cpu.get("server", 0.0) / raw_cpu, 2) if raw_cpu else None,
        # The same ratio for a request that does nothing: below it no command can go
        # on this HTTP stack.
        "floorCpuRatio": {path: round(ms / raw_cpu, 2) for path, ms in floor.items()}
        if raw_cpu else None,
        "roundTrips": trips,
        "latencyRatio": {
            "p50": round(alone["latencyAll"]["p50Ms"] / raw_latency["p50Ms"], 2),
            "p99": round(alone["latencyAll"]["p99Ms"] / raw_latency["p99Ms"], 2),
            "byCommand": {t: {"p50": round(s["p50Ms"] / raw_latency["p50Ms"], 2),
                              "p99": round(s["p99Ms"] / raw_latency["p99Ms"], 2)}
                          for t, s in alone["latency"].items()},
            "commandMs": alone["latencyAll"], "rawMs": raw_latency},
    }


def raw_schema(schema: str) -> str:
    """The raw baseline's tables, in `schema`: a Group head, its events, one projection."""
    return f"""
CREATE SCHEMA IF NOT EXISTS {schema};
DROP TABLE IF EXISTS {schema}.event, {schema}.item, {schema}.grp;
CREATE TABLE {schema}.grp (id text PRIMARY KEY, head_sequence bigint NOT NULL,
                           head_hash text NOT NULL);
CREATE TABLE {schema}.event (id bigserial PRIMARY KEY, group_id text NOT NULL,
    sequence bigint NOT NULL, type text NOT NULL, data jsonb NOT NULL, hash text NOT NULL,
    UNIQUE (group_id, sequence));
CREATE TABLE {schema}.item (group_id text NOT NULL, item_id text NOT NULL,
    state text NOT NULL, doc jsonb NOT NULL, PRIMARY KEY (group_id, item_id));
"""


def run_raw(plans: list, group_ids: list) -> dict:
    """The raw command transaction with psycopg: lock the Group row, insert the event,
    update the head and one projection row, commit — for the same commands."""
    dsn = database_url()
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(raw_schema("mw_bench_raw"))
        with connection.cursor() as cursor:
            cursor.executemany("INSERT INTO mw_bench_raw.grp VALUES (%s, 0, '')",
                               [(g,) for g in group_ids])
    document = json.dumps(contract())
    counts: list[int] = []
    samples: list[float] = []  # each transaction's seconds, commit included

    def client(work, ready):
        plan, connection = work
        done = 0
        ready()
        for k, lifecycle in enumerate(plan):
            for type_, group_id, _token, payload in lifecycle:
                started = time.perf_counter()
                with connection.transaction():
                    head = connection.execute(
                        "SELECT head_sequence FROM mw_bench_raw.grp WHERE id = %s "
                        "FOR UPDATE", (group_id,)).fetchone()[0] + 1
                    connection.execute(
                        "INSERT INTO mw_bench_raw.event (group_id, sequence, type, data, hash)"
                        " VALUES (%s, %s, %s, %s, %s)",
                        (group_id, head, type_, payload.decode(), "sha256:x"))
                    connection.execute(
                        "UPDATE mw_bench_raw.grp SET head_sequence = %s, head_hash = %s "
                        "WHERE id = %s", (head, "sha256:x", group_id))
                    connection.execute(
                        "INSERT INTO mw_bench_raw.item VALUES (%s, %s, %s, %s) "
                        "ON CONFLICT (group_id, item_id) DO UPDATE "
                        "SET state = excluded.state, doc = excluded.doc",
                        (group_id, f"{id(plan)}-{k}", type_, document))
                samples.append(time.perf_counter() - started)
                done += 1
        counts.append(done)

    # Connected before the meter starts and closed after it stops: a backend that exits
    # takes its CPU with it.
    connections = [psycopg.connect(dsn) for _ in plans]
    try:
        meter = CpuMeter().start()
        elapsed = run_together(client, list(zip(plans, connections)))
        cpu = meter.stop(sum(counts))
    finally:
        for connection in connections:
            connection.close()
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("DROP SCHEMA mw_bench_raw CASCADE")
    return {"transactions": sum(counts), "seconds": round(elapsed, 3),
            "transactionsPerSecond": round(sum(counts) / elapsed, 1),
            "cpuMsPerTransaction": cpu,
            "latency": {"p50Ms": percentile_ms(samples, 0.5),
                        "p99Ms": percentile_ms(samples, 0.99)}}


def scenario(name: str, groups: int, lifecycles: int, clients: int, workers: int,
             report, http_servers=("daphne",)) -> dict:
    """The lifecycles through each of `http_servers` in turn (fresh ones for each: a
    command is answered once), beside one raw SQL baseline."""
    run = uuid.uuid4().hex[:8]
    report(f"[{name}] preparing {lifecycles} lifecycles over {groups} Group(s)...")
    prepared = prepare(run, groups, lifecycles, clients)
    report(f"[{name}] raw SQL baseline, {clients} clients...")
    raw = run_raw(prepared["plans"], prepared["groups"])
    # One command at a time, for latencyRatio: a tenth of the lifecycles (at least 20)
    # from one client, beside the raw transaction from one client on the same commands.
    # In one Group of their own: alone, the Group count changes nothing, and making
    # 1,000 more Groups would cost minutes.
    single = prepare(f"{run}1", 1, max(lifecycles // 10, 20), 1)
    report(f"[{name}] raw SQL baseline, one transaction at a time...")
    raw_alone = run_raw(single["plans"], single["groups"])
    servers, one_at_a_time = {}, {}
    for index, http_server in enumerate(http_servers):
        if index:
            prepared = prepare(f"{run}{index}", groups, lifecycles, clients)
        report(f"[{name}] HTTP through {http_server} × {workers}, {clients} clients...")
        process = start_server(free_port(), workers, http_server=http_server)
        try:
            servers[http_server] = run_http(process.port, prepared["plans"], process.pid)
            servers[http_server]["groupCommit"] = group_commit_batches(process.port)
            # At least 1,000 requests: the kernel counts CPU in hundredths of a second.
            servers[http_server]["serverCpuMsPerRequestDoingNothing"] = run_floor(
                process.port, process.pid, clients,
                max(servers[http_server]["commands"], 1000))
            if not index:
                report(f"[{name}] HTTP, one command at a time...")
                one_at_a_time = run_one_at_a_time(process.port, single["plans"])
        finally:
            stop_server(process)
    api = servers[http_servers[0]]
    report(f"[{name}] the pipeline alone, in this process...")
    alone = beside_the_pipeline_alone(raw, api, prepare(
        f"{run}p", groups, in_process_share(lifecycles, clients), clients)["plans"])
    report(f"[{name}] PostgreSQL round trips per command (libpq trace)...")
    trips = count_round_trips(prepare(f"{run}t", 1, 3, 1)["plans"])
    ratio = api["commandsPerSecond"] / raw["transactionsPerSecond"]
    result = {"scenario": name, "groups": groups, "clients": clients, "webWorkers": workers,
              "httpServer": http_servers[0], "api": api, "raw": raw, "ratio": round(ratio, 3),
              **alone, "oneAtATime": {"api": one_at_a_time, "raw": raw_alone},
              **ratios(api, raw, one_at_a_time, raw_alone, trips)}
    if len(servers) > 1:
        result["httpServers"] = {
            s: {"commandsPerSecond": a["commandsPerSecond"], "failures": a["failures"],
                "overFirst": round(a["commandsPerSecond"] / api["commandsPerSecond"], 2),
                "p99Ms": max(v["p99Ms"] for v in a["latency"].values())}
            for s, a in servers.items()}
    return result
