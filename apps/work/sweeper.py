"""The sweeper's shell: find the due WorkItems with one indexed query, then, Group by
Group, append what `sweep` decides through the one append path.

Deadline expiries (most of a sweep) are decided, evolved and serialized before the Group
lock (`pipeline.prepare_system`, on a thread at a lower CPU priority); under the lock,
per transaction of up to MW_SWEEP_GROUP_CHUNK WorkItems, `pipeline.submit_prepared`
keeps those whose row is unchanged since it was read (a renewal or a command that got
there first wins; the item is looked at again next sweep), chains their events and
writes them. So a Group's commands wait at most for a short, Python-light transaction.
Automatic dispatch ranks the Group's workers and is decided under the lock
(`pipeline.submit_system`), on a view holding every dependency of the items it
considers; so is the expiry of an item it is for (a timed-out owner under
`autoDispatch`), so that a timeout and the end of the attempt it calls for (the owner
fenced, `work.failed` with its retry time after the contract's backoff, or exhausted)
are appended together or not at all.

Safe with several sweepers (Celery workers, `mw_sweep --loop`, the in-process
thread) at once: a sweeper claims a Group for its turn (a session advisory lock that
commands never take), so two never decide the same items twice over, and takes the
Group lock with SKIP LOCKED, so a Group that a command holds is skipped this round and
never waited on. Bounded: at most `limit` items per run.
"""

import logging
import os
import random
import threading
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from functools import cache

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, transaction
from django.utils import timezone

from apps.ledger import db, distribution, pipeline
from mission_weave.core import dispatch
from mission_weave.core import sweep as core
from mission_weave.core.commands import Context

from . import work_store

log = logging.getLogger(__name__)

ITEMS, MISSIONS = work_store.ITEMS, work_store.MISSIONS


def _auto_dispatch() -> str:
    """SQL: the item's Mission asked for automatic dispatch (the flag lives in its doc)."""
    return (f"EXISTS (SELECT 1 FROM {MISSIONS} m WHERE m.group_id = w.group_id "
            f"AND m.mission_id = w.mission_id AND (m.doc ->> 'auto_dispatch') = 'true')")


# One branch per deadline rule, each a range scan of its own index in deadline order.
# Fencing comes before dispatch, so that offers nobody can take never crowd out leases.
RULES = (
    ("lease_expires_at", "w.state = 'active'"),
    ("start_by", "w.state = 'queued' AND w.owner IS NOT NULL"),
    ("blocked_until", "w.state = 'blocked' AND w.owner IS NOT NULL"),
    ("offers_expire_at", "w.state = 'offered' AND {auto}"),
    ("retry_at", "w.state = 'failed' AND {auto}"),
)


def due(now: datetime, limit: int) -> list:
    """[(group_id, work_item_id)] whose deadline passed at `now`, at most `limit`."""
    at = connection.ops.adapt_datetimefield_value(now)
    branches, params = [], []
    for kind, (column, condition) in enumerate(RULES):
        branches.append(
            f"SELECT * FROM (SELECT {kind} AS kind, w.{column} AS due_at, w.group_id, "
            f"w.work_item_id FROM {ITEMS} w WHERE w.{column} <= %s AND "
            f"{condition.format(auto=_auto_dispatch())} ORDER BY w.{column} LIMIT %s) k{kind}")
        params += [at, limit]
    sql = (f"SELECT group_id, work_item_id FROM ({' UNION ALL '.join(branches)}) due "
           f"ORDER BY kind, due_at, group_id, work_item_id LIMIT %s")
    with transaction.atomic(), connection.cursor() as cursor:
        # Each branch is meant as a range scan of its deadline's index in order. After a
        # sweep turned thousands of deadlines to NULL the statistics are stale, and the
        # planner would rather take a bitmap scan and sort, which visits every swept
        # row's dead index entry on every call; an index scan marks them dead as it
        # passes, so that the next call skips them. (Those plans cost a lot on paper:
        # compiling the query for that would take longer than running it.)
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute("SET LOCAL jit = off")
        return db.fetch(sql, [*params, limit])


def sweep(now: datetime | None = None, limit: int | None = None) -> dict:
    """One bounded sweep: counts of what it appended and of the Groups it visited."""
    now = now or timezone.now()
    limit = limit or settings.MW_SWEEP_BATCH
    if not distribution.on_coordinator():  # the claims would not exclude each other
        raise ImproperlyConfigured("on Citus the sweeper must connect to the coordinator: "
                                   "its Group claims are advisory locks, which are per node")
    by_group = defaultdict(list)
    for group_id, item_id in due(now, limit):
        by_group[group_id].append(item_id)
    policy = pipeline.policy()
    result = {"expiredLeases": 0, "expiredOwnerships": 0, "redispatched": 0, "failed": 0,
              "groups": 0, "skippedGroups": 0, "failedGroups": 0}
    for group_id in _walk(by_group):
        try:
            with _claim(group_id) as claimed:
                done = claimed and _sweep_group(group_id, by_group[group_id], now, policy,
                                                result)
        except Exception:  # one Group's trouble must not stop the others' deadlines
            log.exception("sweeping Group %s failed", group_id)
            result["failedGroups"] += 1
            continue
        result["groups" if done else "skippedGroups"] += 1
    return result


PREPARE_BLOCK = 1000  # WorkItems read and decided at once, before the Group lock


