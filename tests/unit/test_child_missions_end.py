"""Child Missions end with their parent (§10.2: terminal state propagates to unfinished
work) in the pure core: cancelling or failing a parent WorkItem, or its Mission, ends
every active child Mission below it, recursively and deepest first, with its unfinished
WorkItems ended as mission_end ends a Mission's (leases revoked, offers withdrawn), all in
the same command's events; no usage can be charged to the ended work afterwards."""

import pytest

from mission_weave.core import commands, state
from mission_weave.protocol.errors import ProtocolError
from tests.unit import builders
from tests.unit.builders import COORDINATOR, MISSION_ID, WORKER, evidence

PARENT, CHILD, GRAND = "wi_parent", "msn-child", "msn-grand"
COORD_ROLES = frozenset({"coordinator"})


def tree() -> state.View:
    """msn_1 > wi_parent (blocked on msn-child) > msn-child: wi-c1 active, wi-c2 blocked on
    msn-grand, wi-c3 verified > msn-grand: wi-g1 offered. And a sibling of the parent,
    wi_sibling, active in msn_1."""
    parent = builders.work_item(state.BLOCKED, item_id=PARENT, owner=None,
                                child_mission_id=CHILD, child_failure_policy="fail")
    sibling = builders.work_item(state.ACTIVE, item_id="wi_sibling",
                                 lease=builders.lease(lease_id="lease_sibling"))
    c1 = builders.work_item(state.ACTIVE, item_id="wi-c1", mission_id=CHILD,
                            lease=builders.lease(lease_id="lease_c1"))
    c2 = builders.work_item(state.BLOCKED, item_id="wi-c2", mission_id=CHILD, owner=None,
                            child_mission_id=GRAND, child_failure_policy="block")
    c3 = builders.work_item(state.VERIFIED, item_id="wi-c3", mission_id=CHILD)
    g1 = builders.work_item(state.OFFERED, item_id="wi-g1", mission_id=GRAND)
    missions = (builders.mission(),
                builders.mission(CHILD, parent_work_item_id=PARENT, parent_mission_id=MISSION_ID,
                                 child_failure_policy="fail"),
                builders.mission(GRAND, parent_work_item_id="wi-c2", parent_mission_id=CHILD,
                                 child_failure_policy="block"))
    return builders.view_of(parent, sibling, c1, c2, c3, g1, missions=missions)


def coordinator(command_type, body, item_id=None, **fields):
    values = dict(actor=COORDINATOR, roles=COORD_ROLES, command_id=f"cmd-{command_type}")
    if item_id is not None:
        values["work_item_id"] = item_id
    return builders.command(command_type, body, **values, **fields)


def run(view, command):
    drafts = commands.decide(view, command, builders.context())
    return drafts, builders.apply(view, drafts)


def trail(drafts) -> list:
    return [(d.type, d.work_item_id or d.mission_id) for d in drafts]


# Each WorkItem after its own child Missions, each Mission after its WorkItems.
CANCEL_CHILDREN = [
    ("lease.revoked", "wi-c1"), ("work.cancelled", "wi-c1"),
    ("work.offer_withdrawn", "wi-g1"), ("work.cancelled", "wi-g1"),
    ("mission.cancelled", GRAND),
    ("work.cancelled", "wi-c2"),
    ("mission.cancelled", CHILD),
]


def test_cancelling_the_parent_work_item_ends_its_child_missions_deepest_first():
    drafts, after = run(tree(), coordinator("work.cancel", {"reason": "not needed"}, PARENT))

    assert trail(drafts) == [*CANCEL_CHILDREN, ("work.cancelled", PARENT)]
    assert after.missions[CHILD].state == state.MISSION_CANCELLED
    assert after.missions[GRAND].state == state.MISSION_CANCELLED
    assert {i: after.items[i].state for i in ("wi-c1", "wi-c2", "wi-c3", "wi-g1", PARENT)} == {
        "wi-c1": state.CANCELLED, "wi-c2": state.CANCELLED, "wi-c3": state.VERIFIED,
        "wi-g1": state.CANCELLED, PARENT: state.CANCELLED}
    assert after.items["wi-c1"].live_lease is None
    assert after.items["wi-g1"].live_offers(builders.T0) == ()
    assert after.items["wi_sibling"].state == state.ACTIVE  # not below the parent
    ended = next(d for d in drafts if d.type == "mission.cancelled" and d.mission_id == CHILD)
    assert ended.data["parentWorkItemId"] == PARENT
    assert ended.data["by"] == COORDINATOR


