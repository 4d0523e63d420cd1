"""Issue 24 on PostgreSQL through HTTP, time frozen with time_machine (tick=False) and moved
by hand, except the race, which runs real threads at the real time.

- A missed start-by deadline is an attempt (§11.4): under `autoDispatch` a Worker that
  accepts and never starts gets the item again only after the contract's backoff, and
  once `retry.maxAttempts` is spent the item ends `failed`, exhausted, never re-offered.
- A new session never hands back a lease past its expiry (§11.3, §11.5): it is closed as
  expired, as the sweeper closes it, and not returned to `queued` for its old owner.
- Exclusive work is offered sequentially, highest-ranked eligible worker first (§10.3).
"""

import json
import time
from datetime import timedelta

import pytest
from django.test import Client

from apps.ledger.models import Event
from apps.ledger.verify import verify_group
from apps.work import sweeper
from mission_weave.protocol.canonical import sign
from mission_weave.protocol.timefmt import format_time, parse_time
from tests.integration.test_races import race
from tests.integration.test_sweeper_races import check_invariants
from tests.support import Scenario, assert_error, events_after, later, now

RETRY = {"maxAttempts": 2, "backoff": {"strategy": "fixed", "initialSeconds": 30,
                                       "maxSeconds": 30}}


def counted(result: dict) -> dict:
    return {k: result[k] for k in ("expiredLeases", "expiredOwnerships", "redispatched",
                                   "failed")}


def auto_item(s: Scenario, **contract_overrides) -> str:
    mission_id = s.c.ok("mission.create", {
        "title": "auto", "ownerId": s.owner.principal, "coordinatorId": s.c.principal,
        "autoDispatch": True})[0]["missionId"]
    s.mission_id = mission_id
    return s.authorize(**contract_overrides)


def worker_named(s: Scenario, name: str):
    return next(w for w in (s.w1, s.w2) if w.name == name)


# --- 1. start-by misses are attempts --------------------------------------------------------------

@pytest.fixture
def s(db, clock):
    return Scenario()


def test_workers_that_never_start_use_up_the_attempts_then_the_item_fails(s, clock):
    item_id = auto_item(s, retry=RETRY)
    s.offer(item_id, s.w1)
    accepted = s.accept(item_id, s.w1)
    head = s.world.head

    later(clock, (parse_time(accepted["startBy"]) - now()).total_seconds())
    assert counted(sweeper.sweep()) == {"expiredLeases": 0, "expiredOwnerships": 1,
                                        "redispatched": 0, "failed": 1}
    fenced, failed = events_after(s, head)
    assert (fenced["data"]["reason"], fenced["data"]["attempt"]) == ("start_by", 1)
    assert (failed["actor"], failed["data"]["reason"], failed["data"]["attempt"]) == (
        "system", "start-by deadline missed", 1)
    retry_at = parse_time(failed["data"]["retryAt"])
    assert (retry_at - now()).total_seconds() == 30  # the contract's backoff
    assert s.item(item_id)["attempts"] == 1

    later(clock, 29)
    assert counted(sweeper.sweep())["redispatched"] == 0  # not before the backoff ends
    later(clock, 1)
    assert counted(sweeper.sweep())["redispatched"] == 1
    taker = worker_named(s, s.item(item_id)["offers"][-1]["agentId"])
    accepted = s.accept(item_id, taker)
    assert accepted["ownershipEpoch"] == 2
    head = s.world.head

    later(clock, (parse_time(accepted["startBy"]) - now()).total_seconds())
    assert counted(sweeper.sweep()) == {"expiredLeases": 0, "expiredOwnerships": 1,
                                        "redispatched": 0, "failed": 1}
    _, failed = events_after(s, head)
    data = failed["data"]
    assert (data["attempt"], data["retryAt"], data["exhausted"], data["exhaustedBy"]) == (
        2, None, True, "attempts")
    assert "did not start" in data["evidence"][0]["result"]
    item = s.item(item_id)
    assert (item["state"], item["owner"], item["attempts"]) == ("failed", None, 2)

    later(clock, 3600)
    assert set(counted(sweeper.sweep()).values()) == {0}
    assert s.item(item_id)["state"] == "failed"
    assert verify_group(s.world.group.id) == []  # the log replays to the projections


def test_a_coordinators_offer_past_a_missed_start_by_counts_the_attempt(s, clock):
    item_id = s.authorize(retry=RETRY)
    s.offer(item_id, s.w1)
    accepted = s.accept(item_id, s.w1)
    later(clock, (parse_time(accepted["startBy"]) - now()).total_seconds())

    fenced, _offered = s.offer(item_id, s.w2)  # before any sweep

    assert (fenced["data"]["reason"], fenced["data"]["attempt"]) == ("start_by", 1)
    assert s.item(item_id)["attempts"] == 1
    s.accept(item_id, s.w2)
    assert s.start(item_id, s.w2)["attempt"] == 2
    assert verify_group(s.world.group.id) == []


