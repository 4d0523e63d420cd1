"""The embedded try-out as a new user meets it: `make run`'s stack (python -m
mission_weave.stack run) with DATABASE_URL and REDIS_URL unset, on free ports in a data
folder of its own, driven from outside like a person at a terminal."""

import html
import http.cookiejar
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from mission_weave.stack.services import free_port

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
DEMO_SECONDS = 240


def bare_env(data: Path, **more) -> dict:
    """This machine's environment as a fresh shell has it: no services configured."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")}
    return {**env, "MW_DATA_DIR": str(data), **more}


@contextmanager
def stack(data: Path):
    """The stack running in the foreground; yields (process, its output so far)."""
    output = []
    process = subprocess.Popen(
        [sys.executable, "-m", "mission_weave.stack", "run"], cwd=ROOT,
        env=bare_env(data, PORT=str(free_port())), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True)
    reader = threading.Thread(target=lambda: output.extend(process.stdout), daemon=True)
    reader.start()
    try:
        yield process, output
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in the terminal sends
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            raise
        reader.join(10)


def demo_states(data: Path) -> dict:
    """{work item id: state} of the demo Mission, read from the stack's own database."""
    services = data / "services.json"
    if not services.exists():
        return {}
    try:
        with psycopg.connect(json.loads(services.read_text())["DATABASE_URL"],
                             connect_timeout=2) as connection:
            return dict(connection.execute(
                "SELECT work_item_id, state FROM work_workitem "
                "WHERE group_id = 'grp_demo' AND mission_id = 'demo-mission'").fetchall())
    except psycopg.Error:
        return {}  # not migrated yet


def wait_until_verified(data: Path, process, output) -> None:
    deadline = time.monotonic() + DEMO_SECONDS
    states = {}
    while time.monotonic() < deadline and process.poll() is None:
        states = demo_states(data)
        if len(states) == 4 and set(states.values()) == {"verified"}:
            return
        time.sleep(1)
    pytest.fail(f"the demo Mission did not reach verified: {states}\n{''.join(output)[-4000:]}")


def manage(data: Path, *args) -> subprocess.CompletedProcess:
    """`python manage.py ...` beside the running stack, with no environment of its own."""
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=bare_env(data),
                          capture_output=True, text=True, timeout=120)


def signed_in(base: str, username: str, password: str):
    """An HTTP client with `username`'s session, signed in through the login form as a
    browser is (its CSRF cookie and token)."""
    client = urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    form = client.open(f"{base}/login/", timeout=10).read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form).group(1)
    landed = client.open(f"{base}/login/", urllib.parse.urlencode({
        "username": username, "password": password,
        "csrfmiddlewaretoken": token}).encode(), timeout=10)
    assert urllib.parse.urlsplit(landed.url).path == "/", landed.url
    return client


def demo_mail(base: str, output: list) -> str:
    """The caught mail of the demo owner's final Approval (one) on /mail/, read by the
    operator the banner names (admin / admin). The notice follows the commit that made the
    Mission ready within seconds, or beat's catch-up (30 s) if its hint was lost."""
    admin = signed_in(base, "admin", "admin")
    deadline = time.monotonic() + 60
    while True:
        page = admin.open(f"{base}/mail/", timeout=10).read().decode()
        mails = [m for m in page.split('<article class="caught-mail"')[1:]
                 if "To owner@example.com" in html.unescape(m)]
        if any("Final Approval:" in m for m in mails) or time.monotonic() > deadline:
            break
        time.sleep(1)
    approvals = [m for m in mails if "Final Approval:" in m]
    assert len(approvals) == 1, (f"not one final Approval to owner@example.com on /mail/:"
                                 f"\n{page[-3000:]}\n{''.join(output)[-2000:]}")
    assert "user:owner &lt;owner@example.com&gt;</td>" in page  # the outbox's row
    return approvals[0]


def assert_healthy(output: list) -> None:
    text = "".join(output)
    assert "Traceback" not in text, text[-4000:]
    assert "Internal Server Error" not in text, text[-4000:]  # django.request logs each 5xx


def test_make_run_brings_the_demo_to_verified_again_and_again(tmp_path):
    data = tmp_path / "mw"

    with stack(data) as (process, output):
        wait_until_verified(data, process, output)
        verified = manage(data, "mw_verify", "grp_demo")
        assert verified.returncode == 0, verified.stderr
        assert_healthy(output)
        banner = "".join(output)
        assert "owner / owner" in banner and "coordinator / coordinator" in banner
        # The demo's mail is caught (no EMAIL_HOST) and the operator reads it on /mail/,
        # its link to the decision under the address the stack serves at.
        base = re.search(r"MissionWeave is running: (http://\S+)/", banner).group(1)
        assert f"{base}/mail/ as admin" in banner
        approval = demo_mail(base, output)
        assert (f'href="{base}/g/grp_demo/missions/demo-mission/#final-approval"'
                in approval), approval
    assert process.returncode == 0
    assert output[-1].strip() == "mw: stopped"
    assert not (data / "services.json").exists()

    # The same data again: the demo is as it was, and the agents work on.
    with stack(data) as (process, output):
        wait_until_verified(data, process, output)
        time.sleep(3)  # the agents have reconnected and replayed their cursors
        assert process.poll() is None
        assert manage(data, "mw_verify", "grp_demo").returncode == 0
    assert process.returncode == 0
    assert_healthy(output)

    # The database reset, the agents' keys and cursors kept: they start over from the log.
    subprocess.run(["rm", "-rf", str(data / "postgres")], check=True)
    with stack(data) as (process, output):
        wait_until_verified(data, process, output)
        assert manage(data, "mw_verify", "grp_demo").returncode == 0
    assert process.returncode == 0
    assert_healthy(output)