def test_failing_the_parent_work_item_fails_its_child_missions():
    command = coordinator("work.fail", {"evidence": [evidence(["ac1"], producer=COORDINATOR)],
                                        "reason": "wrong approach"}, PARENT)

    drafts, after = run(tree(), command)

    assert trail(drafts) == [(t.replace("cancelled", "failed"), x)
                             for t, x in CANCEL_CHILDREN] + [("work.failed", PARENT)]
    assert after.missions[CHILD].state == state.MISSION_FAILED
    assert after.missions[GRAND].state == state.MISSION_FAILED
    assert after.items["wi-c1"].state == state.FAILED
    assert after.items[PARENT].state == state.FAILED
    # The parent is ending itself: no child-failure policy event of the parent follows.
    assert not any(d.type == "work.child_mission_failed" for d in drafts)


@pytest.mark.parametrize("command_type,mission_event,item_event", [
    ("mission.cancel", "mission.cancelled", "work.cancelled"),
    ("mission.fail", "mission.failed", "work.failed")])
def test_ending_the_parent_mission_ends_every_child_mission(command_type, mission_event,
                                                            item_event):
    drafts, after = run(tree(), coordinator(command_type, {"missionId": MISSION_ID}))

    children = [(t.replace("work.cancelled", item_event)
                 .replace("mission.cancelled", mission_event), x) for t, x in CANCEL_CHILDREN]
    assert trail(drafts) == [*children, (item_event, PARENT), ("lease.revoked", "wi_sibling"),
                             (item_event, "wi_sibling"), (mission_event, MISSION_ID)]
    assert {m: after.missions[m].state for m in (MISSION_ID, CHILD, GRAND)} == dict.fromkeys(
        (MISSION_ID, CHILD, GRAND), mission_event.split(".")[1])


def test_ending_a_child_mission_ends_its_own_children_and_the_parent_follows_its_policy():
    drafts, after = run(tree(), coordinator("mission.cancel", {"missionId": CHILD}))

    assert trail(drafts) == [*CANCEL_CHILDREN, ("work.failed", PARENT)]
    assert drafts[-1].data["cause"] == "child mission failure"
    assert after.missions[GRAND].state == state.MISSION_CANCELLED


def test_a_child_mission_already_ended_is_left_as_it_is():
    view = tree()
    view.missions[GRAND] = builders.replace(view.missions[GRAND], state=state.MISSION_FAILED)
    view.items["wi-g1"] = builders.replace(view.items["wi-g1"], state=state.FAILED, offers=())

    drafts, _ = run(view, coordinator("work.cancel", {}, PARENT))

    assert GRAND not in [d.mission_id for d in drafts if d.type.startswith("mission.")]
    assert "wi-g1" not in [d.work_item_id for d in drafts]


def test_no_usage_is_charged_to_work_ended_with_its_parent():
    _, after = run(tree(), coordinator("work.cancel", {}, PARENT))
    item = after.items["wi-c1"]
    usage = builders.command("usage.record", {"tokens": 10}, item, actor=f"agent:{WORKER}",
                             roles=frozenset({"worker"}), lease_id="lease_c1")

    with pytest.raises(ProtocolError) as raised:
        commands.decide(after, usage, builders.context())

    assert raised.value.code in ("STALE_LEASE", "TRANSITION_NOT_PERMITTED")
    assert after.items["wi-c1"].usage == {}
