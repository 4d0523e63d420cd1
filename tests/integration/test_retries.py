"""Retries (§11.4) and cooperative preemption (§11.3) through HTTP. Time moves with
time_machine (tick=False); every rejection leaves the Group's head where it was.

The retry budgets (attempts, backoff, deadline, cost) limit AUTOMATIC retries only: the
sweeper's automatic dispatch under `autoDispatch`. A Coordinator's explicit `work.offer`
of a failed item passes at any time (§10.2: failed returns control to the Coordinator)."""

from datetime import timedelta

import pytest

from apps.ledger.verify import verify_group
from apps.work import sweeper
from mission_weave.protocol.idempotency import idempotency_key
from mission_weave.protocol.timefmt import format_time, parse_time
from tests.support import Scenario, contract, evidence, later, now

RETRY = {"maxAttempts": 3, "backoff": {"strategy": "exponential", "initialSeconds": 10,
                                       "maxSeconds": 300, "multiplier": 2}}


@pytest.fixture
def s(db, clock):
    return Scenario()


def fail(s, item_id, **body) -> dict:
    """The lease holder reports a failure; returns the work.failed event's data."""
    holder = s.w1 if s.item(item_id)["owner"] == s.w1.name else s.w2
    events = holder.ok("work.fail", {"evidence": [evidence(["ac1"], producer=holder.principal,
                                                           result="tool outage")],
                                     "reason": "outage", **body}, **s.lease_fields(item_id))
    assert [e["type"] for e in events] == ["lease.revoked", "work.failed"]
    return events[-1]["data"]


def auto_running(s, **contract_overrides) -> tuple[str, dict]:
    """An item of a Mission with automatic dispatch, offered to w1, accepted, started."""
    mission_id = s.c.ok("mission.create", {
        "title": "auto", "ownerId": s.owner.principal, "coordinatorId": s.c.principal,
        "autoDispatch": True})[0]["missionId"]
    item_id = s.c.ok("work.authorize", {"missionId": mission_id,
                                        "contract": contract(**contract_overrides)})[0][
        "workItemId"]
    s.offer(item_id, s.w1)
    s.accept(item_id, s.w1)
    return item_id, s.start(item_id, s.w1)


def swept_nothing(s) -> None:
    head = s.world.head
    result = sweeper.sweep()
    assert (result["redispatched"], s.world.head) == (0, head), result


def swept_retry(s, item_id) -> dict:
    """The sweeper offers the failed item again: its work.offered data."""
    head = s.world.head
    assert sweeper.sweep()["redispatched"] == 1
    (offered,) = s.c.get(f"events?after={head}").json()["events"]
    assert (offered["type"], offered["actor"], offered["workItemId"]) == (
        "work.offered", "system", item_id)
    assert offered["data"]["autoDispatch"]["after"] == "retry"
    return offered["data"]


def explicit_offer(s, item_id) -> list:
    """The Coordinator offers the failed item to w1 itself: allowed, whatever the budget."""
    events = s.c.ok("work.offer", {"candidates": [s.w1.name], "mode": "sequential",
                                   "expiresAt": format_time(now() + timedelta(seconds=600))},
                    workItemId=item_id)
    assert events[-1]["type"] == "work.offered"
    assert s.item(item_id)["state"] == "offered"
    return events


def retry(s, item_id, offered: dict | None = None) -> dict:
    """The addressed worker (w1 unless `offered` names another) accepts and starts: the
    started event's data."""
    name = offered["offers"][0]["agentId"] if offered else s.w1.name
    worker = s.w1 if name == s.w1.name else s.w2
    s.accept(item_id, worker)
    return s.start(item_id, worker)


def test_automatic_retries_wait_out_the_backoff_then_stop_when_exhausted(s, clock):
    item_id, first = auto_running(s, retry=RETRY)

    failed = fail(s, item_id)
    assert failed["retryAt"] == format_time(now() + timedelta(seconds=10))
    assert (failed["exhausted"], failed["attempt"]) == (False, 1)
    assert s.item(item_id)["state"] == "failed"

    later(clock, 9)
    swept_nothing(s)
    later(clock, 1)
    second = retry(s, item_id, swept_retry(s, item_id))
    assert (second["attempt"], second["ownershipEpoch"]) == (2, first["ownershipEpoch"] + 1)
    assert second["idempotencyKey"] != first["idempotencyKey"]

    failed = fail(s, item_id)
    assert failed["retryAt"] == format_time(now() + timedelta(seconds=20))
    later(clock, 19)
    swept_nothing(s)
    later(clock, 1)
    third = retry(s, item_id, swept_retry(s, item_id))
    assert third["attempt"] == 3

    failed = fail(s, item_id)
    assert failed["retryAt"] is None
    assert (failed["exhausted"], failed["exhaustedBy"]) == (True, "attempts")
    assert failed["evidence"][0]["result"] == "tool outage"
    later(clock, 3600)
    swept_nothing(s)
    assert s.item(item_id)["state"] == "failed"
    assert verify_group(s.world.group.id) == []


