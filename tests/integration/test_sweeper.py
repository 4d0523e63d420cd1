"""The sweeper on PostgreSQL (apps/work/sweeper.py), every deadline rule driven by
time-machine: the server reads django.utils.timezone.now(), frozen here with tick=False.

Lease timeout -> lease.expired only without autoDispatch (the owner stays recorded but is
no longer live, and the next work.offer appends its work.ownership_expired; with
autoDispatch the sweeper reassigns it: test_sweeper_reassign.py); missed start-by and
run-out blocked leases -> work.ownership_expired; offer expiry appends nothing (§10.2),
unless the Mission asks for automatic dispatch, as does a failed item whose backoff ran
out; a late result after expiry is refused, kept for audit, and never completes the item
(§11.5).
Then the same sweep through mw_sweep, Celery (eager, and a real worker with beat) and
the embedded in-process thread.
"""

import io
import json
import os
from datetime import timedelta
from urllib.parse import urlsplit

import pytest
from django.core.management import call_command

from apps.ledger.models import Event, Group
from apps.ledger.verify import verify_group
from apps.work import sweeper, tasks
from mission_weave.protocol.timefmt import parse_time
from tests.faults.procs import wait_until
from tests.integration.celery_worker import celery_worker
from tests.support import Scenario, contract, events_after, evidence, later, now

NOTHING = {"expiredLeases": 0, "expiredOwnerships": 0, "redispatched": 0}
LEASE_ONLY = {**NOTHING, "expiredLeases": 1}  # a lease timeout: lease.expired, no fencing


@pytest.fixture
def s(db, clock):
    return Scenario()


def counted(result: dict) -> dict:
    return {key: result[key] for key in NOTHING}


def owner_is_live(s: Scenario, item_id: str) -> bool:
    """The item's ownership as the fencing rules see it now, from its projection."""
    from apps.work import work_store
    from mission_weave.core import fencing
    view = work_store.load_items(s.world.group.id, [item_id])
    return fencing.owner_is_live(view.items[item_id], now())


def test_an_expired_lease_is_swept_and_the_item_offered_again_under_a_higher_epoch(s, clock):
    item_id, started = s.running(s.w1)
    head = s.world.head

    later(clock, 299)
    assert counted(sweeper.sweep()) == NOTHING
    later(clock, 1)  # exactly at expiresAt: a renewal is already refused, so it expires
    result = sweeper.sweep()

    assert counted(result) == LEASE_ONLY
    assert result["groups"] == 1
    (expired,) = events_after(s, head)  # one event per expired lease, no ownership_expired
    assert (expired["type"], expired["actor"], expired["data"]) == (
        "lease.expired", "system", {"leaseId": started["leaseId"], "reason": "timeout"})
    item = s.item(item_id)
    # The owner stays recorded, but with its lease closed it is no longer live.
    assert (item["state"], item["owner"], item["ownershipEpoch"], item["lease"]) == (
        "active", s.w1.name, 1, None)
    assert not owner_is_live(s, item_id)

    # The next offer fences the expired owner first, then offers.
    fenced, offered = s.offer(item_id, s.w2)
    assert (fenced["type"], fenced["data"]) == ("work.ownership_expired", {
        "agentId": s.w1.name, "ownershipEpoch": 1, "reason": "lease"})
    assert offered["type"] == "work.offered"
    assert s.item(item_id)["owner"] is None
    assert s.accept(item_id, s.w2)["ownershipEpoch"] == 2
    assert s.start(item_id, s.w2)["ownershipEpoch"] == 2
    assert verify_group(s.world.group.id) == []


def test_a_renewed_lease_is_not_swept(s, clock):
    item_id, _ = s.running(s.w1)
    later(clock, 200)
    s.w1.ok("lease.renew", {}, **s.lease_fields(item_id))
    later(clock, 200)
    head = s.world.head
    assert counted(sweeper.sweep()) == NOTHING
    assert s.world.head == head
    assert s.item(item_id)["lease"] is not None