def _sweep_group(group_id: str, item_ids: list, now: datetime, policy,
                 result: dict) -> bool:
    """Sweep one Group's due items into `result`; False if a command held the Group
    (what is left waits for the next sweep)."""
    chunk = settings.MW_SWEEP_GROUP_CHUNK
    for block in range(0, len(item_ids), PREPARE_BLOCK):
        view, versions = work_store.load_due(group_id, item_ids[block:block + PREPARE_BLOCK], now)
        prepared, dispatching = _outside_the_lock(os.getpid()).submit(
            _prepare, group_id, view, versions, now).result()
        # A Group's commands wait while its lock is held: a chunk per transaction, so
        # that a sweep of thousands never stalls them for long.
        for start in range(0, len(prepared), chunk):
            events = pipeline.submit_prepared(group_id, prepared[start:start + chunk],
                                              skip_locked=True)
            if events is None:
                return False
            _count(result, events)
        for start in range(0, len(dispatching), chunk):
            round_ = _GroupRound(dispatching[start:start + chunk], now, policy)
            events = pipeline.submit_system(group_id, round_.decide, now, round_.load,
                                            skip_locked=True)
            if events is None:
                return False
            _count(result, events)
    return True


def _prepare(group_id: str, view, versions: dict, now: datetime) -> tuple[list, list]:
    """(the expiries, prepared; the WorkItems to dispatch, decided under the lock)."""
    drafts, dispatching = core.split(view, now)
    return pipeline.prepare_system(group_id, view, versions, drafts, now), dispatching


@cache
def _outside_the_lock(pid: int) -> ThreadPoolExecutor:
    """The thread that decides and serializes expiries before the Group lock, most of a
    sweep's Python, at a lower CPU priority (MW_SWEEP_NICENESS; on Linux a thread's nice
    value is its own): on a busy machine, commands come first. What runs under the lock
    stays at the process's priority, so that no command waits on a lock holder the
    scheduler holds back. One per process: a forked child has none of its parent's
    threads."""
    return ThreadPoolExecutor(1, thread_name_prefix="sweep-prepare", initializer=_nicer)


def _nicer() -> None:
    try:
        os.nice(settings.MW_SWEEP_NICENESS)
    except OSError:  # not allowed here: the same priority as the rest
        log.warning("the sweeper could not lower its preparing thread's CPU priority")


def _count(result: dict, events: list) -> None:
    for key, count in core.counts(events).items():
        result[key] += count


CLAIMS = 0x6D77  # the advisory lock key space of sweep claims ("mw")


@contextmanager
def _claim(group_id: str):
    """True while this sweeper has the Group's turn; False if another sweeper has it.
    A session-level advisory lock: it outlives the transactions of the turn and dies
    with the connection. Taken where the connection is: on Citus, on the coordinator,
    which every sweeper connects to (`sweep` checks), never on a shard's node."""
    key = [CLAIMS, group_id]
    ((claimed,),) = db.fetch("SELECT pg_try_advisory_lock(%s, hashtext(%s))", key)
    try:
        yield claimed
    finally:
        if claimed:
            db.fetch("SELECT pg_advisory_unlock(%s, hashtext(%s))", key)


def _walk(by_group: dict) -> list:
    """The Groups in id order, from a random one on. A sweep holds one Group lock at a
    time and never waits for one, so no fixed order is needed against deadlock; a random
    start spreads concurrent sweepers over different Groups instead of having them
    queue for (and skip) the same ones."""
    groups = sorted(by_group)
    start = random.randrange(len(groups)) if groups else 0
    return groups[start:] + groups[:start]


class _GroupRound:
    """One Group's part of a sweep: what to load under its lock, and the decision."""

    def __init__(self, item_ids: list, now: datetime, policy):
        self.item_ids = item_ids
        self.context = Context(now=now, policy=policy)

    def load(self, group_id: str):
        # The items, their Missions and every dependency of theirs: dispatch checks the
        # dependencies, and one missing from the view would count as not met.
        view = work_store.load_for_dispatch(group_id, self.item_ids)
        placing = [view.items[i] for i in self.item_ids if i in view.items]
        if placing:
            # Automatic dispatch ranks the Group's workers: their facts join the context.
            self.context = replace(self.context, candidates=work_store.candidate_facts(
                group_id, None, history=True))
        return view

    def decide(self, view) -> list:
        return core.decide(view, self.context, dispatch.redispatch, self.item_ids)


class InProcessSweeper:
    """The embedded mode's stand-in for Celery beat: a daemon thread that sweeps every
    `interval` seconds until `stop()`. One per process (mission_weave/asgi.py)."""

    def __init__(self, interval: float):
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mw-sweeper", daemon=True)

    def start(self) -> "InProcessSweeper":
        self._thread.start()
        return self

    def stop(self, timeout: float = 10) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                sweep()
            except Exception:  # the next round tries again; a sweep is idempotent
                log.exception("in-process sweep failed")
            finally:
                connection.close()


_in_process: InProcessSweeper | None = None
_in_process_lock = threading.Lock()


def start_in_process() -> InProcessSweeper:
    global _in_process
    with _in_process_lock:
        if _in_process is None:
            _in_process = InProcessSweeper(settings.MW_SWEEP_INTERVAL_SECONDS).start()
        return _in_process
