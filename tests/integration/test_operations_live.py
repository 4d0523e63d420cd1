"""The operations endpoints on real servers (`mission_weave.runtime.serve`): servers sharing one
metrics folder, as one host's web processes do, each scrape summing all of them; the
probes over the socket with a pod's address; the production settings' JSON lines."""

import asyncio
import http.client
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from apps.bench.harness import free_port, server, start_server, stop_server
from tests.integration.wslive import server_env, ws
from tests.support import Scenario

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "live-scrape-token-2b7c"
ACCEPTED = ("mw_commands_total", frozenset({"type": "mission.create", "code": "OK"}.items()))
CONNECTIONS = ("mw_websocket_connections", frozenset())


def request(port: int, method: str, path: str, body: bytes | None = None,
            headers: dict | None = None) -> tuple:
    """(status, headers (any case), body)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request(method, path, body, headers or {})
        response = connection.getresponse()
        return response.status, response.headers, response.read()
    finally:
        connection.close()


def scrape(port: int) -> dict:
    """GET /metrics as a scraper in the cluster: the token, the pod's address as Host."""
    status, _, body = request(port, "GET", "/metrics", headers={
        "Authorization": f"Bearer {TOKEN}", "Host": "10.1.2.3:8000"})
    assert status == 200, body[:300]
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(body.decode())
            for sample in family.samples}


def create_missions(s: Scenario, port: int, count: int) -> None:
    for k in range(count):
        envelope = s.c.envelope("mission.create", {"title": f"m{k}", "ownerId": s.owner.principal,
                                                   "coordinatorId": s.c.principal})
        status, _, body = request(port, "POST", f"/api/v1/groups/{s.world.group.id}/commands",
                                  json.dumps(envelope).encode(), {
                                      "Content-Type": "application/json",
                                      "Authorization": f"Bearer {s.c.token}"})
        assert status == 200, body


def eventually(check, seconds: float = 5) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.05)


@pytest.fixture
def env(tmp_path) -> dict:
    """Servers on the test database whose metric files go to one folder of this test."""
    return {**server_env(), "MW_METRICS_DIR": str(tmp_path / "metrics"),
            "MW_METRICS_TOKEN": TOKEN}


def test_a_scrape_of_any_process_sums_the_host_and_a_dead_ones_files_go_at_the_next_start(
        env, tmp_path):
    s = Scenario()
    first_port, second_port = free_port(), free_port()
    first = start_server(first_port, 1, env)
    second = start_server(second_port, 2, env)  # two processes on one socket
    try:
        create_missions(s, first_port, 3)
        create_missions(s, second_port, 2)
        for port in (first_port, second_port, second_port, second_port):
            assert scrape(port)[ACCEPTED] == 5
        assert len({path.name.rpartition("_")[2]
                    for path in (tmp_path / "metrics").glob("counter_*.db")}) >= 2

        async def connected():
            async with ws(first_port, s.w1.token):
                for port in (first_port, second_port):
                    assert (await asyncio.to_thread(scrape, port))[CONNECTIONS] == 1
        asyncio.run(connected())
        eventually(lambda: scrape(second_port)[CONNECTIONS] == 0)

        stop_server(first)
        assert scrape(second_port)[ACCEPTED] == 5  # kept until a process starts
        with server(env=env) as third_port:
            # It removed the files of the first server's process, which is gone.
            assert scrape(third_port)[ACCEPTED] == 2
            assert scrape(second_port)[ACCEPTED] == 2
    finally:
        stop_server(first)
        stop_server(second)


def test_the_probes_answer_a_pod_address_that_other_pages_refuse(env):
    with server(env=env) as port:
        pod = {"Host": "10.1.2.3:8000"}  # not in ALLOWED_HOSTS
        assert request(port, "GET", "/healthz", headers=pod)[:1] == (200,)
        status, headers, body = request(port, "GET", "/readyz", headers=pod)
        assert (status, json.loads(body)) == (200, {"status": "ready", "checks": {
            "postgres": "ok", "redis": "ok", "migrations": "ok"}})
        assert len(headers["X-Request-ID"]) == 32
        assert request(port, "GET", "/api/v1/authority", headers=pod)[0] == 400


def test_the_production_settings_write_a_json_line_per_request(env, tmp_path):
    production = {**env, "DJANGO_SETTINGS_MODULE": "mission_weave.settings_production",
                  "MW_AUTHORITY_KEY": "A" * 43}
    port, log = free_port(), tmp_path / "server.log"
    with open(log, "wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "mission_weave.runtime.serve", "--port", str(port)], cwd=ROOT,
            env=production, stdout=output, stderr=subprocess.STDOUT)
        try:
            eventually(lambda: answers(port), seconds=60)
            status, headers, _ = request(port, "GET", "/readyz?probe=q-secret-81",
                                         headers={"X-Request-ID": "probe-81"})
            assert status == 200 and headers["X-Request-ID"] == "probe-81"
        finally:
            stop_server(process)
    written = log.read_text()
    lines = [json.loads(line) for line in written.splitlines()]  # every line is JSON
    probe = [line for line in lines if line.get("requestId") == "probe-81"]
    assert len(probe) == 1, lines
    assert {k: probe[0][k] for k in ("logger", "method", "path", "status")} == {
        "logger": "mw.http", "method": "GET", "path": "/readyz", "status": 200}
    assert "q-secret-81" not in written


def answers(port: int) -> bool:
    try:
        return request(port, "GET", "/healthz")[0] == 200
    except OSError:
        return False
