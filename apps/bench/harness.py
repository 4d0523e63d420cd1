"""Shared benchmark plumbing: a real server in subprocesses (the live-server tests
start theirs here too), HTTP clients on keep-alive connections, latency statistics."""

import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import psycopg
from django.conf import settings
from prometheus_client.parser import text_string_to_metric_families

from mission_weave.stack.services import free_port  # the tests' and the bench's too

ROOT = Path(__file__).resolve().parents[2]


def database_url_of(settings_dict: dict) -> str:
    """DATABASE_URL for a subprocess on the database of Django's `settings_dict` (which,
    under pytest, names the test database)."""
    user = settings_dict.get("USER") or "postgres"
    password = f":{settings_dict['PASSWORD']}" if settings_dict.get("PASSWORD") else ""
    host = settings_dict.get("HOST") or "127.0.0.1"
    port = settings_dict.get("PORT") or 5432
    return f"postgres://{user}{password}@{host}:{port}/{settings_dict['NAME']}"


def database_url() -> str:
    """database_url_of() Django's default database: for psycopg connections of our own."""
    return database_url_of(settings.DATABASES["default"])


APP = "mission_weave.asgi:application"
# The ASGI servers the HTTP API can be measured under (mw_bench --http-servers): daphne
# as `make run` serves it, and, for comparison, uvicorn (httptools, uvloop) and granian,
# from the `bench` extra (pip install -e '.[bench]').
HTTP_SERVERS = {
    "daphne": lambda port, workers: ["mission_weave.runtime.serve", "--workers", str(workers),
                                     "--port", str(port)],
    "uvicorn": lambda port, workers: ["uvicorn", "--port", str(port), "--workers",
                                      str(workers), "--loop", "uvloop", "--http", "httptools",
                                      "--no-access-log", "--log-level", "warning", APP],
    "granian": lambda port, workers: ["granian", "--interface", "asgi", "--port", str(port),
                                      "--workers", str(workers), "--loop", "uvloop",
                                      "--log-level", "warning", APP],
}


def celery_worker_command(*args: str) -> list:
    """A Celery worker with one pool process, warnings only, without gossip and mingle
    (nothing to share between the few workers of one run, and they slow its start)."""
    return [sys.executable, "-m", "celery", "-A", "mission_weave.celery", "worker",
            "-l", "warning", "--concurrency", "1", "--without-gossip", "--without-mingle",
            *args]


class ServerProcess(subprocess.Popen[bytes]):
    """A server that start_server started: its stderr (`log`, a temporary file), its
    `port`, and the metrics folder it made for it (None when the caller gave `env`)."""

    log: IO[bytes]
    port: int
    metrics: str | None


def start_server(port: int, workers: int = 1, env: dict | None = None,
                 http_server: str = "daphne", tree: Path = ROOT) -> ServerProcess:
    """`python -m mission_weave.runtime.serve` (or another of HTTP_SERVERS) on `port`, run
    from `tree` (a checkout of this repository), returned once GET /api/v1/authority
    answers. `env` defaults to this process's environment with DEBUG off and a metrics
    folder of the server's own."""
    metrics = None
    if env is None:
        # Metric files of its own: its /metrics counts its commands, not those of another
        # server on this host (`make run`'s, a test's).
        metrics = tempfile.mkdtemp(prefix="mw-bench-metrics-")
        env = {**os.environ, "DEBUG": "0", "SECRET_KEY": "bench" * 10,
               "MW_METRICS_DIR": metrics}
    # Its log goes to a file, not a pipe: a pipe nobody reads fills up and stalls the
    # server once it logs a line per request (MW_REQUEST_LOG).
    log = tempfile.TemporaryFile()  # noqa: SIM115 (closed with the server process)
    process = ServerProcess(
        [sys.executable, "-m", *HTTP_SERVERS[http_server](port, workers)], cwd=tree, env=env,
        stdout=subprocess.DEVNULL, stderr=log)
    process.log, process.port, process.metrics = log, port, metrics
    deadline = time.monotonic() + 60
    while True:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        try:
            connection.request("GET", "/api/v1/authority")
            if connection.getresponse().status == 200:
                return process
        except OSError:
            pass
        finally:
            connection.close()
        if process.poll() is not None or time.monotonic() > deadline:
            stop_server(process)
            log.seek(0)
            raise RuntimeError(f"the server ({tree}, {http_server}) did not start: "
                               + log.read().decode(errors="replace")[-3000:])
        time.sleep(0.2)


# --- CPU: what each side spends, beside the rates ----------------------------------------

