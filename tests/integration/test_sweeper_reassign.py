"""Nothing stranded after a lease timeout (§11.5), on PostgreSQL through HTTP, time
frozen with time_machine (tick=False) and moved by hand.

- After the sweeper's `lease.expired` the item has no live owner for placement: it no
  longer counts against its former owner's maxConcurrency (the capacity backstop on
  `work.accept_offer`) and may be offered again at once.
- Under `autoDispatch` the sweeper ends the timed-out attempt in the same transaction: the
  expired owner fenced (`work.ownership_expired`), then `work.failed` by the server with
  system Evidence and a `retryAt` (the contract's backoff); once it is due the item is
  offered to the best-ranked worker, resuming from the latest checkpoint. The same for a
  missed start-by deadline, which is an attempt too.
- A timed-out attempt counts against `retry.maxAttempts` as a failure does: with the
  attempts spent the item ends `failed`, exhausted, and is not offered again.
- The sweeper's automatic dispatch loads every dependency it checks (§10.4): an item
  waiting on a dependency is not offered until the dependency allows it.
"""

import json
from datetime import timedelta

import pytest

from apps.ledger.verify import verify_group
from apps.work import sweeper
from mission_weave.protocol.timefmt import format_time, parse_time
from tests.support import Scenario, contract, events_after, evidence, later, now

SUMMARIZER = {"version": "1", "capabilities": [{"id": "summarize", "version": "1"}]}


@pytest.fixture
def s(db, clock):
    return Scenario()


def counted(result: dict) -> dict:
    return {k: result[k] for k in ("expiredLeases", "expiredOwnerships", "redispatched",
                                   "failed")}


def auto_mission(s: Scenario) -> str:
    return s.c.ok("mission.create", {
        "title": "auto", "ownerId": s.owner.principal, "coordinatorId": s.c.principal,
        "autoDispatch": True})[0]["missionId"]


def authorize(s: Scenario, mission_id: str, **contract_overrides) -> str:
    return s.c.ok("work.authorize", {"missionId": mission_id,
                                     "contract": contract(**contract_overrides)})[0][
        "workItemId"]


def report_presence(worker, **body):
    response = worker.client.post("/api/v1/presence", json.dumps(body),
                                  content_type="application/json",
                                  HTTP_AUTHORIZATION=f"Bearer {worker.token}")
    assert response.status_code == 200, response.json()


def worker_named(s: Scenario, name: str):
    return next(w for w in (s.w1, s.w2) if w.name == name)


# --- capacity and re-offering without autoDispatch ---------------------------------------------

def test_a_timed_out_item_no_longer_counts_against_its_former_owners_capacity(s, clock):
    solo = s.world.agent("solo-" + s.world.group.slug, card={**SUMMARIZER, "maxConcurrency": 1})
    stuck, _ = s.running(solo)
    waiting = s.authorize()
    s.offer(waiting, solo)
    refused = solo.send("work.accept_offer", {"contractRevision": 1}, workItemId=waiting)
    assert refused.json()["error"]["details"] == {"reason": "capacity", "maxConcurrency": 1,
                                                   "current": 1}

    later(clock, 300)
    assert counted(sweeper.sweep()) == {"expiredLeases": 1, "expiredOwnerships": 0,
                                        "redispatched": 0, "failed": 0}

    # Its lease timed out: no live owner any more, so solo has room again ...
    s.offer(waiting, solo)
    assert s.accept(waiting, solo)["ownershipEpoch"] == 1
    # ... and the timed-out item may be offered at once, its expired owner fenced first.
    fenced, offered = s.offer(stuck, s.w2)
    assert (fenced["type"], fenced["data"]["reason"]) == ("work.ownership_expired", "lease")
    assert offered["type"] == "work.offered"
    assert s.accept(stuck, s.w2)["ownershipEpoch"] == 2
    assert verify_group(s.world.group.id) == []


# --- reassignment under autoDispatch -------------------------------------------------------------

