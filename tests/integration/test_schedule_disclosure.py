"""schedule.disclose through HTTP (PROTOCOL §2, seed §11.2): the owner of a queued or
active WorkItem publishes its disclosure; anyone else, any other state, or any body
that is not exactly the disclosure is refused and appends nothing."""

from datetime import timedelta

import pytest

from apps.ledger.verify import verify_group
from mission_weave.core import state
from mission_weave.protocol.timefmt import format_time
from mission_weave.sdk import scheduler
from mission_weave.sdk.disclosure import disclose
from tests.support import assert_error, now

pytestmark = pytest.mark.django_db


def body(**overrides) -> dict:
    start = now().replace(microsecond=0)
    disclosure = {"estimatedStart": {"from": format_time(start + timedelta(minutes=5)),
                                     "to": format_time(start + timedelta(minutes=20))},
                  "estimatedCompletion": format_time(start + timedelta(hours=1)),
                  "confidence": 0.7, "capacityStatus": "busy",
                  "calculatedAt": format_time(start)}
    disclosure.update(overrides)
    return disclosure


def test_the_owner_of_a_queued_item_discloses_and_the_event_carries_exactly_the_body(scenario):
    item_id = scenario.queued()
    disclosure = body()

    (event,) = scenario.w1.ok("schedule.disclose", disclosure, workItemId=item_id)

    assert event["type"] == "work.schedule_disclosed"
    assert event["data"] == disclosure
    assert event["actor"] == scenario.w1.principal
    assert event["workItemId"] == item_id
    assert scenario.item(item_id)["scheduleDisclosure"] == disclosure
    assert verify_group(scenario.world.group.id) == []


def test_the_owner_of_an_active_item_discloses_a_revised_estimate(scenario):
    item_id, _ = scenario.running()
    first, second = body(), body(confidence=0.9, capacityStatus="available")

    scenario.w1.ok("schedule.disclose", first, workItemId=item_id)
    scenario.w1.ok("schedule.disclose", second, workItemId=item_id)

    item = scenario.item(item_id)
    assert item["state"] == state.ACTIVE
    assert item["scheduleDisclosure"] == second
    assert verify_group(scenario.world.group.id) == []


def test_the_sdk_disclosure_is_accepted_as_it_is(scenario):
    item_id = scenario.queued()
    moment = now().replace(microsecond=0)
    slots = scheduler.declare_slots(1, 4)
    mine = scheduler.QueuedItem(group_id=scenario.world.group.id, work_item_id=item_id,
                                mission_id=scenario.mission_id, ownership_epoch=1,
                                enqueued_at=moment)
    outlook = scheduler.outlook(scenario.world.group.id, item_id, slots,
                                {scenario.world.group.id: [mine]}, {}, moment)

    (event,) = scenario.w1.ok("schedule.disclose", disclose(outlook), workItemId=item_id)

    assert event["data"]["capacityStatus"] == "available"


def test_another_worker_is_refused_and_nothing_is_appended(scenario):
    item_id = scenario.queued()
    head = scenario.world.head

    error = assert_error(scenario.w2.send("schedule.disclose", body(), workItemId=item_id), 403,
                         "FORBIDDEN")

    assert "owner" in error["message"]
    assert scenario.world.head == head
    assert scenario.item(item_id)["scheduleDisclosure"] is None


def test_a_coordinator_without_the_worker_role_is_refused(scenario):
    item_id = scenario.queued()
    head = scenario.world.head

    assert_error(scenario.c.send("schedule.disclose", body(), workItemId=item_id), 403,
                 "FORBIDDEN")
    assert scenario.world.head == head


def test_an_item_that_is_only_offered_has_no_schedule_to_disclose(scenario):
    item_id = scenario.authorize()
    scenario.offer(item_id)
    head = scenario.world.head

    assert_error(scenario.w1.send("schedule.disclose", body(), workItemId=item_id), 409,
                 "TRANSITION_NOT_PERMITTED")
    assert scenario.world.head == head


def test_a_stale_ownership_epoch_is_refused(scenario):
    item_id = scenario.queued()
    head = scenario.world.head

    assert_error(scenario.w1.send("schedule.disclose", body(), workItemId=item_id,
                                  ownershipEpoch=7), 409, "STALE_OWNERSHIP")
    assert scenario.world.head == head


BAD_BODIES = {
    "an unknown member": body(otherGroups=[{"groupId": "grp-x", "queued": 12}]),
    "an unknown member in the window": body(
        estimatedStart={**body()["estimatedStart"], "position": 3}),
    "a missing member": {k: v for k, v in body().items() if k != "confidence"},
    "a window without its end": body(estimatedStart={"from": body()["calculatedAt"]}),
    "confidence above one": body(confidence=1.5),
    "confidence as text": body(confidence="high"),
    "an unknown capacity status": body(capacityStatus="overloaded"),
    "a time without its offset": body(calculatedAt="2026-11-29T08:00:00"),
    "a window that ends before it starts": body(estimatedStart={
        "from": body()["estimatedStart"]["to"], "to": body()["estimatedStart"]["from"]}),
    "completion before the start": body(estimatedCompletion=body()["calculatedAt"]),
    "not an object": [],
}


@pytest.mark.parametrize("bad", BAD_BODIES.values(), ids=BAD_BODIES.keys())
def test_a_body_that_is_not_exactly_the_disclosure_is_refused(scenario, bad):
    item_id = scenario.queued()
    head = scenario.world.head

    error = assert_error(scenario.w1.send("schedule.disclose", bad, workItemId=item_id), 400,
                         "VALIDATION_ERROR")

    assert "body" in error["message"]
    assert scenario.world.head == head
    assert scenario.item(item_id)["scheduleDisclosure"] is None


def test_a_new_owner_starts_without_the_previous_owners_disclosure(scenario, clock):
    item_id = scenario.queued()
    scenario.w1.ok("schedule.disclose", body(), workItemId=item_id)
    scenario.c.ok("work.fail", {"evidence": [{
        "id": "ev-fail", "subject": f"workitem:{item_id}", "criteria": ["ac1"],
        "method": "coordinator-review", "result": "owner unresponsive",
        "producer": scenario.c.principal, "timestamp": format_time(now()), "artifacts": []}]},
        workItemId=item_id)
    clock.shift(timedelta(seconds=30))  # past the contract's retry backoff
    scenario.offer(item_id, scenario.w2)
    scenario.accept(item_id, scenario.w2)

    assert scenario.item(item_id)["scheduleDisclosure"] is None
    assert_error(scenario.w1.send("schedule.disclose", body(), workItemId=item_id), 403,
                 "FORBIDDEN")
    scenario.w2.ok("schedule.disclose", body(), workItemId=item_id)
    assert verify_group(scenario.world.group.id) == []