def test_a_late_submit_after_expiry_is_refused_and_kept_for_audit(s, clock):
    item_id, _ = s.running(s.w1)
    fields = s.lease_fields(item_id)
    later(clock, 301)
    sweeper.sweep()
    head = s.world.head

    response = s.w1.send("work.submit", {"contractRevision": 1,
                                         "evidence": [evidence(["ac1", "ac2"])]}, **fields)

    assert response.status_code == 409
    assert response.json()["error"]["code"] in ("LEASE_EXPIRED", "STALE_LEASE")
    assert s.world.head == head
    assert s.item(item_id)["state"] == "active"
    audit = s.c.get(f"work-items/{item_id}/audit").json()
    assert [r["type"] for r in audit["refusedCommands"]] == ["work.submit"]
    assert verify_group(s.world.group.id) == []


def test_a_missed_start_by_deadline_expires_ownership(s, clock):
    item_id = s.authorize()
    s.offer(item_id, s.w1)
    accepted = s.accept(item_id, s.w1)
    head = s.world.head

    later(clock, (parse_time(accepted["startBy"]) - now()).total_seconds())
    assert counted(sweeper.sweep()) == {**NOTHING, "expiredOwnerships": 1}

    (fenced,) = events_after(s, head)
    # Never started: the missed deadline used up the first attempt (§11.4).
    assert (fenced["type"], fenced["data"]) == ("work.ownership_expired", {
        "agentId": s.w1.name, "ownershipEpoch": 1, "reason": "start_by", "attempt": 1})
    assert s.item(item_id)["attempts"] == 1
    response = s.w1.send("work.start", {}, workItemId=item_id, ownershipEpoch=1)
    assert response.json()["error"]["code"] == "STALE_OWNERSHIP"
    s.offer(item_id, s.w2)
    assert s.accept(item_id, s.w2)["ownershipEpoch"] == 2
    assert verify_group(s.world.group.id) == []


def test_a_run_out_blocked_lease_expires_ownership_and_unblock_reopens(s, clock):
    item_id, _ = s.running(s.w1)
    s.w1.ok("work.block", {"checkpoint": {"progress": {"phase": "waiting"}},
                           "requiredResolution": "figures",
                           "blockedLeaseSeconds": 60}, **s.lease_fields(item_id))
    head = s.world.head

    later(clock, 60)
    assert counted(sweeper.sweep()) == {**NOTHING, "expiredOwnerships": 1}

    (fenced,) = events_after(s, head)
    assert fenced["data"]["reason"] == "blocked_lease"
    assert s.item(item_id)["owner"] is None
    unblocked = s.c.ok("work.unblock", {"resolution": "figures arrived"}, workItemId=item_id)
    assert unblocked[0]["data"]["next"] == "open"
    assert s.item(item_id)["state"] == "open"
    assert verify_group(s.world.group.id) == []


def test_offer_expiry_appends_nothing(s, clock):
    item_id = s.authorize()
    s.offer(item_id, s.w1, seconds=60)
    head = s.world.head

    later(clock, 61)
    assert counted(sweeper.sweep()) == NOTHING

    assert s.world.head == head
    assert s.item(item_id)["state"] == "offered"
    response = s.w1.send("work.accept_offer", {"contractRevision": 1}, workItemId=item_id)
    assert response.json()["error"]["code"] == "OFFER_NOT_LIVE"


def test_sweeping_twice_appends_once(s, clock):
    s.running(s.w1)
    later(clock, 301)
    first = sweeper.sweep()
    head = s.world.head
    second = sweeper.sweep()
    assert counted(first) == LEASE_ONLY
    assert counted(second) == NOTHING
    assert s.world.head == head


