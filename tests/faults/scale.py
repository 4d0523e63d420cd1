"""The scale-out run (tests/faults/test_scale_out.py and its short variant): two web
processes (`python -m mission_weave.runtime.serve`, one daphne each, on ports of their own) and
two Celery workers (one with beat: the sweeper, the review's resume) against one
PostgreSQL and one Redis, driven by mw_bench --load's workload (apps/bench/load.py:
lifecycles with renewals, progress, artifacts and submissions reviewed by Celery,
abandoned items taken over by a rescuer while the first worker's late command is
fenced, dashboard and REST reads) over 100 Groups, the lanes alternating between the
two web processes. A WebSocket client attached to each web process follows every Group.

Afterwards every invariant holds: no error and no stale command accepted, one live owner
per WorkItem throughout the log, every Group's sequence gapless, mw_verify green on every
Group, nothing half applied, and each WebSocket client has every event of every Group."""

import time
import uuid

from apps.bench import load
from apps.bench.harness import free_port
from apps.ledger.models import Event
from apps.ledger.verify import verify_group
from tests.faults import checks, procs
from tests.integration.wslive import server_env

GROUPS, LANES = 100, 8


def scale_out(tmp_path, seconds: float, figure) -> None:
    prepared = load.prepare(f"scale-{uuid.uuid4().hex[:6]}", GROUPS, LANES)
    env = {**server_env(), "MW_DATA_DIR": str(tmp_path), "MW_BLOB_ROOT": str(tmp_path / "blobs"),
           "MW_SWEEP_INTERVAL_SECONDS": "2", "MW_REVIEW_RESUME_SECONDS": "5"}
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    ports = [free_port(), free_port()]
    # load.celery_workers writes celery-0.log and celery-1.log beside the web logs.
    logs = [tmp_path / n for n in ("web-0.log", "web-1.log", "celery-0.log", "celery-1.log")]
    webs = []
    try:
        for port, log in zip(ports, logs):
            webs.append(procs.web(port, env, log))
        with load.celery_workers(2, env, tmp_path) as workers:
            sockets = [(f"ws://127.0.0.1:{port}/ws/v1/", prepared.groups) for port in ports]
            measured = load.drive(ports, prepared, seconds, sockets, lambda text: None)
            assert all(p.poll() is None for p in webs + workers), [procs.tail(log)
                                                                   for log in logs]
            # The workers review what was submitted (the coordinator accepts right after
            # submitting, so a review that starts late appends nothing: a few suffice).
            procs.wait_until(lambda: Event.objects.filter(
                group_id__in=prepared.groups, type="review.integrity_checked").exists(),
                30, "review by the Celery workers", logs=logs[2:])
    finally:
        for process in webs:
            procs.stop(process)
    api, ws = measured["api"], measured["websocket"]
    assert api["errors"] == {}, api["firstErrors"]
    assert api["staleAccepted"] == 0 and api["fenced"] == api["rescues"]
    assert api["lifecycles"] > LANES
    assert [s["missing"] for s in ws["sockets"]] == [{}, {}]
    began = time.monotonic()
    assert checks.gapless(prepared.groups) == []
    for group_id in prepared.groups:
        assert verify_group(group_id) == []
        assert checks.partial_states(group_id) == []
        assert checks.one_live_owner(group_id) == []
    checked = time.monotonic() - began
    events = Event.objects.filter(group_id__in=prepared.groups)
    reviewed = events.filter(type="review.integrity_checked").count()
    swept = events.filter(actor="system", type__in=["lease.expired",
                                                    "work.ownership_expired"]).count()
    assert reviewed > 0  # the Celery workers took the reviews
    figure(f"daphne × 2 (own ports) + Celery × 2 on one PostgreSQL and Redis, {GROUPS} Groups, "
           f"{LANES} lanes, {api['seconds']:.0f} s: {api['operationsPerSecond']} requests/s "
           f"({api['commandsPerSecond']} commands/s), {api['lifecycles']} lifecycles, "
           f"{api['rescues']} takeovers ({api['fenced']} late commands fenced, 0 accepted), "
           f"0 errors; {reviewed} reviews and {swept} expiries by Celery; "
           f"{ws['deliveries']} WebSocket deliveries to one client per web "
           f"process, 0 missing ({ws['duplicates']} duplicates); one live owner, gapless, "
           f"mw_verify green on all {GROUPS} Groups (checked in {checked:.1f} s)")
