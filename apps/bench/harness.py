"""Shared benchmark plumbing: a real server in subprocesses, HTTP clients on
keep-alive connections, latency statistics."""

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def server(workers: int, port: int | None = None):
    """daphne × `workers` on `port` (default: a free one), with this process's environment."""
    port = port or free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "mission_weave.serve", "--workers", str(workers),
         "--port", str(port)], env={**os.environ, "DEBUG": "0", "SECRET_KEY": "bench" * 10},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                connection.request("GET", "/api/v1/authority")
                if connection.getresponse().status == 200:
                    break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the server did not start: "
                                   + process.stderr.read().decode()[-2000:])
            time.sleep(0.2)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=30)


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
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def latency_summary(samples: dict) -> dict:
    """{name: [seconds]} -> {name: {n, p50Ms, p99Ms}}"""
    return {name: {"n": len(values), "p50Ms": round(percentile(values, 0.5) * 1000, 2),
                   "p99Ms": round(percentile(values, 0.99) * 1000, 2)}
            for name, values in sorted(samples.items())}
