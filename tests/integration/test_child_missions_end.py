"""Child Missions end with their parent through HTTP on PostgreSQL: work.cancel or
work.fail of a parent WorkItem, mission.cancel or mission.fail of its Mission, ends every
active child Mission below, at any depth, in the same command's events (leases revoked,
offers withdrawn); no usage is charged to the ended work after, and the log verifies."""

import pytest

from apps.ledger.verify import verify_group
from tests.support import Scenario, assert_error, evidence


@pytest.fixture
def s(db):
    return Scenario()


def child_of(s, item_id: str, policy="fail") -> str:
    events = s.c.ok("mission.create_child", {"title": "Sub-work", "childFailurePolicy": policy},
                    workItemId=item_id)
    return next(e["data"]["childMissionId"] for e in events
                if e["type"] == "mission.child_created")


def tree(s) -> dict:
    """root Mission > parent (blocked on child) > child Mission: running (active, w1's
    lease), nested (blocked on grandchild) > grandchild Mission: offered (w2's offer)."""
    root = s.mission_id
    parent = s.authorize()
    child = child_of(s, parent)
    s.mission_id = child
    running, _ = s.running(s.w1)
    nested = s.authorize()
    grandchild = child_of(s, nested, policy="block")
    s.mission_id = grandchild
    offered = s.authorize()
    s.offer(offered, s.w2)
    s.mission_id = root
    return {"root": root, "parent": parent, "child": child, "running": running,
            "nested": nested, "grandchild": grandchild, "offered": offered,
            "lease": s.lease_fields(running)}


def mission_state(s, mission_id: str) -> str:
    return s.c.get(f"missions/{mission_id}").json()["state"]


def assert_tree_ended(s, t, mission_state_, item_state):
    assert mission_state(s, t["child"]) == mission_state_
    assert mission_state(s, t["grandchild"]) == mission_state_
    for name in ("running", "nested", "offered"):
        assert s.item(t[name])["state"] == item_state, name
    assert s.item(t["running"])["lease"] is None  # revoked
    assert [o["status"] for o in s.item(t["offered"])["offers"]] == ["withdrawn"]
    # The ended work takes no more usage: the lease holder's report is refused.
    head = s.world.head
    assert_error(s.w1.send("usage.record", {"tokens": 10}, **t["lease"]), 409, "STALE_LEASE")
    assert s.world.head == head
    assert verify_group(s.world.group.id) == []


def test_cancelling_a_parent_work_item_cancels_its_child_missions_at_every_depth(s):
    t = tree(s)

    events = s.c.ok("work.cancel", {"reason": "not needed"}, workItemId=t["parent"])

    ended = [e["missionId"] for e in events if e["type"] == "mission.cancelled"]
    assert ended == [t["grandchild"], t["child"]]  # the deepest first
    assert events[-1]["type"] == "work.cancelled" and events[-1]["workItemId"] == t["parent"]
    assert_tree_ended(s, t, "cancelled", "cancelled")


def test_failing_a_parent_work_item_fails_its_child_missions(s):
    t = tree(s)

    events = s.c.ok("work.fail", {"evidence": [evidence(["ac1"], result="fail")],
                                  "reason": "wrong approach"}, workItemId=t["parent"])

    assert [e["missionId"] for e in events if e["type"] == "mission.failed"] == [
        t["grandchild"], t["child"]]
    assert s.item(t["parent"])["state"] == "failed"
    assert_tree_ended(s, t, "failed", "failed")


@pytest.mark.parametrize("command_type,mission_state_,item_state", [
    ("mission.cancel", "cancelled", "cancelled"), ("mission.fail", "failed", "failed")])
def test_ending_the_root_mission_ends_every_child_mission(s, command_type, mission_state_,
                                                          item_state):
    t = tree(s)

    s.c.ok(command_type, {"missionId": t["root"], "reason": "called off"})

    assert mission_state(s, t["root"]) == mission_state_
    assert s.item(t["parent"])["state"] == item_state
    assert_tree_ended(s, t, mission_state_, item_state)
