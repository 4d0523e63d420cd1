"""The demo coordinator without a server: it acts only on the Missions it coordinates
(their coordinatorId, or a delegate they name; child Missions inherit both), and it
records reviewer Evidence once per submission."""

import asyncio

from mission_weave.sdk.coordinator import Coordinator, Missions
from tests.sdk.test_queues import G, Log, authorized

ME, OTHER = "agent:coord", "agent:someone-else"


class FakeClient:
    principal = ME

    def __init__(self, log: Log, detail: dict | None = None):
        self.log, self.detail = log, detail or {}
        self.commands = []

    async def command(self, group_id, type_, body=None, **fields):
        self.commands.append((type_, fields.get("workItemId"), body))
        event = self.log.add(type_.replace("evidence.record", "evidence.recorded"),
                             fields.get("workItemId"), **(body or {}))
        return {"events": [event]}

    async def work_item(self, group_id, item_id):
        return self.detail


def created(log, mission, coordinator, delegates=None):
    data = {"missionId": mission, "title": "t", "ownerId": "user:owner",
            "coordinatorId": coordinator}
    if delegates is not None:
        data["delegates"] = delegates
    event = log.add("mission.created", None, **data)
    event["missionId"] = mission
    return event


def item_in(log, item, mission):
    authorized(log, item)
    log.events[-1]["missionId"] = mission


def coordinator_on(log, detail=None) -> tuple[Coordinator, FakeClient]:
    client = FakeClient(log, detail)
    coordinator = Coordinator(client, G, ":memory:")
    for event in log.events:
        coordinator.apply(event)
    return coordinator, client


def tick(coordinator):
    asyncio.run(coordinator.tick())
    for event in coordinator.client.log.events:  # our own events come back in the log
        coordinator.apply(event)


def offered_items(client) -> set:
    return {i for t, i, _ in client.commands if t == "work.offer"}


# --- per-Mission authority ----------------------------------------------------------

def test_it_offers_only_the_items_of_missions_it_coordinates_or_is_a_delegate_of():
    log = Log()
    created(log, "mine", ME)
    created(log, "theirs", OTHER)
    created(log, "delegated", OTHER, delegates=[ME])
    created(log, "others-delegate", OTHER, delegates=["agent:third"])
    for mission in ("mine", "theirs", "delegated", "others-delegate"):
        item_in(log, f"{mission}-1", mission)
    coordinator, client = coordinator_on(log)

    tick(coordinator)

    assert offered_items(client) == {"mine-1", "delegated-1"}


def test_an_item_of_an_unknown_mission_is_left_alone():
    log = Log()
    item_in(log, "orphan", "never-created")
    coordinator, client = coordinator_on(log)

    tick(coordinator)

    assert client.commands == []


def test_child_missions_inherit_their_parents_coordinator_and_delegates():
    missions = Missions()
    log = Log()
    missions.apply(created(log, "parent", OTHER, delegates=[ME]))
    # a server that writes the inherited coordinator into the event
    child = log.add("mission.child_created", "w", childMissionId="child", title="c",
                    ownerId="user:owner", coordinatorId=OTHER, delegates=[ME],
                    childFailurePolicy="block")
    child["missionId"] = "parent"
    missions.apply(child)
    # one that does not: the parent's, as folded
    bare = log.add("mission.child_created", "w2", childMissionId="child2", title="c",
                   childFailurePolicy="fail")
    bare["missionId"] = "parent"
    missions.apply(bare)
    grandchild = log.add("mission.child_created", "w3", childMissionId="grandchild",
                         title="g", childFailurePolicy="fail")
    grandchild["missionId"] = "child2"
    missions.apply(grandchild)

    for mission in ("parent", "child", "child2", "grandchild"):
        assert missions.coordinated_by(mission, ME), mission
        assert missions.coordinated_by(mission, OTHER), mission
        assert not missions.coordinated_by(mission, "agent:third"), mission


