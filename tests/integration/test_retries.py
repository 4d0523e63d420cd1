"""Retries (§11.4) and cooperative preemption (§11.3) through HTTP. Time moves with
time_machine (tick=False); every rejection leaves the Group's head where it was."""

from datetime import timedelta

import pytest

from apps.ledger.verify import verify_group
from mission_weave.protocol.idempotency import idempotency_key
from mission_weave.protocol.timefmt import format_time
from tests.support import Scenario, evidence, now

RETRY = {"maxAttempts": 3, "backoff": {"strategy": "exponential", "initialSeconds": 10,
                                       "maxSeconds": 300, "multiplier": 2}}


@pytest.fixture
def s(db, clock):
    return Scenario()


def later(clock, seconds: float) -> None:
    clock.shift(timedelta(seconds=seconds))


def fail(s, item_id, **body) -> dict:
    """The lease holder reports a failure; returns the work.failed event's data."""
    events = s.w1.ok("work.fail", {"evidence": [evidence(["ac1"], result="tool outage")],
                                   "reason": "outage", **body}, **s.lease_fields(item_id))
    assert [e["type"] for e in events] == ["lease.revoked", "work.failed"]
    return events[-1]["data"]


def refused_offer(s, item_id) -> dict:
    head = s.world.head
    response = s.c.send("work.offer", {"candidates": [s.w1.name], "mode": "sequential",
                                       "expiresAt": format_time(now() + timedelta(seconds=600))},
                        workItemId=item_id)
    assert response.status_code == 409, response.json()
    error = response.json()["error"]
    assert error["code"] == "BUDGET_EXCEEDED", error
    assert s.world.head == head, "a rejection must append nothing"
    return error["details"]


def retry(s, item_id) -> dict:
    """Offer again, accept, start: the started event's data."""
    s.offer(item_id)
    s.accept(item_id)
    return s.start(item_id)


def test_backoff_windows_then_exhaustion(s, clock):
    item_id, first = s.running(retry=RETRY)

    failed = fail(s, item_id)
    assert failed["retryAt"] == format_time(now() + timedelta(seconds=10))
    assert (failed["exhausted"], failed["attempt"]) == (False, 1)
    assert s.item(item_id)["state"] == "failed"

    later(clock, 9)
    assert refused_offer(s, item_id) == {"reason": "backoff", "attempts": 1, "maxAttempts": 3,
                                         "retryAt": failed["retryAt"]}
    later(clock, 1)
    second = retry(s, item_id)
    assert (second["attempt"], second["ownershipEpoch"]) == (2, first["ownershipEpoch"] + 1)
    assert second["idempotencyKey"] != first["idempotencyKey"]

    failed = fail(s, item_id)
    assert failed["retryAt"] == format_time(now() + timedelta(seconds=20))
    later(clock, 19)
    assert refused_offer(s, item_id)["reason"] == "backoff"
    later(clock, 1)
    third = retry(s, item_id)
    assert third["attempt"] == 3

    failed = fail(s, item_id)
    assert failed["retryAt"] is None
    assert (failed["exhausted"], failed["exhaustedBy"]) == (True, "attempts")
    assert failed["evidence"][0]["result"] == "tool outage"
    later(clock, 3600)
    assert refused_offer(s, item_id)["reason"] == "attempts"
    assert verify_group(s.world.group.id) == []


def test_every_started_attempt_exposes_its_idempotency_key(s):
    item_id, data = s.running(retry=RETRY)
    item = s.item(item_id)

    assert data["idempotencyKey"] == idempotency_key(
        item["missionId"], item_id, item["ownershipEpoch"], "attempt-1")


def test_a_permanent_failure_is_final(s, clock):
    item_id, _ = s.running(retry=RETRY)

    failed = fail(s, item_id, permanent=True)
    later(clock, 3600)

    assert (failed["retryAt"], failed["exhausted"], failed["exhaustedBy"]) == (
        None, True, "permanent")
    assert refused_offer(s, item_id)["reason"] == "permanent"


def test_no_retry_past_the_retry_deadline(s, clock):
    deadline = format_time(now() + timedelta(seconds=60))
    item_id, _ = s.running(retry={**RETRY, "deadline": deadline})

    failed = fail(s, item_id)
    later(clock, 60)

    assert failed["retryAt"] is not None
    details = refused_offer(s, item_id)
    assert (details["reason"], details["deadline"]) == ("deadline", deadline)


def test_a_coordinators_failure_counts_against_the_same_budget(s, clock):
    item_id, _ = s.running(retry={**RETRY, "maxAttempts": 1})

    events = s.c.ok("work.fail", {"evidence": [evidence(["ac1"], producer=s.c.principal)]},
                    workItemId=item_id)

    assert events[-1]["data"]["exhaustedBy"] == "attempts"
    assert refused_offer(s, item_id)["reason"] == "attempts"


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