TICKS = os.sysconf("SC_CLK_TCK")


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants (a server's parent and its daphne children)."""
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        try:
            with open(f"/proc/{current}/task/{current}/children") as children:
                pending += [int(child) for child in children.read().split()]
        except OSError:
            pass
    return found


def postgres_backends(database: str) -> list[int]:
    """The PostgreSQL server processes serving `database` (their titles name it), when
    the server runs on this machine; [] otherwise."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as cmdline:
                title = cmdline.read().decode(errors="replace")
        except OSError:
            continue
        if title.startswith("postgres: ") and f" {database} " in title:
            found.append(int(entry.name))
    return found


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of `pid` so far (0 once it has exited)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


class CpuMeter:
    """CPU spent between `start()` and `stop()` by this process (the clients), by a
    server's process tree if it has one, and by the PostgreSQL backends of this database,
    in milliseconds per operation: where an operation's cost goes, beside its rate. A
    backend that exits in between takes its share with it (the pools keep theirs)."""

    def __init__(self, server_pid: int | None = None):
        self.server_pid = server_pid
        self.database = settings.DATABASES["default"]["NAME"]

    @staticmethod
    def _server(server_pid: int) -> float:
        return sum(cpu_seconds(pid) for pid in process_tree(server_pid))

    def start(self) -> "CpuMeter":
        self.client = time.process_time()
        self.server = self._server(self.server_pid) if self.server_pid else 0.0
        self.backends = {pid: cpu_seconds(pid) for pid in postgres_backends(self.database)}
        return self

    def stop(self, operations: int) -> dict:
        spent = {"client": time.process_time() - self.client}
        if self.server_pid:
            spent["server"] = self._server(self.server_pid) - self.server
        spent["postgres"] = sum(cpu_seconds(pid) - self.backends.get(pid, 0.0)
                                for pid in postgres_backends(self.database))
        per = 1000 / max(operations, 1)
        return {part: round(seconds * per, 2) for part, seconds in spent.items()}


def ceilings(raw_per_second: float, **cpu_ms: dict) -> dict:
    """For each path's CPU per operation (every part of it: clients, server, PostgreSQL),
    the highest ratio to the raw rate it allows on this machine, with all its cores busy
    and nothing else running: a rate cannot pass cores / CPU seconds per operation."""
    cores = len(os.sched_getaffinity(0))

    def ceiling(spent: dict) -> float:
        total = sum(spent.values())
        if not total or not raw_per_second:
            return 0.0
        return round(cores * 1000 / total / raw_per_second, 3)

    return {"cores": cores, **{path: ceiling(spent) for path, spent in cpu_ms.items()}}


def group_commit_batches(port: int) -> dict | None:
    """How group commit joined the server's commands since it started, from its /metrics:
    {"batches": N, "meanSize": M}; None if it formed no batch (MW_GROUP_COMMIT=0)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
    finally:
        connection.close()
    for family in text_string_to_metric_families(text):
        if family.name == "mw_group_commit_batch_size":
            totals = {sample.name: sample.value for sample in family.samples
                      if sample.name.endswith(("_sum", "_count"))}
            count = totals.get(family.name + "_count", 0)
            if count:
                return {"batches": int(count),
                        "meanSize": round(totals[family.name + "_sum"] / count, 2)}
    return None


def stop_server(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    metrics = getattr(process, "metrics", None)  # start_server's own folder, if it made one
    if metrics:
        shutil.rmtree(metrics, ignore_errors=True)


@contextmanager
def server(workers: int = 1, port: int | None = None, env: dict | None = None,
           http_server: str = "daphne"):
    """A running server (see start_server) for the `with` block; yields its port
    (default: a free one)."""
    port = port or free_port()
    process = start_server(port, workers, env, http_server)
    try:
        yield port
    finally:
        stop_server(process)


class Client:
    """One keep-alive HTTP/1.1 connection."""

    def __init__(self, port: int, token: str | None = None):
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.connection.connect()
        # http.client sends headers and body in two writes; without NODELAY, Nagle
        # and the server's delayed ACK add ~40 ms to every POST.
        self.connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.headers = {"Content-Type": "application/json"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"

    def post(self, path: str, body: bytes, token: str | None = None) -> tuple[int, dict]:
        headers = dict(self.headers)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.connection.request("POST", path, body, headers)
        response = self.connection.getresponse()
        return response.status, json.loads(response.read())

    def get(self, path: str) -> int:
        self.connection.request("GET", path, headers=self.headers)
        response = self.connection.getresponse()
        response.read()
        return response.status

    def close(self):
        self.connection.close()


def run_together(client, plans: list) -> float:
    """Run `client(plan, ready)` for each plan on its own thread; each calls `ready()`
    once set up. Returns the seconds from the moment all are ready until all are done."""
    barrier = threading.Barrier(len(plans) + 1)
    threads = [threading.Thread(target=client, args=(plan, barrier.wait)) for plan in plans]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def percentile(values: list, fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def one_value(cursor: psycopg.Cursor[Any]) -> Any:
    """The first column of the row a query answers, for the bench's own queries of a row
    they made themselves (none is an error, as indexing None would have been)."""
    row = cursor.fetchone()
    if row is None:
        raise RuntimeError("the query found no row")
    return row[0]


def percentile_ms(values: list, fraction: float) -> float:
    """percentile() of seconds, in milliseconds to two places."""
    return round(percentile(values, fraction) * 1000, 2)


def latency_summary(samples: dict) -> dict:
    """{name: [seconds]} -> {name: {n, p50Ms, p99Ms}}"""
    return {name: {"n": len(values), "p50Ms": percentile_ms(values, 0.5),
                   "p99Ms": percentile_ms(values, 0.99)}
            for name, values in sorted(samples.items())}