def test_a_second_stack_on_the_same_data_is_refused(tmp_path):
    data = tmp_path / "mw"
    with stack(data) as (first, _output):
        deadline = time.monotonic() + 60
        while not (data / "services.json").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        second = subprocess.run([sys.executable, "-m", "mission_weave.stack", "run"], cwd=ROOT,
                                env=bare_env(data, PORT=str(free_port())),
                                capture_output=True, text=True, timeout=60)
        assert second.returncode == 1
        assert "another `make run` is using" in second.stderr
        assert first.poll() is None


def test_a_port_another_program_holds_is_said_before_anything_starts(tmp_path):
    data = tmp_path / "mw"
    port = free_port()
    with socket.create_server(("127.0.0.1", port)):
        ran = subprocess.run([sys.executable, "-m", "mission_weave.stack", "run"], cwd=ROOT,
                             env=bare_env(data, PORT=str(port)), capture_output=True,
                             text=True, timeout=60)

    assert ran.returncode == 1 and "Traceback" not in ran.stderr
    assert f"mw: cannot listen on 127.0.0.1:{port}: Address already in use" in ran.stderr
    assert f"PORT={port + 1} make run" in ran.stderr
    assert not (data / "postgres").exists()  # nothing was started


def test_make_test_falls_back_to_private_services(tmp_path):
    """On a machine with no PostgreSQL or Redis, scripts/services.sh starts private ones
    from the wheels, and the suite runs on them."""
    services_dir = tmp_path / "services"
    env = bare_env(tmp_path / "mw", MW_SERVICES="private",
                   MW_TEST_SERVICES_DIR=str(services_dir), PYTHON=sys.executable)
    try:
        exported = subprocess.run(["scripts/services.sh"], cwd=ROOT, env=env,
                                  capture_output=True, text=True, timeout=120, check=True)
        line = exported.stdout.strip().splitlines()[-1]
        assert line.startswith("export ")
        urls = dict(pair.split("=", 1) for pair in line.removeprefix("export ").split())
        assert urls["DATABASE_URL"].startswith("postgres://postgres@127.0.0.1:")
        assert urls["DATABASE_URL"] != "postgres://postgres@127.0.0.1:5432/missionweave"
        assert urls["REDIS_URL"].startswith("redis://127.0.0.1:")

        # A --basetemp of its own: a pytest run rotates the shared ones, which would take
        # this test's folders (and the private servers' data) away underneath it.
        suite = subprocess.run(
            [sys.executable, "-m", "pytest", "tests/test_smoke.py",
             "tests/integration/test_snapshots_ws.py", "-p", "no:cacheprovider",
             "--basetemp", str(tmp_path / "inner")],
            cwd=ROOT, env={**env, **urls}, capture_output=True, text=True, timeout=300)
        assert suite.returncode == 0, suite.stdout[-3000:] + suite.stderr[-3000:]
        assert "2 passed" in suite.stdout

        again = subprocess.run(["scripts/services.sh"], cwd=ROOT, env=env,
                               capture_output=True, text=True, timeout=120, check=True)
        assert again.stdout.strip().splitlines()[-1] == line  # reused, not started twice
    finally:
        subprocess.run([sys.executable, "-m", "mission_weave.stack", "--data-dir",
                        str(services_dir), "stop"], cwd=ROOT, env=env, timeout=60)


def test_make_reset_asks_before_it_deletes_the_data(tmp_path):
    data = tmp_path / "mw"
    (data / "agents").mkdir(parents=True)
    (data / "agents" / "worker-1.json").write_text("{}")
    reset = [sys.executable, "-m", "mission_weave.stack", "--data-dir", str(data), "reset"]

    kept = subprocess.run(reset, cwd=ROOT, input="n\n", capture_output=True, text=True,
                          timeout=60)
    assert kept.returncode == 1 and "nothing deleted" in kept.stdout
    assert (data / "agents" / "worker-1.json").exists()

    deleted = subprocess.run(reset, cwd=ROOT, input="y\n", capture_output=True, text=True,
                             timeout=60)
    assert deleted.returncode == 0, deleted.stderr
    assert not data.exists()
