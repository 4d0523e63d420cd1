"""A real Celery worker in a subprocess on this test database (tests/faults/procs.py
starts it and stops its process group; wait on it with procs.wait_until)."""

import os
from contextlib import contextmanager

from apps.bench.harness import database_url
from tests.faults import procs


@contextmanager
def celery_worker(tmp_path, *args: str, **env: str):
    """`with celery_worker(tmp_path, "--beat") as worker:` `celery worker` (one process,
    plus `args`) on this test database with MW_DATA_DIR=tmp_path and `env` on top of this
    process's environment, logging to tmp_path/celery.log; stopped after the block."""
    worker = procs.celery({**os.environ, "DATABASE_URL": database_url(),
                           "MW_DATA_DIR": str(tmp_path), **env}, tmp_path / "celery.log", *args)
    try:
        yield worker
    finally:
        procs.stop(worker)