def test_under_auto_dispatch_a_lease_timeout_is_reassigned_from_the_latest_checkpoint(s, clock):
    item_id = authorize(s, auto_mission(s))
    s.offer(item_id, s.w1)
    s.accept(item_id, s.w1)
    s.start(item_id, s.w1)
    progress = {"phase": "drafting", "milestones": ["outline"]}
    s.w1.ok("work.checkpoint", {"progress": progress}, **s.lease_fields(item_id))
    resumed = s.start(item_id, s.w1)
    late = s.lease_fields(item_id)
    head = s.world.head

    later(clock, (parse_time(resumed["expiresAt"]) - now()).total_seconds())
    result = sweeper.sweep()

    assert counted(result) == {"expiredLeases": 1, "expiredOwnerships": 1, "redispatched": 0,
                               "failed": 1}
    expired, fenced, failed = events_after(s, head)
    assert {e["actor"] for e in (expired, fenced, failed)} == {"system"}
    assert expired["commandId"] == fenced["commandId"] == failed["commandId"]  # one append
    assert (expired["type"], expired["data"]) == (
        "lease.expired", {"leaseId": resumed["leaseId"], "reason": "timeout"})
    assert (fenced["type"], fenced["data"]) == ("work.ownership_expired", {
        "agentId": s.w1.name, "ownershipEpoch": 1, "reason": "lease"})
    # The attempt ended like a failure: offered again after the backoff (10 s after attempt 1).
    assert failed["type"] == "work.failed"
    assert (failed["data"]["by"], failed["data"]["reason"], failed["data"]["attempt"]) == (
        "system", "lease timeout", 1)
    assert (failed["data"]["retryAt"], failed["data"]["exhausted"]) == (
        format_time(now() + timedelta(seconds=10)), False)
    item = s.item(item_id)
    assert (item["state"], item["owner"], item["lastCheckpoint"]["progress"]) == (
        "failed", None, progress)

    later(clock, 9)
    assert counted(sweeper.sweep())["redispatched"] == 0
    later(clock, 1)
    assert counted(sweeper.sweep())["redispatched"] == 1
    offered = s.item(item_id)["offers"]
    # w1's timed-out attempt counts as a failure in its reliability: w2 ranks first.
    assert [o["agentId"] for o in offered if o["status"] == "live"] == [s.w2.name]
    (reoffer,) = events_after(s, s.world.head - 1)
    assert reoffer["data"]["autoDispatch"]["after"] == "retry"
    assert reoffer["data"]["autoDispatch"]["resumeFrom"]["progress"] == progress

    # The new owner takes it under a higher epoch, as the next attempt.
    assert s.accept(item_id, s.w2)["ownershipEpoch"] == 2
    started = s.start(item_id, s.w2)
    assert (started["ownershipEpoch"], started["attempt"], started["resumed"]) == (2, 2, False)
    # The old owner's late renewal is refused, kept for audit, and changes nothing.
    before = s.world.head
    response = s.w1.send("lease.renew", {}, **late)
    assert response.json()["error"]["code"] == "STALE_OWNERSHIP"
    assert s.world.head == before
    audit = s.c.get(f"work-items/{item_id}/audit").json()
    assert [r["type"] for r in audit["refusedCommands"]] == ["lease.renew"]
    assert counted(sweeper.sweep()) == dict.fromkeys(counted(result), 0)
    assert verify_group(s.world.group.id) == []


def test_under_auto_dispatch_a_missed_start_by_is_an_attempt_and_waits_its_backoff(s, clock):
    item_id = authorize(s, auto_mission(s))
    s.offer(item_id, s.w1)
    accepted = s.accept(item_id, s.w1)
    head = s.world.head

    later(clock, (parse_time(accepted["startBy"]) - now()).total_seconds())
    assert counted(sweeper.sweep()) == {"expiredLeases": 0, "expiredOwnerships": 1,
                                        "redispatched": 0, "failed": 1}

    fenced, failed = events_after(s, head)
    assert (fenced["type"], fenced["data"]["reason"], fenced["data"]["attempt"]) == (
        "work.ownership_expired", "start_by", 1)
    assert (failed["data"]["reason"], failed["data"]["attempt"]) == (
        "start-by deadline missed", 1)
    assert failed["data"]["retryAt"] == format_time(now() + timedelta(seconds=10))
    late = s.w1.send("work.start", {}, workItemId=item_id, ownershipEpoch=1)
    assert late.json()["error"]["code"] in ("STALE_OWNERSHIP", "TRANSITION_NOT_PERMITTED")

    later(clock, 10)
    assert counted(sweeper.sweep())["redispatched"] == 1
    assert s.accept(item_id, s.w2)["ownershipEpoch"] == 2
    assert verify_group(s.world.group.id) == []


