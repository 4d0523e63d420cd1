"""After the sweeper's `lease.expired` the WorkItem is no longer the agent's load (§11.5):
the SDK's per-Group view (sdk/src/mission_weave/sdk/queues.py), from which the Worker counts
what it owns against its Agent Card's maxConcurrency (admission, Presence), agrees with
the server's capacity backstop. Pure: events in, no server."""

from mission_weave.sdk.queues import GroupWork
from tests.samples import contract

G, T = "grp_load", "2026-11-29T08:00:00Z"


def log(*steps) -> list:
    events = []

    def add(type_, item, **data):
        events.append({"id": f"e{len(events)}", "groupId": G, "sequence": len(events) + 1,
                       "type": type_, "occurredAt": T, "missionId": "m1",
                       "workItemId": item, "data": data})

    for item, how in steps:
        add("work.authorized", item, workItemId=item, contract={**contract(), "revision": 1})
        add("work.offered", item, mode="sequential", offers=[
            {"agentId": "w1", "expiresAt": "2026-11-29T09:00:00Z", "rank": 1,
             "selectionBasis": {}}])
        add("work.offer_accepted", item, agentId="w1", ownershipEpoch=1,
            startBy="2026-11-29T08:10:00Z", withdrawn=[], contractRevision=1)
        add("work.started", item, leaseId=f"lease-{item}", expiresAt="2026-11-29T08:05:00Z",
            ownershipEpoch=1, agentId="w1", sessionEpoch=1, attempt=1)
        if how == "expired":
            add("lease.expired", item, leaseId=f"lease-{item}", reason="timeout")
        elif how == "checkpointed":
            add("work.checkpointed", item, leaseId=f"lease-{item}", progress={"phase": "p"},
                startBy="2026-11-29T08:20:00Z")
    return events


def replay(events) -> GroupWork:
    work = GroupWork(G)
    for event in events:
        work.apply(event)
    return work


def test_an_item_whose_lease_expired_is_not_the_agents_load_any_more():
    work = replay(log(("a", "running"), ("b", "expired"), ("c", "checkpointed")))

    assert work.items["b"].state == "active" and work.items["b"].owner == "w1"
    assert sorted(i.id for i in work.owned("w1")) == ["a", "c"]
    assert [i.id for i in work.owned("w1", ("active",))] == ["a"]


def test_the_same_from_a_snapshot_of_the_projection():
    lease = {"id": "lease-b", "expiresAt": T, "closedAt": T, "closeReason": "expired"}
    open_lease = {**lease, "id": "lease-a", "closedAt": None, "closeReason": None}
    work = GroupWork(G)
    work.load_snapshot(9, [
        {"id": "a", "contract": {**contract(), "revision": 1}, "contract_revision": 1,
         "state": "active", "owner": "w1", "ownership_epoch": 1, "lease": open_lease},
        {"id": "b", "contract": {**contract(), "revision": 1}, "contract_revision": 1,
         "state": "active", "owner": "w1", "ownership_epoch": 1, "lease": lease}])

    assert [i.id for i in work.owned("w1")] == ["a"]