def test_a_coordinators_offer_of_a_failed_item_passes_within_the_backoff(s, clock):
    item_id, first = s.running(retry=RETRY)
    failed = fail(s, item_id)
    later(clock, 1)  # nine seconds of backoff left

    explicit_offer(s, item_id)

    second = retry(s, item_id)
    assert (second["attempt"], second["ownershipEpoch"]) == (2, first["ownershipEpoch"] + 1)
    assert now() < parse_time(failed["retryAt"])
    assert verify_group(s.world.group.id) == []


def test_a_coordinators_offer_passes_after_the_attempts_are_spent(s, clock):
    item_id, _ = s.running(retry={**RETRY, "maxAttempts": 1})
    failed = fail(s, item_id)
    assert (failed["exhausted"], failed["exhaustedBy"]) == (True, "attempts")

    explicit_offer(s, item_id)

    assert retry(s, item_id)["attempt"] == 2  # beyond maxAttempts: the Coordinator decided
    # Its failure is exhausted again: still no automatic retry after it.
    assert fail(s, item_id)["exhaustedBy"] == "attempts"
    assert verify_group(s.world.group.id) == []


def test_every_started_attempt_exposes_its_idempotency_key(s):
    item_id, data = s.running(retry=RETRY)
    item = s.item(item_id)

    assert data["idempotencyKey"] == idempotency_key(
        item["missionId"], item_id, item["ownershipEpoch"], "attempt-1")


def test_a_permanent_failure_is_never_retried_automatically_but_a_coordinator_may(s, clock):
    item_id, _ = auto_running(s, retry=RETRY)

    failed = fail(s, item_id, permanent=True)
    later(clock, 3600)

    assert (failed["retryAt"], failed["exhausted"], failed["exhaustedBy"]) == (
        None, True, "permanent")
    swept_nothing(s)
    explicit_offer(s, item_id)
    assert verify_group(s.world.group.id) == []


def test_no_automatic_retry_past_the_retry_deadline(s, clock):
    deadline = format_time(now() + timedelta(seconds=60))
    item_id, _ = auto_running(s, retry={**RETRY, "deadline": deadline})

    failed = fail(s, item_id)
    later(clock, 60)

    assert failed["retryAt"] is not None
    swept_nothing(s)
    explicit_offer(s, item_id)  # the Coordinator may still decide to try again


def test_a_coordinators_failure_counts_against_the_same_budget(s, clock):
    item_id, _ = auto_running(s, retry={**RETRY, "maxAttempts": 1})

    events = s.c.ok("work.fail", {"evidence": [evidence(["ac1"], producer=s.c.principal)]},
                    workItemId=item_id)

    assert events[-1]["data"]["exhaustedBy"] == "attempts"
    later(clock, 3600)
    swept_nothing(s)


def test_a_resume_after_a_checkpoint_is_the_same_attempt(s):
    item_id, first = s.running(retry=RETRY)
    s.w1.ok("work.checkpoint", {"progress": {"phase": "drafting"}}, **s.lease_fields(item_id))

    resumed = s.start(item_id)

    assert (resumed["attempt"], resumed["resumed"]) == (1, True)
    assert resumed["idempotencyKey"] == first["idempotencyKey"]
    assert resumed["leaseId"] != first["leaseId"]


# --- cooperative preemption (§11.3) ---------------------------------------------------------

def test_preemption_is_cooperative_and_the_checkpoint_requeues_under_the_same_owner(s, clock):
    item_id, started = s.running()
    fields = s.lease_fields(item_id)

    (requested,) = s.c.ok("work.request_preemption", {"reason": "a critical Mission"},
                          workItemId=item_id)

    assert requested["type"] == "work.preemption_requested"
    assert requested["data"]["leaseId"] == started["leaseId"]
    assert requested["data"]["agentId"] == s.w1.name
    assert requested["data"]["reason"] == "a critical Mission"
    # Nothing is forced: the item stays active and the lease keeps working.
    later(clock, 30)
    assert s.item(item_id)["state"] == "active"
    assert s.item(item_id)["lease"]["id"] == started["leaseId"]
    s.w1.ok("work.progress", {"phase": "reaching a safe point"}, **fields)
    s.w1.ok("lease.renew", {}, **fields)

    (checkpointed,) = s.w1.ok("work.checkpoint", {"progress": {"phase": "paused"}}, **fields)

    item = s.item(item_id)
    assert checkpointed["type"] == "work.checkpointed"
    assert item["state"] == "queued"
    assert item["owner"] == s.w1.name
    assert item["ownershipEpoch"] == started["ownershipEpoch"]
    assert item["lease"] is None
    assert verify_group(s.world.group.id) == []


def test_preemption_needs_a_live_lease(s):
    item_id, _ = s.running()
    s.w1.ok("work.checkpoint", {"progress": {"phase": "paused"}}, **s.lease_fields(item_id))
    head = s.world.head

    response = s.c.send("work.request_preemption", {"reason": "again"}, workItemId=item_id)

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "TRANSITION_NOT_PERMITTED"
    assert s.world.head == head