def test_a_sweep_takes_at_most_its_limit(s, clock):
    items = [s.running(s.w1)[0] for _ in range(3)]
    later(clock, 301)

    assert sweeper.sweep(limit=2)["expiredLeases"] == 2
    assert sweeper.sweep(limit=2)["expiredLeases"] == 1
    assert sweeper.sweep(limit=2)["expiredLeases"] == 0
    assert all(s.item(i)["lease"] is None for i in items)
    assert verify_group(s.world.group.id) == []


def test_the_due_query_sees_only_what_is_due(s, clock):
    running, _ = s.running(s.w1)
    queued = s.authorize()
    s.offer(queued, s.w2)
    s.accept(queued, s.w2)
    group_id = s.world.group.id

    assert sweeper.due(now(), 100) == []
    later(clock, 301)
    assert sweeper.due(now(), 100) == [(group_id, running)]
    later(clock, 600)
    assert sweeper.due(now(), 100) == [(group_id, running), (group_id, queued)]


def test_mw_sweep_prints_its_counts_as_json(s, clock):
    s.running(s.w1)
    later(clock, 301)
    out = io.StringIO()
    call_command("mw_sweep", stdout=out)
    result = json.loads(out.getvalue())
    assert counted(result) == LEASE_ONLY
    assert set(result) >= {"groups", "skippedGroups"}


def test_the_celery_task_runs_the_same_sweep(s, clock):
    s.running(s.w1)
    later(clock, 301)
    result = tasks.sweep.apply().get()
    assert counted(result) == LEASE_ONLY


def test_beat_schedules_the_sweep_every_interval(settings):
    entry = settings.CELERY_BEAT_SCHEDULE["sweep"]
    assert entry["task"] == tasks.sweep.name
    assert entry["schedule"] == settings.MW_SWEEP_INTERVAL_SECONDS


def test_an_expired_sequential_offer_moves_to_the_next_candidate_under_auto_dispatch(s, clock):
    mission_id = s.c.ok("mission.create", {
        "title": "auto", "ownerId": s.owner.principal, "coordinatorId": s.c.principal,
        "autoDispatch": True})[0]["missionId"]
    item_id = s.c.ok("work.authorize", {"missionId": mission_id, "contract": contract()})[0][
        "workItemId"]
    s.offer(item_id, s.w1, s.w2, seconds=60)
    head = s.world.head

    later(clock, 60)
    result = sweeper.sweep()

    assert counted(result) == {**NOTHING, "redispatched": 1}
    (offered,) = events_after(s, head)
    assert (offered["type"], offered["actor"]) == ("work.offered", "system")
    assert [o["agentId"] for o in offered["data"]["offers"]] == [s.w2.name]
    assert counted(sweeper.sweep()) == NOTHING
    assert s.accept(item_id, s.w2)["ownershipEpoch"] == 1
    assert verify_group(s.world.group.id) == []


# --- a real Celery worker with beat sweeps on its own -----------------------------------------

