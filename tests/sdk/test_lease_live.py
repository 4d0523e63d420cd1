"""A lease taken away server-side while a slow handler runs (tests/sdk/conftest.py's live
server): the handler is cancelled at its next await and nothing is submitted (§11.3).

One test has the coordinator cancel the WorkItem (its lease is revoked); the other opens a
second session with the worker's own key, which revokes its leases (§11.3, PROTOCOL §1).
A `DeafWorker` does not heed the log's `lease.revoked`, so only its refused renewal can
notice; the plain Worker may notice either way first."""

import asyncio

import pytest

from mission_weave.sdk.worker import Worker
from tests.sdk.conftest import run
from tests.sdk.test_live import mission, offer

pytestmark = pytest.mark.django_db(transaction=True)


class DeafWorker(Worker):
    """Folds the log but does not act on a lease closing in it: the renewal must."""

    async def _on_event(self, event):
        self._fold(event)
        self.wake.set()


class Patient:
    """A handler that would work for a minute; notes that it started and was cancelled."""

    def __init__(self):
        self.started = asyncio.Event()
        self.cancelled = False

    async def __call__(self, ctx):
        self.started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return {"evidence": [ctx.evidence(["ac1", "ac2"], "test", "pass")]}


def scenario(live_group, tmp_path, worker_class, take_it_away):
    g, w1 = live_group.group_id, live_group.workers[0]
    handler = Patient()

    async def go():
        async with live_group.client(live_group.coordinator) as c, \
                live_group.client(w1) as wc:
            await c.open_session()
            await mission(c, g, {"slow": []})
            worker = worker_class(wc, [g], handler, tmp_path / "w.sqlite3", tick_seconds=0.2,
                                  lease_seconds=3, once=True)
            task = asyncio.create_task(worker.run())
            await asyncio.wait_for(worker.ready.wait(), 20)
            await offer(c, g, "slow", w1.name)
            await asyncio.wait_for(handler.started.wait(), 20)
            await take_it_away(c)
            await asyncio.wait_for(task, 20)  # --once: ends with that item
            audit = await c.get(f"/api/v1/groups/{g}/work-items/slow/audit")
            return worker, [e["type"] for e in audit["events"]], await c.work_item(g, "slow")
    return handler, *run(go(), 60)


def cancel_as_coordinator(live_group):
    async def take_it_away(c):
        await c.command(live_group.group_id, "work.cancel", {"reason": "no longer needed"},
                        workItemId="slow")
    return take_it_away


def second_session(live_group):
    async def take_it_away(c):
        async with live_group.client(live_group.workers[0]) as other:
            await other.open_session()  # same key: the running worker's leases are revoked
    return take_it_away


@pytest.mark.parametrize("worker_class", [Worker, DeafWorker], ids=["worker", "renewal-only"])
def test_a_cancelled_item_stops_its_handler_and_is_not_submitted(live_group, tmp_path,
                                                                 worker_class):
    handler, worker, types, item = scenario(live_group, tmp_path, worker_class,
                                            cancel_as_coordinator(live_group))

    assert handler.cancelled
    assert worker.submitted == [] and "work.submitted" not in types
    assert (worker.outcome.state, worker.outcome.ok) == ("lease-lost", False)
    assert item["state"] == "cancelled"
    if worker_class is DeafWorker:
        assert "the server refused lease.renew" in worker.outcome.message


@pytest.mark.parametrize("worker_class", [Worker, DeafWorker], ids=["worker", "renewal-only"])
def test_a_second_session_with_the_same_key_stops_the_handler(live_group, tmp_path,
                                                              worker_class):
    handler, worker, types, item = scenario(live_group, tmp_path, worker_class,
                                            second_session(live_group))

    assert handler.cancelled
    assert "lease.revoked" in types
    assert worker.submitted == [] and "work.submitted" not in types
    assert worker.outcome.state == "lease-lost"
    assert item["state"] == "queued"  # back in its queue for the new session's runtime
    if worker_class is DeafWorker:
        assert "the server refused lease.renew" in worker.outcome.message

