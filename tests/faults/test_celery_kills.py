"""A Celery worker (`python -m celery -A mission_weave.celery worker`, its pool process with
it) killed with SIGKILL in the middle of a review step and in the middle of a sweep. The
moment is made certain with a lock: the test holds a row the task's transaction needs,
waits until PostgreSQL shows the task waiting on it (inside its transaction, after the
part of its work that needs no lock), and kills the worker there. Celery acknowledged
the task when it took it, so the task is gone with the worker: a second worker with
beat redoes the work (the review's `resume`, the next sweep), once, and doing it yet
again appends nothing."""

import os
import signal
import time
from datetime import timedelta

import psycopg
import pytest
import redis
from django.conf import settings
from django.utils import timezone

from apps.bench import sweep_load as sweep_bench
from apps.bench.harness import database_url
from apps.ledger.models import Event
from apps.ledger.verify import verify_group
from apps.review import tasks as review_tasks
from apps.work import sweeper
from apps.work.models import WorkItem
from apps.work.tasks import sweep as sweep_task
from tests.faults import checks, procs
from tests.support import evidence

pytestmark = pytest.mark.django_db(transaction=True)

REVIEW = ("review.integrity_checked", "review.checks_completed", "review.evidence_requested",
          "review.evaluated")
CHUNK = 10  # MW_SWEEP_GROUP_CHUNK of the workers: a Group's sweep in several transactions


@pytest.fixture
def worker_env(tmp_path, blob_root) -> dict:
    env = {**os.environ, "DATABASE_URL": database_url(), "MW_DATA_DIR": str(tmp_path),
           "MW_BLOB_ROOT": str(blob_root), "MW_SWEEP_GROUP_CHUNK": str(CHUNK),
           "MW_SWEEP_INTERVAL_SECONDS": "1", "MW_REVIEW_RESUME_SECONDS": "1"}
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    # Tasks another run left in this Redis database would be taken first.
    redis.Redis.from_url(settings.REDIS_URL).delete("celery")
    return env


class Holding:
    """A row lock held by this test on its own connection, until `release()`."""

    def __init__(self, sql: str, params: list):
        self.connection = psycopg.connect(database_url())
        assert self.connection.execute(sql, params).fetchall(), "nothing to lock"

    def waiters(self) -> list:
        """Backends of this database waiting for a lock (ours)."""
        with psycopg.connect(database_url(), autocommit=True) as other:
            return [pid for (pid,) in other.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND pid <> %s",
                [self.connection.info.backend_pid])]

    def release(self) -> None:
        self.connection.rollback()
        self.connection.close()


def backends(pids: list) -> list:
    with psycopg.connect(database_url(), autocommit=True) as other:
        return other.execute("SELECT pid FROM pg_stat_activity WHERE pid = ANY(%s)",
                             [pids]).fetchall()


def kill_while_waiting(worker, holding: Holding, log) -> None:
    """SIGKILL the worker once its task waits on `holding`, then let go of the lock (also
    when that never happens: the test database is emptied after the test). A backend
    waiting on a lock does not read its socket, so the killed task's transaction ends
    only once it gets the lock and finds its client gone: nothing of it is committed."""
    try:
        procs.wait_until(holding.waiters, 60, "task waiting on the held lock", logs=[log])
        waiting = holding.waiters()
        procs.signal_group(worker, signal.SIGKILL)
        worker.wait(10)
    finally:
        holding.release()
    procs.wait_until(lambda: not backends(waiting), 10, "the killed task's backend to end")


def review_events(group_id: str, item_id: str) -> list:
    return list(Event.objects.filter(group_id=group_id, work_item_id=item_id,
                                     type__startswith="review.")
                .order_by("sequence").values_list("type", flat=True))