def celery_broker() -> str:
    """A Redis DB of the worker's own, on our Redis server."""
    redis = urlsplit(os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0")
    return f"{redis.scheme}://{redis.netloc}/{os.environ.get('MW_TEST_CELERY_REDIS_DB', '15')}"


@pytest.mark.slow
def test_a_real_celery_worker_with_beat_sweeps_an_expired_lease(transactional_db, tmp_path):
    s = Scenario()
    item_id = s.authorize()
    s.offer(item_id, s.w1)
    s.accept(item_id, s.w1)
    s.w1.ok("work.start", {"leaseSeconds": 1}, workItemId=item_id, ownershipEpoch=1)

    with celery_worker(tmp_path, "--beat", "--schedule", str(tmp_path / "beat"),
                       REDIS_URL=celery_broker(), MW_SWEEP_INTERVAL_SECONDS="1") as worker:
        wait_until(lambda: s.item(item_id)["lease"] is None, 20, "sweep", process=worker,
                   logs=[tmp_path / "celery.log"])

    expired = Event.objects.filter(group_id=s.world.group.id, type="lease.expired")
    assert list(expired.values_list("actor", "work_item_id")) == [("system", item_id)]
    assert not Event.objects.filter(group_id=s.world.group.id,
                                    type="work.ownership_expired").exists()
    assert s.item(item_id)["owner"] == s.w1.name  # recorded, but no longer live
    assert not owner_is_live(s, item_id)
    assert verify_group(s.world.group.id) == []


def test_a_large_group_is_set_up_in_slices_and_swept_in_chunks_into_one_chain(db, settings,
                                                                              monkeypatch):
    """Hundreds of events of one Group: the set-up (pipeline.submit_system) writes them in
    several statement slices of one transaction, and the sweep (prepare_system, then
    submit_prepared: COPY and row-by-row patches, db.Many) in several transactions of
    MW_SWEEP_GROUP_CHUNK WorkItems; still one gapless chain that verifies."""
    from apps.bench import sweep_load as bench
    from apps.ledger import pipeline

    monkeypatch.setattr(pipeline, "SYSTEM_SLICE", 64)
    settings.MW_SWEEP_GROUP_CHUNK = 64
    (group_id,) = bench.prepare("t", 150, 1, now() - timedelta(hours=1))
    head = Group.objects.get(id=group_id).head_sequence
    assert head == 1 + 3 * 150  # mission.created; authorized, accepted, started per item

    result = sweeper.sweep()

    assert counted(result) == {**NOTHING, "expiredLeases": 150}
    assert result["groups"] == 1
    setup = Event.objects.filter(group_id=group_id, sequence__lte=head)
    swept = Event.objects.filter(group_id=group_id, sequence__gt=head)
    assert setup.values("command_id").distinct().count() == 8  # ceil(451 / 64) slices
    assert swept.values("command_id").distinct().count() == 3  # 64 + 64 + 22 items
    assert swept.count() == swept.filter(actor="system", type="lease.expired").count() == 150
    assert verify_group(group_id) == []
    assert sweeper.due(now(), 1000) == []


@pytest.mark.slow
def test_the_in_process_sweeper_of_the_embedded_mode_sweeps_and_stops(transactional_db):
    s = Scenario()
    item_id = s.authorize()
    s.offer(item_id, s.w1)
    s.accept(item_id, s.w1)
    s.w1.ok("work.start", {"leaseSeconds": 1}, workItemId=item_id, ownershipEpoch=1)

    background = sweeper.InProcessSweeper(interval=0.2).start()
    try:
        wait_until(lambda: s.item(item_id)["lease"] is None, 10, "sweep", every=0.1)
    finally:
        background.stop()
    assert not background._thread.is_alive()
    assert verify_group(s.world.group.id) == []


def test_a_failed_item_is_offered_again_once_its_backoff_ran_out(s, clock):
    mission_id = s.c.ok("mission.create", {
        "title": "auto", "ownerId": s.owner.principal, "coordinatorId": s.c.principal,
        "autoDispatch": True})[0]["missionId"]
    item_id = s.c.ok("work.authorize", {"missionId": mission_id, "contract": contract()})[0][
        "workItemId"]
    s.offer(item_id, s.w1, s.w2)
    s.accept(item_id, s.w1)
    s.start(item_id, s.w1)
    failed = s.w1.ok("work.fail", {"evidence": [evidence(["ac1"], result="tool crashed")]},
                     **s.lease_fields(item_id))[-1]
    retry_at = parse_time(failed["data"]["retryAt"])
    head = s.world.head

    later(clock, (retry_at - now()).total_seconds() - 1)
    assert counted(sweeper.sweep()) == NOTHING
    later(clock, 1)
    assert counted(sweeper.sweep()) == {**NOTHING, "redispatched": 1}

    (offered,) = events_after(s, head)
    assert (offered["type"], offered["actor"]) == ("work.offered", "system")
    assert s.item(item_id)["state"] == "offered"
    assert counted(sweeper.sweep()) == NOTHING
    assert verify_group(s.world.group.id) == []