def test_timed_out_attempts_count_against_max_attempts_and_then_the_item_fails(s, clock):
    retry = {"maxAttempts": 2, "backoff": {"strategy": "fixed", "initialSeconds": 30,
                                           "maxSeconds": 30}}
    item_id = authorize(s, auto_mission(s), retry=retry)
    s.offer(item_id, s.w1)
    s.accept(item_id, s.w1)
    s.start(item_id, s.w1)

    later(clock, 300)  # the first attempt times out: offered again after 30 s
    assert counted(sweeper.sweep())["failed"] == 1
    later(clock, 30)
    assert counted(sweeper.sweep())["redispatched"] == 1
    second = worker_named(s, s.item(item_id)["offers"][-1]["agentId"])
    s.accept(item_id, second)
    assert s.start(item_id, second)["attempt"] == 2
    head = s.world.head

    later(clock, 300)  # the second, last, attempt times out: failed, not offered again
    assert counted(sweeper.sweep()) == {"expiredLeases": 1, "expiredOwnerships": 1,
                                        "redispatched": 0, "failed": 1}

    expired, _, failed = events_after(s, head)
    assert (expired["type"], failed["type"], failed["actor"]) == (
        "lease.expired", "work.failed", "system")
    data = failed["data"]
    assert (data["by"], data["reason"], data["attempt"]) == ("system", "lease timeout", 2)
    assert (data["retryAt"], data["exhausted"], data["exhaustedBy"]) == (None, True, "attempts")
    (proof,) = data["evidence"]
    assert (proof["producer"], proof["method"]) == ("system", "lease-timeout")
    assert expired["data"]["leaseId"] in proof["result"]
    item = s.item(item_id)
    assert (item["state"], item["owner"]) == ("failed", None)
    later(clock, 3600)
    assert counted(sweeper.sweep())["redispatched"] == 0
    # The Coordinator sees it failed and may still decide to try again (§10.2).
    assert s.offer(item_id, s.w1)[-1]["type"] == "work.offered"
    assert verify_group(s.world.group.id) == []


def test_a_timed_out_item_nobody_may_take_when_due_is_retried_once_someone_may(s, clock):
    item_id = authorize(s, auto_mission(s))
    s.offer(item_id, s.w1)
    s.accept(item_id, s.w1)
    s.start(item_id, s.w1)
    head = s.world.head

    later(clock, 300)
    report_presence(s.w1, availableSlots=0, status="offline")  # fresh: younger than the TTL
    report_presence(s.w2, availableSlots=0, status="offline")
    assert counted(sweeper.sweep()) == {"expiredLeases": 1, "expiredOwnerships": 1,
                                        "redispatched": 0, "failed": 1}

    *_, failed = events_after(s, head)
    assert (failed["data"]["exhausted"], failed["data"]["by"]) == (False, "system")
    retry_at = parse_time(failed["data"]["retryAt"])
    later(clock, (retry_at - now()).total_seconds())
    assert counted(sweeper.sweep())["redispatched"] == 0  # nobody may take it yet
    assert s.item(item_id)["state"] == "failed"
    report_presence(s.w2, availableSlots=1, status="available")
    assert counted(sweeper.sweep())["redispatched"] == 1
    assert [o["agentId"] for o in s.item(item_id)["offers"] if o["status"] == "live"] == [
        s.w2.name]
    assert verify_group(s.world.group.id) == []


# --- dependencies: the sweeper loads every one it checks (§10.4) ------------------------------

def test_automatic_dispatch_waits_for_a_dependency_it_had_not_loaded(s, clock):
    mission_id = auto_mission(s)
    item_id = authorize(s, mission_id)
    s.offer(item_id, s.w1)
    s.accept(item_id, s.w1)
    s.start(item_id, s.w1)
    failed = s.w1.ok("work.fail", {"evidence": [evidence(["ac1"], producer=s.w1.principal)]},
                     **s.lease_fields(item_id))[-1]["data"]
    # Before its retry, the Coordinator makes it wait for another WorkItem.
    blocker = authorize(s, mission_id)
    s.c.ok("work.revise_contract", {"contract": contract(
        dependencies={"workItems": [blocker], "policy": "all_terminal"})}, workItemId=item_id)

    later(clock, (parse_time(failed["retryAt"]) - now()).total_seconds())
    head = s.world.head
    assert counted(sweeper.sweep())["redispatched"] == 0
    assert s.world.head == head
    assert s.item(item_id)["state"] == "failed"

    s.c.ok("work.cancel", {"reason": "not needed after all"}, workItemId=blocker)
    assert counted(sweeper.sweep())["redispatched"] == 1
    assert s.item(item_id)["state"] == "offered"
    assert verify_group(s.world.group.id) == []
