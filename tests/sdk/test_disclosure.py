"""Scheduling disclosure (§11.2): the body's shape, its estimates, what counts as a
material change, and that nothing of another Group reaches it."""

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from types import MappingProxyType

from hypothesis import given
from hypothesis import strategies as st

from mission_weave.core.schemas import check_body
from mission_weave.protocol.timefmt import parse_time
from mission_weave.sdk import scheduler
from mission_weave.sdk.disclosure import (
    DISCLOSURE_KEYS,
    Outlook,
    disclose,
    is_material_change,
)
from mission_weave.sdk.scheduler import Assignment, GroupPolicy, QueuedItem, declare_slots

T0 = datetime(2026, 11, 29, 8, 0, 0, tzinfo=UTC)


def outlook(**fields) -> Outlook:
    values = dict(now=T0, position=0, group_share=Fraction(1), slot_free_at=(T0,),
                  durations=(100, 200, 300))
    values.update(fields)
    return Outlook(**values)


def at(text: str) -> datetime:
    return parse_time(text)


# --- the body ------------------------------------------------------------------------------

def test_the_body_has_exactly_the_protocol_members_and_passes_the_server_schema():
    body = disclose(outlook())

    assert set(body) == DISCLOSURE_KEYS
    assert set(body["estimatedStart"]) == {"from", "to"}
    check_body("schedule.disclose", body)  # raises on anything the server would refuse


def test_a_free_slot_and_first_place_start_now():
    body = disclose(outlook())

    assert body["estimatedStart"] == {"from": "2026-11-29T08:00:00Z",
                                      "to": "2026-11-29T08:00:00Z"}
    assert body["estimatedCompletion"] == "2026-11-29T08:03:20Z"  # now + the median run
    assert body["capacityStatus"] == "available"
    assert body["calculatedAt"] == "2026-11-29T08:00:00Z"


def test_behind_two_items_with_all_slots_busy_the_window_follows_the_durations():
    body = disclose(outlook(position=2, slot_free_at=(T0 + timedelta(seconds=60),)))

    # One slot frees at +60 s; two runs of 120 s (p10), 200 s (p50) or 280 s (p90) precede it.
    assert body["estimatedStart"] == {"from": "2026-11-29T08:05:00Z",
                                      "to": "2026-11-29T08:10:20Z"}
    assert at(body["estimatedCompletion"]) == T0 + timedelta(seconds=60 + 400 + 200)
    assert body["capacityStatus"] == "busy"


def test_a_smaller_share_pushes_the_expected_start_later():
    full = disclose(outlook(position=1, group_share=Fraction(1)))
    third = disclose(outlook(position=1, group_share=Fraction(1, 3)))

    assert at(third["estimatedStart"]["to"]) > at(full["estimatedStart"]["to"])
    assert third["estimatedStart"]["from"] == full["estimatedStart"]["from"]


def test_a_running_item_discloses_its_start_and_expected_completion():
    body = disclose(outlook(now=T0 + timedelta(seconds=50), started_at=T0))

    assert body["estimatedStart"] == {"from": "2026-11-29T08:00:00Z",
                                      "to": "2026-11-29T08:00:00Z"}
    assert body["estimatedCompletion"] == "2026-11-29T08:03:20Z"
    assert body["capacityStatus"] == "available"


def test_a_draining_worker_says_offline_with_low_confidence():
    body = disclose(outlook(accepting=False))

    assert body["capacityStatus"] == "offline"
    assert body["confidence"] == 0.1


def test_confidence_grows_with_history_and_falls_with_spread():
    none = disclose(outlook(durations=()))["confidence"]
    few = disclose(outlook(durations=(200, 200)))["confidence"]
    many = disclose(outlook(durations=(200,) * 30))["confidence"]
    spread = disclose(outlook(durations=(20, 200, 2000) * 10))["confidence"]

    assert none < few < many <= 1
    assert spread < many


@given(st.integers(0, 50), st.fractions(min_value=Fraction(1, 20), max_value=1),
       st.lists(st.integers(0, 7200), min_size=1, max_size=6),
       st.lists(st.integers(1, 20000), max_size=20))
def test_the_window_is_ordered_and_never_in_the_past(position, group_share, frees, durations):
    body = disclose(outlook(position=position, group_share=group_share,
                            slot_free_at=tuple(T0 + timedelta(seconds=s) for s in frees),
                            durations=tuple(durations)))

    start, end = at(body["estimatedStart"]["from"]), at(body["estimatedStart"]["to"])
    assert T0 <= start <= end
    assert at(body["estimatedCompletion"]) >= start
    assert 0 <= body["confidence"] <= 1
    check_body("schedule.disclose", body)


# --- material changes ----------------------------------------------------------------------

def test_the_first_disclosure_is_always_published():
    assert is_material_change(None, disclose(outlook()))


def test_a_new_calculation_time_alone_is_not_material():
    first = disclose(outlook())
    again = disclose(outlook(now=T0 + timedelta(seconds=30)))

    assert first["calculatedAt"] != again["calculatedAt"]
    assert not is_material_change(first, {**first, "calculatedAt": again["calculatedAt"]})


