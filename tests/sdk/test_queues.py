"""Work queues rebuilt by replaying a Group's events (no server): the agent's queued
items with the contract's urgency/deadline/impact, live offers, revisions, idempotence."""

import itertools
from datetime import UTC, datetime, timedelta

from mission_weave.sdk import scheduler
from mission_weave.sdk.queues import GroupWork
from tests.samples import contract

G = "grp_q"
NOW = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
T = "2026-11-29T08:00:00Z"


class Log:
    def __init__(self):
        self.sequence = itertools.count(1)
        self.events = []

    def add(self, type_, item=None, **data):
        event = {"id": f"e{len(self.events)}", "groupId": G, "sequence": next(self.sequence),
                 "type": type_, "occurredAt": T, "missionId": "m1", "workItemId": item,
                 "data": data}
        self.events.append(event)
        return event


def authorized(log, item, **overrides):
    body = {**contract(**overrides), "revision": 1}
    return log.add("work.authorized", item, workItemId=item, contract=body)


def accepted(log, item, agent="w1", epoch=1):
    log.add("work.offered", item, mode="sequential",
            offers=[{"agentId": agent, "expiresAt": "2026-11-29T09:00:00Z", "rank": 1,
                     "selectionBasis": {}}])
    log.add("work.offer_accepted", item, agentId=agent, ownershipEpoch=epoch,
            startBy="2026-11-29T08:10:00Z", withdrawn=[], contractRevision=1)


def replay(log) -> GroupWork:
    work = GroupWork(G)
    for event in log.events:
        work.apply(event)
    return work


def test_the_queue_holds_the_agents_queued_items_with_the_contracts_priorities():
    log = Log()
    authorized(log, "a", urgency="low")
    authorized(log, "b", urgency="critical", businessImpact="high")
    authorized(log, "c")
    accepted(log, "a")
    accepted(log, "b")
    accepted(log, "c", agent="w2")

    queue = {q.work_item_id: q for q in replay(log).queue("w1", NOW)}

    assert set(queue) == {"a", "b"}
    assert (queue["b"].urgency, queue["b"].business_impact) == ("critical", "high")
    assert queue["a"].urgency == "low"
    assert queue["a"].ownership_epoch == 1
    ordered = scheduler.group_order(list(queue.values()), NOW)
    assert [q.work_item_id for q in ordered] == ["b", "a"]


def test_a_revised_contract_reorders_the_queue_at_once():
    log = Log()
    authorized(log, "a", urgency="normal")
    authorized(log, "b", urgency="high")
    accepted(log, "a")
    accepted(log, "b")
    work = replay(log)
    assert scheduler.group_order(work.queue("w1", NOW), NOW)[0].work_item_id == "b"

    revised = {**contract(urgency="critical"), "revision": 2}
    work.apply(log.add("work.contract_revised", "a", contract=revised, contractRevision=2,
                       previousRevision=1))
    work.apply(log.add("work.contract_accepted", "a", agentId="w1", contractRevision=2))

    first = scheduler.group_order(work.queue("w1", NOW), NOW)[0]
    assert (first.work_item_id, first.urgency) == ("a", "critical")


def test_an_unaccepted_revision_closes_the_items_start_gate():
    log = Log()
    authorized(log, "a")
    accepted(log, "a")
    work = replay(log)
    work.apply(log.add("work.contract_revised", "a", contract={**contract(), "revision": 2},
                       contractRevision=2, previousRevision=1))

    assert [q.risk_gate_open for q in work.queue("w1", NOW)] == [False]


def test_started_items_leave_the_queue_and_checkpointed_ones_come_back():
    log = Log()
    authorized(log, "a")
    accepted(log, "a")
    log.add("work.started", "a", leaseId="lease-1", expiresAt="2026-11-29T08:05:00Z",
            ownershipEpoch=1, agentId="w1", sessionEpoch=1, attempt=1)
    assert replay(log).queue("w1", NOW) == []

    log.add("work.checkpointed", "a", leaseId="lease-1", progress={"phase": "half"},
            startBy="2026-11-29T08:15:00Z", stateArtifact=None)
    work = replay(log)

    assert [q.work_item_id for q in work.queue("w1", NOW)] == ["a"]
    assert work.items["a"].last_checkpoint["progress"] == {"phase": "half"}


def test_live_offers_respect_expiry_withdrawal_and_replay_is_idempotent():
    log = Log()
    authorized(log, "a")
    log.add("work.offered", "a", mode="urgent", offers=[
        {"agentId": "w1", "expiresAt": "2026-11-29T08:30:00Z", "rank": 1, "selectionBasis": {}},
        {"agentId": "w2", "expiresAt": "2026-11-29T08:30:00Z", "rank": 2, "selectionBasis": {}}])
    work = replay(log)
    for event in log.events:  # delivered again: nothing changes
        assert work.apply(event) is False

    assert [i.id for i in work.live_offers("w1", NOW)] == ["a"]
    assert work.live_offers("w1", NOW + timedelta(hours=1)) == []
    work.apply(log.add("work.offer_withdrawn", "a", agentIds=["w1"], reason="replaced"))
    assert work.live_offers("w1", NOW) == []
    assert [i.id for i in work.live_offers("w2", NOW)] == ["a"]


def test_dependencies_follow_their_policy():
    log = Log()
    authorized(log, "a")
    authorized(log, "b")
    authorized(log, "c", dependencies={"workItems": ["a", "b"], "policy": "all_verified"})
    authorized(log, "d", dependencies={"workItems": ["a", "b"], "policy": "any_verified"})
    log.add("work.verified", "a", evidence=[], by="agent:c")
    work = replay(log)

    assert not work.dependencies_met(work.items["c"])
    assert work.dependencies_met(work.items["d"])
    assert work.dependencies_met(work.items["a"])