# --- 2. a reconnection never hands back an expired lease -----------------------------------------

@pytest.mark.parametrize("auto", [False, True])
def test_a_reconnection_does_not_hand_back_a_lease_past_its_expiry(s, clock, auto):
    item_id = auto_item(s) if auto else s.authorize()
    s.offer(item_id, s.w1)
    s.accept(item_id, s.w1)
    started = s.start(item_id, s.w1)
    head = s.world.head

    later(clock, (parse_time(started["expiresAt"]) - now()).total_seconds() + 5)
    assert s.w1.open_session().status_code == 201  # no sweep: the reconnection closes it

    events = events_after(s, head)
    expected = ["lease.expired"] + (["work.ownership_expired", "work.failed"] if auto else [])
    assert [e["type"] for e in events] == expected  # no lease.revoked
    assert events[0]["data"] == {"leaseId": started["leaseId"], "reason": "timeout"}
    item = s.item(item_id)
    assert item["state"] == ("failed" if auto else "active")
    assert item["lease"] is None and item["startBy"] is None
    refused = s.w1.send("work.start", {}, workItemId=item_id, ownershipEpoch=1)
    assert refused.json()["error"]["code"] in ("STALE_OWNERSHIP", "TRANSITION_NOT_PERMITTED")
    # A live lease is still revoked and handed back to its owner, as before.
    live_id, _ = s.running(s.w1)
    assert s.w1.open_session().status_code == 201
    assert s.item(live_id)["state"] == "queued"
    assert verify_group(s.world.group.id) == []


# --- 3. exclusive work ------------------------------------------------------------------------

def test_exclusive_work_is_never_offered_to_an_urgent_set(s):
    item_id = s.authorize(exclusive=True)
    head = s.world.head

    response = s.c.send("work.offer", {"candidates": [s.w1.name, s.w2.name], "mode": "urgent",
                                       "expiresAt": format_time(now() + timedelta(seconds=600))},
                        workItemId=item_id)

    error = assert_error(response, 400, "VALIDATION_ERROR")
    assert error["details"]["path"] == "body.mode"
    assert "exclusive work is offered sequentially" in error["message"]
    assert s.world.head == head


def test_exclusive_work_goes_first_to_the_highest_ranked_named_worker(s):
    item_id = s.authorize(exclusive=True)
    # A fresh Presence report ranks w2 before w1, whose availability is unknown.
    response = s.w2.client.post("/api/v1/presence", json.dumps(
        {"availableSlots": 2, "status": "available"}), content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {s.w2.token}")
    assert response.status_code == 200

    (offered,) = s.offer(item_id, s.w1, s.w2)

    assert [o["agentId"] for o in offered["data"]["offers"]] == [s.w2.name]
    assert offered["data"]["pendingCandidates"] == [s.w1.name]
    plain = s.authorize()
    (in_order,) = s.offer(plain, s.w1, s.w2)  # not exclusive: the Coordinator's order
    assert [o["agentId"] for o in in_order["data"]["offers"]] == [s.w1.name]


# --- the race: a reconnection against the sweep, real threads ----------------------------------

def reconnect(worker):
    request = {"agentId": worker.name, "keyId": worker.key_id, "nonce": f"n-{time.time_ns()}",
               "issuedAt": format_time(now())}
    response = Client().post("/api/v1/sessions", sign(request, worker.key, worker.key_id),
                             content_type="application/json")
    assert response.status_code == 201, response.json()
    return response.json()


def after(delay: float, call):
    def delayed():
        time.sleep(delay)
        return call()
    return delayed


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("auto", [False, True])
@pytest.mark.parametrize("head_start", ["none", "sweep", "session"])
def test_a_reconnection_racing_the_sweep_expires_each_lease_once_and_revokes_none(
        auto, head_start):
    s = Scenario()
    items = []
    for _ in range(4):
        item_id = auto_item(s) if auto else s.authorize()
        s.offer(item_id, s.w1)
        s.accept(item_id, s.w1)
        s.w1.ok("work.start", {"leaseSeconds": 1}, workItemId=item_id, ownershipEpoch=1)
        items.append(item_id)
    time.sleep(1.2)  # every lease is past its expiry, none swept yet
    # Released together; one side may get a head start so that both orders happen.
    sweep_delay = 0.3 if head_start == "session" else 0
    session_delay = 0.3 if head_start == "sweep" else 0

    race([after(sweep_delay, sweeper.sweep), after(session_delay, lambda: reconnect(s.w1))])
    sweeper.sweep()  # a sweep that found the Group held by the session comes again

    for item_id in items:
        types = list(Event.objects.filter(group_id=s.world.group.id, work_item_id=item_id)
                     .order_by("sequence").values_list("type", flat=True))
        assert types.count("lease.expired") == 1, types
        assert "lease.revoked" not in types
        assert types.count("work.failed") == (1 if auto else 0), types
    check_invariants(s.world.group.id)