def test_a_worker_killed_mid_review_has_the_review_redone_once(scenario, worker_env,
                                                                tmp_path, figure):
    s = scenario
    g = s.world.group.id
    item, _ = s.running()
    name = s.deliver(item)
    # Committed here; the review's first task goes to Redis, with no worker to take it yet.
    s.w1.ok("work.submit", {"contractRevision": 1, "artifacts": [name],
                            "evidence": [evidence(["ac1", "ac2"], artifacts=[name])]},
            **s.lease_fields(item))
    holding = Holding("SELECT 1 FROM ledger_group WHERE id = %s FOR UPDATE", [g])
    first, second = tmp_path / "worker-1.log", tmp_path / "worker-2.log"
    worker = procs.celery(worker_env, first)
    try:
        kill_while_waiting(worker, holding, first)
    finally:
        procs.stop(worker)
    assert worker.returncode == -signal.SIGKILL
    assert review_events(g, item) == []  # the step in flight left nothing
    killed_at = time.monotonic()
    again = procs.celery(worker_env, second, "--beat", "--schedule", str(tmp_path / "beat"))
    try:
        procs.wait_until(lambda: "review.evaluated" in review_events(g, item), 60,
                         "the review redone", logs=[second])
        redone = time.monotonic() - killed_at
    finally:
        procs.stop(again)
    assert review_events(g, item) == list(REVIEW)
    # And once more, every step inline here, as a duplicated delivery would: nothing new.
    revision = WorkItem.objects.get(group_id=g, work_item_id=item).doc["review"][
        "submissionRevision"]
    with _eager():
        review_tasks.check_integrity(g, item, revision)
        review_tasks.resume()
    assert review_events(g, item) == list(REVIEW)
    assert checks.partial_states(g) == [] and verify_group(g) == []
    figure(f"Celery worker SIGKILLed inside the review's first step (waiting on the Group "
           f"lock): nothing appended; a new worker's resume redid it {redone:.1f} s later, "
           f"each of the 4 review steps once; running every step again appended nothing")


def test_a_worker_killed_mid_sweep_leaves_whole_chunks_and_the_next_sweep_the_rest(
        worker_env, tmp_path, figure):
    leases = 5 * CHUNK
    (g,) = sweep_bench.prepare(f"f{os.getpid()}", leases, 1,
                               timezone.now() - timedelta(hours=1))
    items = sorted(WorkItem.objects.filter(group_id=g).values_list("work_item_id", flat=True))
    holding = Holding("SELECT 1 FROM work_workitem WHERE group_id = %s AND work_item_id = %s "
                      "FOR UPDATE", [g, items[-1]])  # in the sweep's last chunk
    first, second = tmp_path / "worker-1.log", tmp_path / "worker-2.log"
    worker = procs.celery(worker_env, first)
    try:
        sweep_task.delay()
        kill_while_waiting(worker, holding, first)
    finally:
        procs.stop(worker)
    assert worker.returncode == -signal.SIGKILL
    expired = _expired(g)
    assert len(expired) == leases - CHUNK  # the four chunks before, committed whole
    assert set(expired) == set(items[:-CHUNK])
    assert checks.partial_states(g) == [] and verify_group(g) == []
    killed_at = time.monotonic()
    again = procs.celery(worker_env, second, "--beat", "--schedule", str(tmp_path / "beat"))
    try:
        procs.wait_until(lambda: len(_expired(g)) >= leases, 60, "the rest swept",
                         logs=[second])
        redone = time.monotonic() - killed_at
        time.sleep(3)  # three more sweeps of the beat
    finally:
        procs.stop(again)
    assert sorted(_expired(g)) == items  # one lease.expired per lease, none twice
    assert sweeper.sweep()["expiredLeases"] == 0  # and one more sweep finds nothing
    assert checks.partial_states(g) == [] and verify_group(g) == []
    figure(f"Celery worker SIGKILLed mid-sweep ({leases} expired leases, chunks of {CHUNK}, "
           f"killed waiting in chunk 5): chunks 1-4 committed whole, chunk 5 nothing; the "
           f"next worker's beat swept the other {CHUNK} {redone:.1f} s later; {leases} "
           f"lease.expired, one per lease; mw_verify green")


def _expired(group_id: str) -> list:
    return list(Event.objects.filter(group_id=group_id, type="lease.expired")
                .values_list("work_item_id", flat=True))


class _eager:
    """Celery runs each task inline here (tests/conftest.py's `eager`, as a block)."""

    def __enter__(self):
        from mission_weave.celery import app

        self.app, self.previous = app, app.conf.task_always_eager
        app.conf.task_always_eager = True

    def __exit__(self, *exc):
        self.app.conf.task_always_eager = self.previous
