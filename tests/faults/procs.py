"""The processes a fault test starts, and how it stops them: always by pid. Each runs in
a session of its own, so that a signal to its process group reaches its children too (a
Celery worker's pool process, the daphne children of mission_weave.runtime.serve), and writes
to a log file (a pipe nobody reads would fill up and stall a process that logs a lot,
as a server does while its database is down)."""

import contextlib
import http.client
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from apps.bench.harness import ROOT, celery_worker_command


def spawn(args: list, env: dict, log: Path, cwd=ROOT) -> subprocess.Popen:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        return subprocess.Popen(args, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def signal_group(process: subprocess.Popen, sig: int) -> None:
    """`sig` to the process and its children (its process group is its pid)."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)


def stop(process: subprocess.Popen, seconds: float = 20) -> None:
    signal_group(process, signal.SIGCONT)  # a paused process cannot act on SIGTERM
    signal_group(process, signal.SIGTERM)
    try:
        process.wait(seconds)
    except subprocess.TimeoutExpired:
        signal_group(process, signal.SIGKILL)
        process.wait()
    # Children that outlived their parent (a pool process) are still in the group.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def tail(log: Path, size: int = 3000) -> str:
    return log.read_text(errors="replace")[-size:] if log.exists() else "(no log)"


def answering(port: int, process: subprocess.Popen, log: Path, seconds: float = 60) -> None:
    """Until GET /api/v1/authority answers 200 on `port`; fails with the log's end if the
    process exits or the time runs out."""
    deadline = time.monotonic() + seconds
    while True:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        try:
            connection.request("GET", "/api/v1/authority")
            if connection.getresponse().status == 200:
                return
        except OSError:
            pass
        finally:
            connection.close()
        if process.poll() is not None or time.monotonic() > deadline:
            stop(process)
            raise AssertionError(f"the server on {port} did not start:\n{tail(log)}")
        time.sleep(0.2)


def web(port: int, env: dict, log: Path, workers: int = 1) -> subprocess.Popen:
    """`python -m mission_weave.runtime.serve --port P`, once it answers."""
    process = spawn([sys.executable, "-m", "mission_weave.runtime.serve", "--port", str(port),
                     "--workers", str(workers)], env, log)
    answering(port, process, log)
    return process


def celery(env: dict, log: Path, *args: str) -> subprocess.Popen:
    """A Celery worker (harness.celery_worker_command) plus `args`."""
    return spawn(celery_worker_command(*args), env, log)


def wait_until(done, seconds: float, what: str, every: float = 0.1, logs=(),
               process: subprocess.Popen | None = None) -> None:
    """Poll `done()` every `every` s until it is true; fail with "no `what` within
    `seconds` s" (or at once if `process` exits first) and the end of each of `logs`."""
    deadline = time.monotonic() + seconds
    while not done():
        exited = process is not None and process.poll() is not None
        if exited or time.monotonic() > deadline:
            ends = "".join(f"\n--- {log}:\n{tail(log)}" for log in logs)
            why = f": the process exited ({process.returncode})" if exited else \
                f" within {seconds:g} s"
            raise AssertionError(f"no {what}{why}{ends}")
        time.sleep(every)
