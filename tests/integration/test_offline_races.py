"""Two reconnections racing with the same offline buffer (§11.5), as real threads on
PostgreSQL: the buffered commands are applied exactly once, charge included."""

from datetime import timedelta

import pytest

from apps.ledger.verify import verify_group
from mission_weave.core import offline_binding, state
from mission_weave.protocol.timefmt import format_time, parse_time
from tests.integration.test_races import post, race
from tests.support import Scenario, now

pytestmark = pytest.mark.django_db(transaction=True)


def buffered(s) -> tuple:
    """w1's running item and the binding of work buffered under its lease at once."""
    item_id, started = s.running()
    t0 = now()
    return item_id, {"critical": True, "agentId": s.w1.name, "groupId": s.world.group.id,
               "workItemId": item_id, "sessionEpoch": s.w1.session_epoch,
               "ownershipEpoch": started["ownershipEpoch"], "leaseId": started["leaseId"],
               "disconnectedAt": format_time(t0), "bufferedAt": format_time(t0),
               "graceDeadline": format_time(parse_time(started["expiresAt"])
                                            + timedelta(seconds=300)),
               "leaseExpiresAt": started["expiresAt"], "usage": {"tokens": 70}}


def test_the_same_buffer_sent_twice_at_once_is_applied_once():
    s = Scenario("race-offline")
    item_id, binding = buffered(s)
    assert s.w1.open_session().status_code == 201  # the reconnection revokes the lease
    buffer = [s.w1.envelope("work.progress", {"phase": "drafting"}, workItemId=item_id,
                            extensions={offline_binding.URN: binding}),
              s.w1.envelope("work.checkpoint", {"progress": {"phase": "drafted"}},
                            workItemId=item_id, extensions={offline_binding.URN: binding})]
    head = s.world.head

    for envelope in buffer:
        first, second = race([lambda e=envelope: post(s.w1.token, s.world.group.id, e)] * 2)
        assert first[0] == second[0] == 200, (first, second)
        assert sorted([first[1]["duplicate"], second[1]["duplicate"]]) == [False, True]
        assert first[1]["events"] == second[1]["events"]

    assert s.world.head == head + 4  # each: the charge and its own event, once
    assert s.item(item_id)["usage"] == {"tokens": 140}
    assert s.item(item_id)["state"] == "queued"
    assert s.c.get(f"missions/{s.mission_id}").json()["usage"] == {"tokens": 140}
    types = [e["type"] for e in s.c.get(f"events?after={head}").json()["events"]]
    assert types == [state.USAGE_RECORDED, "work.progress_reported",
                     state.USAGE_RECORDED, "work.checkpointed"]
    assert verify_group(s.world.group.id) == []


def test_two_reconnections_rebasing_the_same_buffer_apply_it_once():
    s = Scenario("race-offline-two")
    item_id, binding = buffered(s)
    rebased = []
    for _ in range(2):  # two runtimes of the agent reconnect; the second session wins
        assert s.w1.open_session().status_code == 201
        rebased.append((s.w1.token, s.w1.envelope(
            "work.progress", {"phase": "drafting"}, id="cmd-offline-progress",
            workItemId=item_id, extensions={offline_binding.URN: binding})))
    head = s.world.head

    answers = race([lambda t=token, e=envelope: post(t, s.world.group.id, e)
                    for token, envelope in rebased])

    assert sorted(status for status, _ in answers) == [200, 401]
    assert s.world.head == head + 2
    assert s.item(item_id)["usage"] == {"tokens": 70}
    assert verify_group(s.world.group.id) == []