def test_a_small_move_is_not_material_and_a_large_one_is():
    first = disclose(outlook(position=1, slot_free_at=(T0 + timedelta(seconds=30),)))
    nudged = disclose(outlook(position=1, slot_free_at=(T0 + timedelta(seconds=90),)))
    slipped = disclose(outlook(position=1, slot_free_at=(T0 + timedelta(hours=1),)))

    assert not is_material_change(first, nudged)
    assert is_material_change(first, slipped)


def test_a_capacity_status_change_is_material():
    first = disclose(outlook())
    assert is_material_change(first, {**first, "capacityStatus": "busy"})


def test_a_large_confidence_change_is_material():
    first = disclose(outlook())
    assert is_material_change(first, {**first, "confidence": first["confidence"] + 0.3})
    assert not is_material_change(first, {**first, "confidence": first["confidence"] + 0.05})


# --- nothing from another Group ------------------------------------------------------------

SECRET_GROUP = "grp-secret-acquisition"


def queued(group: str, n: int, **fields) -> QueuedItem:
    values = dict(group_id=group, work_item_id=f"{group}-item-{n}",
                  mission_id=f"{group}-mission", ownership_epoch=1,
                  enqueued_at=T0 - timedelta(minutes=n))
    values.update(fields)
    return QueuedItem(**values)


def world(secret_items: int, secret_running: bool = True):
    """Our Group `grp-ours` and another Group with `secret_items` queued items, one of
    them running in a slot."""
    slots = declare_slots(2, 2)
    if secret_running:
        slots = slots.assign(Assignment(
            slot_id="slot-0", group_id=SECRET_GROUP, mission_id=f"{SECRET_GROUP}-mission",
            work_item_id=f"{SECRET_GROUP}-running", ownership_epoch=7, started_at=T0,
            resources=MappingProxyType({}), tool_budget=MappingProxyType({}),
            expected_seconds=900))
    queues = {"grp-ours": [queued("grp-ours", n) for n in range(3)],
              SECRET_GROUP: [queued(SECRET_GROUP, n, urgency="critical")
                             for n in range(secret_items)]}
    policies = {"grp-ours": GroupPolicy(), SECRET_GROUP: GroupPolicy(weight=3)}
    return slots, queues, policies


@given(st.integers(1, 500))
def test_another_groups_queue_length_does_not_change_our_disclosure(secret_items):
    reference = disclose(scheduler.outlook("grp-ours", "grp-ours-item-1", *world(1), T0,
                                           durations=(300, 600)))
    body = disclose(scheduler.outlook("grp-ours", "grp-ours-item-1", *world(secret_items), T0,
                                      durations=(300, 600)))

    assert body == reference


def test_another_groups_names_never_appear_in_our_disclosure():
    slots, queues, policies = world(37)
    view = scheduler.outlook("grp-ours", "grp-ours-item-0", slots, queues, policies, T0,
                             durations=(300, 600))
    body = disclose(view)

    text = json.dumps(body)
    assert SECRET_GROUP not in text and "37" not in text
    assert not any(i.work_item_id in text or i.mission_id in text for i in queues[SECRET_GROUP])
    assert set(body) == DISCLOSURE_KEYS
    # The outlook itself carries only our position, a share and times: no ids at all.
    assert view.position == 2  # behind items 2 and 1 of our own Group, queued earlier
    assert view.group_share == Fraction(1, 4)
    assert SECRET_GROUP not in repr(view)


def test_renaming_the_other_group_and_its_work_changes_nothing():
    slots, queues, policies = world(5)
    renamed_queues = {"grp-ours": queues["grp-ours"],
                      "grp-other": [replace(i, group_id="grp-other",
                                            work_item_id=i.work_item_id.replace("secret", "x"),
                                            mission_id="grp-other-mission")
                                    for i in queues[SECRET_GROUP]]}
    renamed_policies = {"grp-ours": policies["grp-ours"],
                        "grp-other": policies[SECRET_GROUP]}
    running = slots.running[0]
    renamed_slots = declare_slots(2, 2).assign(replace(running, group_id="grp-other",
                                                       mission_id="grp-other-mission",
                                                       work_item_id="grp-other-running"))

    ours = disclose(scheduler.outlook("grp-ours", "grp-ours-item-0", slots, queues, policies,
                                      T0))
    renamed = disclose(scheduler.outlook("grp-ours", "grp-ours-item-0", renamed_slots,
                                         renamed_queues, renamed_policies, T0))

    assert ours == renamed


def test_our_own_running_item_discloses_from_its_slot():
    slots, queues, policies = world(2, secret_running=False)
    decision = scheduler.schedule(slots, {"grp-ours": queues["grp-ours"]}, policies, {}, T0)
    mine = decision.started[0]

    body = disclose(scheduler.outlook("grp-ours", mine.work_item_id, decision.slots, queues,
                                      policies, T0 + timedelta(seconds=30)))

    assert body["estimatedStart"]["from"] == "2026-11-29T08:00:00Z"
    assert body["capacityStatus"] == "available"
