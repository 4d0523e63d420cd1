"""The Worker's decisions on a replayed Group, without a server: which offers it accepts
or declines, re-accepting a revised contract, disclosing before starting."""

import asyncio
from datetime import UTC, datetime, timedelta

from mission_weave.protocol.timefmt import format_time
from mission_weave.sdk.client import ApiError
from mission_weave.sdk.worker import Worker
from tests.sdk.test_queues import G, Log, accepted, authorized

CARD = {"version": "1", "maxConcurrency": 2,
        "capabilities": [{"id": "summarize", "version": "1"}]}


class RecordingClient:
    agent_id, principal = "w1", "agent:w1"

    def __init__(self):
        self.commands = []

    async def command(self, group_id, type_, body=None, **fields):
        self.commands.append((type_, fields.get("workItemId"), body))
        if type_ == "work.start":
            raise ApiError(409, "TRANSITION_NOT_PERMITTED", "not in this test")
        return {"events": []}

    async def presence(self, *args, **kwargs):
        return {}


def worker_on(log) -> tuple[Worker, RecordingClient]:
    client = RecordingClient()
    worker = Worker(client, [G], handler=None, cursor_path=":memory:")
    worker.card = CARD
    worker.slots.declare(2)
    for event in log.events:
        worker._fold(event)
    return worker, client


def offered(log, item, agent="w1"):
    expires = format_time(datetime.now(UTC) + timedelta(minutes=10))
    log.add("work.offered", item, mode="sequential",
            offers=[{"agentId": agent, "expiresAt": expires, "rank": 1, "selectionBasis": {}}])


def tick(worker):
    async def go():
        await worker._tick()
        await asyncio.gather(*(task for task, _ in list(worker.slots.running.values())))
    asyncio.run(go())


def test_offers_are_accepted_up_to_capacity_and_declined_past_it_or_without_capability():
    log = Log()
    for item in ("a", "b", "c"):
        authorized(log, item)
        offered(log, item)
    authorized(log, "d", capabilities=[{"id": "welding", "version": "1"}])
    offered(log, "d")
    worker, client = worker_on(log)

    tick(worker)

    decisions = {(t, i): b for t, i, b in client.commands
                 if t in ("work.accept_offer", "work.decline_offer")}
    assert set(decisions) == {("work.accept_offer", "a"), ("work.accept_offer", "b"),
                              ("work.decline_offer", "c"), ("work.decline_offer", "d")}
    assert decisions["work.decline_offer", "c"] == {
        "reason": "capacity", "detail": "no free slot: 2 WorkItems owned, maxConcurrency 2"}
    assert decisions["work.decline_offer", "d"] == {
        "reason": "capability", "detail": "no matching capability for welding 1"}
    assert decisions["work.accept_offer", "a"] == {"contractRevision": 1}


def test_a_contract_revised_before_the_start_is_accepted_again_and_not_started():
    log = Log()
    authorized(log, "a")
    accepted(log, "a")
    log.add("work.contract_revised", "a", contract={**log.events[0]["data"]["contract"],
                                                    "revision": 2},
            contractRevision=2, previousRevision=1)
    worker, client = worker_on(log)

    tick(worker)

    types = [(t, i) for t, i, _ in client.commands]
    assert ("work.accept_offer", "a") in types
    assert ("work.start", "a") not in types
    assert client.commands[types.index(("work.accept_offer", "a"))][2] == {"contractRevision": 2}


def test_a_queued_item_is_disclosed_before_it_is_started():
    log = Log()
    authorized(log, "a")
    accepted(log, "a")
    worker, client = worker_on(log)

    tick(worker)

    types = [(t, i) for t, i, _ in client.commands]
    assert types.index(("schedule.disclose", "a")) < types.index(("work.start", "a"))
    body = client.commands[types.index(("schedule.disclose", "a"))][2]
    assert body["capacityStatus"] == "available"