def test_the_missions_come_from_a_snapshot_too():
    missions = Missions()
    missions.load_snapshot(7, [{"id": "m", "coordinator_id": OTHER, "delegates": [ME]},
                               {"id": "n", "coordinator_id": OTHER, "delegates": []}])

    assert missions.applied == 7
    assert missions.coordinated_by("m", ME) and not missions.coordinated_by("n", ME)


def test_a_submission_in_another_coordinators_mission_is_not_reviewed():
    log = Log()
    created(log, "theirs", OTHER)
    item_in(log, "x", "theirs")
    log.add("work.submitted", "x", leaseId="l", contractRevision=1, artifacts=[], evidence=[])
    coordinator, client = coordinator_on(log, detail=pending_detail())

    tick(coordinator)

    assert client.commands == []


# --- reviewer Evidence once per submission --------------------------------------------

def pending_detail(revision=5, reviewer_evidence=()) -> dict:
    """The WorkItem read while the review awaits a reviewer for ac1 (ac2 is a check)."""
    return {"submission": {"artifacts": ["sha256:" + "a" * 64]},
            "review": {"submissionRevision": revision,
                       "reviewerEvidence": list(reviewer_evidence),
                       "evaluation": evaluation()},
            }


def evaluation() -> dict:
    return {"verdict": "pending", "failing": [], "pending": ["ac1"], "criteria": [
        {"id": "ac1", "verdict": "pending", "decidedBy": "reviewer",
         "submittedEvidence": ["ev-w"], "reviewerEvidence": []},
        {"id": "ac2", "verdict": "pass", "decidedBy": "check",
         "submittedEvidence": ["ev-w"], "reviewerEvidence": []}]}


def submitted_item(log):
    created(log, "mine", ME)
    item_in(log, "x", "mine")
    log.add("work.submitted", "x", leaseId="l", contractRevision=1, artifacts=[], evidence=[])


def recorded(client) -> list:
    return [b for t, _, b in client.commands if t == "evidence.record"]


def test_reviewer_evidence_is_recorded_once_while_the_evaluation_still_shows_none():
    log = Log()
    submitted_item(log)
    detail = pending_detail()
    coordinator, client = coordinator_on(log, detail)

    tick(coordinator)
    [first] = recorded(client)
    assert [e["criteria"] for e in first["evidence"]] == [["ac1"]]
    assert first["evidence"][0]["result"].startswith("pass: ")
    assert first["evidence"][0]["producer"] == ME

    # The evidence.recorded event is in the view, other events follow; the server's
    # evaluation is not appended again yet, so it still lists no reviewer Evidence.
    log.add("conversation.message_posted", "other", kind="note", text="news")
    coordinator.apply(log.events[-1])
    tick(coordinator)
    detail["review"]["reviewerEvidence"] = first["evidence"]  # the review has it now
    log.add("conversation.message_posted", "other", kind="note", text="more news")
    coordinator.apply(log.events[-1])
    tick(coordinator)

    assert len(recorded(client)) == 1


def test_even_a_read_that_lags_behind_our_evidence_does_not_record_it_twice():
    log = Log()
    submitted_item(log)
    coordinator, client = coordinator_on(log, pending_detail())

    for n in range(3):
        tick(coordinator)
        coordinator.apply(log.add("conversation.message_posted", "other", n=n))

    assert len(recorded(client)) == 1


def test_a_new_submission_gets_its_own_reviewer_evidence():
    log = Log()
    submitted_item(log)
    coordinator, client = coordinator_on(log, pending_detail(revision=5))
    tick(coordinator)

    client.detail = pending_detail(revision=9)  # failed, re-offered, submitted again
    coordinator.apply(log.add("work.submitted", "x", leaseId="l2", contractRevision=1,
                              artifacts=[], evidence=[]))
    tick(coordinator)

    assert len(recorded(client)) == 2
