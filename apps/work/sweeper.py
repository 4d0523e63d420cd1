"""The sweeper's shell: find the due WorkItems with one indexed query, then, Group by
Group, append what `sweep.decide` says through the one append path: per transaction,
up to MW_SWEEP_GROUP_CHUNK WorkItems of one Group, their events chained and their
projections upserted in a few multi-row statements.

Safe with several sweepers (Celery workers, `mw_sweep --loop`, the in-process
thread) at once: each Group is taken with SKIP LOCKED, so a Group that another
sweeper or a command holds is skipped this round and never waited on; whoever gets
the lock re-checks the locked state, so an item swept by someone else, renewed or
accepted in between yields nothing. Bounded: at most `limit` items per run.
"""

import logging
import random
import threading
from collections import defaultdict
from dataclasses import replace
from datetime import datetime

from django.conf import settings
from django.db import connection
from django.utils import timezone

from apps.ledger import db, pipeline

from . import dispatch, store
from . import sweep as core
from .commands import Context
from .state import FAILED, OFFERED

log = logging.getLogger(__name__)

ITEMS, MISSIONS = store.ITEMS, store.MISSIONS


def _auto_dispatch() -> str:
    """SQL: the item's Mission asked for automatic dispatch (the flag lives in its doc)."""
    flag = ("(m.doc ->> 'auto_dispatch') = 'true'" if db.is_postgres()
            else "json_extract(m.doc, '$.auto_dispatch') = 1")
    return (f"EXISTS (SELECT 1 FROM {MISSIONS} m WHERE m.group_id = w.group_id "
            f"AND m.mission_id = w.mission_id AND {flag})")


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
    return db.fetch(sql, [*params, limit])


def sweep(now: datetime | None = None, limit: int | None = None) -> dict:
    """One bounded sweep: counts of what it appended and of the Groups it visited."""
    now = now or timezone.now()
    limit = limit or settings.MW_SWEEP_BATCH
    by_group = defaultdict(list)
    for group_id, item_id in due(now, limit):
        by_group[group_id].append(item_id)
    policy, redispatch = pipeline.policy(), dispatch.redispatch
    result = {"expiredLeases": 0, "expiredOwnerships": 0, "redispatched": 0, "groups": 0,
              "skippedGroups": 0, "failedGroups": 0}
    chunk = settings.MW_SWEEP_GROUP_CHUNK
    for group_id in _walk(by_group):
        item_ids = by_group[group_id]
        try:
            # A Group's commands wait while its lock is held: take its items a chunk per
            # transaction, so that a sweep of thousands never stalls them for long.
            for start in range(0, len(item_ids), chunk):
                round_ = _GroupRound(item_ids[start:start + chunk], now, policy, redispatch)
                events = pipeline.submit_system(group_id, round_.decide, now, round_.load,
                                                skip_locked=True)
                if events is None:
                    break
                for key, count in core.counts(events).items():
                    result[key] += count
        except Exception:  # one Group's trouble must not stop the others' deadlines
            log.exception("sweeping Group %s failed", group_id)
            result["failedGroups"] += 1
            continue
        result["skippedGroups" if events is None else "groups"] += 1
    return result


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

    def __init__(self, item_ids: list, now: datetime, policy, redispatch):
        self.item_ids, self.redispatch = item_ids, redispatch
        self.context = Context(now=now, policy=policy)

    def load(self, group_id: str):
        view = store.load_items_and_missions(group_id, self.item_ids)
        placing = [i for i in view.items.values() if i.state in (OFFERED, FAILED)]
        if placing:
            # Automatic dispatch ranks the Group's workers: their facts join the context.
            capabilities = sorted({c for i in placing for c in store.capability_ids(i)})
            self.context = replace(self.context, candidates=store.candidate_facts(
                group_id, None, capabilities))
        return view

    def decide(self, view) -> list:
        return core.decide(view, self.context, self.redispatch)


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
