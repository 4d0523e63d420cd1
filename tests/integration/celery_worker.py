"""A real Celery worker in a subprocess on this test database, and polling until a
condition holds (while that worker, if any, stays up)."""

import os
import subprocess
import sys
import time
from contextlib import contextmanager

from django.conf import settings as django_settings

from apps.bench.harness import database_url


@contextmanager
def celery_worker(tmp_path, *args: str, **env: str):
    """`with celery_worker(tmp_path, "--beat") as worker:` `celery worker` (one process,
    plus `args`) on this test database with MW_DATA_DIR=tmp_path and `env` on top of this
    process's environment; terminated after the block."""
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "mission_weave.celery", "worker",
         "-l", "warning", "--concurrency", "1", *args],
        cwd=django_settings.BASE_DIR,
        env={**os.environ, "DATABASE_URL": database_url(), "MW_DATA_DIR": str(tmp_path), **env},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield worker
    finally:
        worker.terminate()
        worker.wait(timeout=20)


def wait_until(done, seconds: float, what: str, process=None, every: float = 0.3) -> None:
    """Poll `done()` every `every` s until it is true; fail with "no `what` within
    `seconds` s", or with `process`'s stderr as soon as that process exits."""
    deadline = time.monotonic() + seconds
    while not done():
        if process is not None:
            assert process.poll() is None, process.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline, f"no {what} within {seconds:g} s"
        time.sleep(every)
