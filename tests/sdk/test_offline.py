"""Bounded offline execution (§11.5), the SDK's half: the durable buffer (offline.py) and,
against the live server (tests/sdk/conftest.py) behind a proxy that can refuse every
connection, a Worker whose handler goes on while the Group service is unreachable, buffers
its progress with the binding and its charge, reconnects, reconciles (every buffered
progress exactly once, in order, charged) and only then submits."""

import asyncio
import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from apps.bench.harness import free_port
from mission_weave.protocol import canonical
from mission_weave.sdk import OfflineError
from mission_weave.sdk import offline_buffer as off
from mission_weave.sdk.client import ApiError, Client
from mission_weave.sdk.keys import AgentKey, new_key
from mission_weave.sdk.offline_buffer import URN, OfflineBuffer, Usage
from mission_weave.sdk.worker import Worker
from tests.sdk.conftest import run
from tests.sdk.test_chaos import CuttingProxy
from tests.sdk.test_live import mission, offer

T0 = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
G = "grp_demo"
USAGE_RECORDED = "ext.missionweaveprotocol.core.resource_usage_recorded"


def key() -> AgentKey:
    return new_key("worker-1", G)


def a_binding(item="research", lease="lease-1", buffered=60, usage=None) -> dict:
    return off.binding(agent_id="worker-1", group_id=G, work_item_id=item, session_epoch=3,
                       ownership_epoch=2, lease_id=lease,
                       disconnected_at=T0 + timedelta(seconds=30),
                       buffered_at=T0 + timedelta(seconds=buffered),
                       grace_deadline=T0 + timedelta(seconds=600),
                       lease_expires_at=T0 + timedelta(seconds=300),
                       usage=usage if usage is not None else {"tokens": 10})


# --- the buffer ------------------------------------------------------------------------------

def test_the_binding_is_the_shape_protocol_pins():
    from mission_weave.core import jsonschema_check
    from mission_weave.core.offline_binding import BINDING

    jsonschema_check.check(BINDING, a_binding(), "VALIDATION_ERROR", "binding")
    assert a_binding()["critical"] is True


def test_the_buffer_is_durable_across_reopening(tmp_path):
    path = OfflineBuffer.path_beside(tmp_path / "w.sqlite3")
    assert path.endswith("w.offline.sqlite3")
    buffer = OfflineBuffer(path)
    entry = buffer.add(G, "work.progress", {"phase": "p"}, a_binding(), {"workItemId": "research"})
    buffer.close()

    again = OfflineBuffer(path)

    assert again.db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    [kept] = again.pending()
    assert (kept.command_id, kept.type, kept.body, kept.binding) == \
        (entry.command_id, "work.progress", {"phase": "p"}, a_binding())


def test_pending_is_in_buffered_order_whatever_the_order_of_writes(tmp_path):
    buffer = OfflineBuffer(tmp_path / "b.sqlite3")
    # 60.5 s formats with a fraction, 61 without: a string sort would put them wrong
    for buffered, phase in ((61, "third"), (60.5, "second"), (40, "first"), (61, "fourth")):
        buffer.add(G, "work.progress", {"phase": phase}, a_binding(buffered=buffered),
                   {"workItemId": "research"})

    assert [e.body["phase"] for e in buffer.pending()] == ["first", "second", "third", "fourth"]
    assert buffer.last_buffered_at("lease-1") == T0 + timedelta(seconds=61)


def test_only_reports_of_running_work_may_be_buffered(tmp_path):
    buffer = OfflineBuffer(":memory:")
    for type_ in ("work.submit", "work.start", "artifact.publish", "usage.record"):
        with pytest.raises(OfflineError):
            buffer.add(G, type_, {}, a_binding(), {})
    assert len(buffer) == 0


def test_rebasing_keeps_the_id_body_and_binding_and_takes_the_current_session():
    client = Client("http://127.0.0.1:9", key())
    client.session_epoch = 3
    entry = OfflineBuffer(":memory:").add(G, "work.progress", {"phase": "p"}, a_binding(),
                                          {"workItemId": "research"})
    client.session_epoch = 4

    envelope = off.rebase(client, entry, membership_epoch=7)

    assert envelope["id"] == entry.command_id
    assert envelope["extensions"] == {URN: a_binding()}
    assert (envelope["sessionEpoch"], envelope["membershipEpoch"]) == (4, 7)
    assert envelope["extensions"][URN]["sessionEpoch"] == 3  # the historical one
    assert envelope["body"] == {"phase": "p"} and envelope["workItemId"] == "research"
    assert "leaseId" not in envelope  # the binding names it
    assert canonical.verify(envelope, client.key.private_key.public_key())


def test_a_usage_delta_is_taken_once():
    usage = Usage()
    usage.add(tokens=5, toolCalls=1)
    usage.add(tokens=7, sideEffects=1, financial={"amount": "0.10", "currency": "USD"})

    assert usage.take() == {"tokens": 12, "toolCalls": 1, "sideEffects": 1,
                            "financial": {"amount": "0.10", "currency": "USD"}}
    assert usage.take() == {} and not usage
    with pytest.raises(ValueError):
        usage.add(tokens=-1)


class FakeClient:
    """A client of session 5 that signs for real and sends nowhere: `send` is each
    subclass's script."""

    def __init__(self):
        self.inner = Client("http://127.0.0.1:9", key())
        self.inner.session_epoch = self.session_epoch = 5
        self.agent_id, self.principal = "worker-1", "agent:worker-1"
        self.sent = []

    def envelope(self, *args, **kwargs):
        return self.inner.envelope(*args, **kwargs)

    async def membership(self, group_id, refresh=False):
        return {"membershipEpoch": 1}


class Answering(FakeClient):
    """A client whose `send` answers from a script keyed by the body's phase."""

    def __init__(self, refuse=None):
        super().__init__()
        self.refuse = refuse or {}

    async def send(self, group_id, envelope):
        self.sent.append(envelope)
        refusal = self.refuse.get(envelope["body"]["phase"])
        if isinstance(refusal, list):
            refusal = refusal.pop(0) if refusal else None
        if refusal is not None:
            raise refusal
        return {"events": [{"type": "work.progress_reported"}], "duplicate": False}


def fill(buffer, *specs):
    for item, phase, buffered in specs:
        buffer.add(G, "work.progress", {"phase": phase}, a_binding(item=item, buffered=buffered),
                   {"workItemId": item})


def test_reconcile_sends_in_order_and_owner_changed_drops_that_items_buffer():
    buffer = OfflineBuffer(":memory:")
    fill(buffer, ("a", "a1", 40), ("b", "b1", 45), ("a", "a2", 50), ("b", "b2", 55))
    client = Answering({"a1": ApiError(409, "OWNER_CHANGED", "reassigned")})

    results = asyncio.run(off.reconcile(client, buffer))

    assert [e["body"]["phase"] for e in client.sent] == ["a1", "b1", "b2"]
    assert [(r.entry.body["phase"], r.error.code if r.error else None) for r in results] == \
        [("a1", "OWNER_CHANGED"), ("b1", None), ("b2", None)]
    assert results[0].dropped == 1 and len(buffer) == 0


def test_a_transport_error_keeps_the_rest_and_the_resent_envelope_is_the_same():
    buffer = OfflineBuffer(":memory:")
    fill(buffer, ("a", "a1", 40), ("a", "a2", 50))
    client = Answering({"a2": [httpx.ConnectError("down")]})

    with pytest.raises(httpx.ConnectError):
        asyncio.run(off.reconcile(client, buffer))
    [left] = buffer.pending()
    first = client.sent[-1]
    assert left.rebased == first

    asyncio.run(off.reconcile(client, buffer))
    assert client.sent[-1] == first  # resent as it was: a duplicate if it was decided
    assert len(buffer) == 0


def test_a_stale_rebased_envelope_is_rebased_again_keeping_its_id():
    buffer = OfflineBuffer(":memory:")
    fill(buffer, ("a", "a1", 40))
    [entry] = buffer.pending()
    buffer.mark_rebased(entry, {"id": entry.command_id, "body": {"phase": "a1"},
                                "sessionEpoch": 4})
    client = Answering({"a1": [ApiError(401, "STALE_SESSION", "old session")]})

    [result] = asyncio.run(off.reconcile(client, buffer))

    assert result.error is None
    assert [e["sessionEpoch"] for e in client.sent] == [4, 5]
    assert {e["id"] for e in client.sent} == {entry.command_id}


# --- against the live server -----------------------------------------------------------------

pytestmark_live = pytest.mark.django_db(transaction=True)


class Switch(CuttingProxy):
    """The chaos test's proxy, which can also refuse every new connection: the server is
    unreachable while it is `down`."""

    down = False

    async def _accept(self, reader, writer):
        if self.down:
            writer.transport.abort()
            return
        await super()._accept(reader, writer)

    def go_down(self):
        self.down = True
        self.cut()


async def behind(live_group, proxy: Switch) -> str:
    port = free_port()
    await proxy.start(port)
    return f"http://127.0.0.1:{port}"


def target_port(live_group) -> int:
    return int(live_group.server.url.rsplit(":", 1)[1])


@pytestmark_live
def test_progress_buffered_offline_lands_once_in_order_with_its_charge(live_group, tmp_path):
    from apps.ledger.verify import verify_group

    g, w1 = live_group.group_id, live_group.workers[0]
    proxy = Switch(target_port(live_group))
    offline_now, back = asyncio.Event(), asyncio.Event()
    seen = {}

    async def handle(ctx):
        summary = await ctx.publish_artifact(b"# done\n", "text/markdown")  # online
        await offline_now.wait()
        answers = []
        for i in range(3):
            ctx.charge(tokens=100 * (i + 1), toolCalls=1)
            answers.append(await ctx.progress(f"offline-{i}", milestones=[f"m{i}"]))
        seen["answers"], seen["offline"] = answers, ctx.offline
        try:
            await ctx.submit([ctx.evidence(["ac1", "ac2"], "test", "pass", [summary])], [summary])
        except OfflineError as error:
            seen["submit"] = error
        back.set()
        criteria = [c["id"] for c in ctx.contract["acceptanceCriteria"]]
        return {"evidence": [ctx.evidence(criteria, "test", "pass", artifacts=[summary])],
                "artifacts": [summary]}

    async def go():
        url = await behind(live_group, proxy)
        async with live_group.client(live_group.coordinator) as c, \
                Client(url, w1.key, retries=1, backoff_seconds=0.05) as wc:
            await c.open_session()
            await mission(c, g, {"offline": []})
            worker = Worker(wc, [g], handle, tmp_path / "w.sqlite3", tick_seconds=0.2,
                            lease_seconds=30, once=True, transport="http",
                            offline_grace_seconds=off.DEFAULT_GRACE_SECONDS)
            worker.session.reconnect_seconds = 0.2
            task = asyncio.create_task(worker.run())
            await asyncio.wait_for(worker.ready.wait(), 20)
            await offer(c, g, "offline", w1.name)
            while not any(ctx for _, ctx in worker.slots.running.values()):
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.5)  # the artifact is published
            proxy.go_down()
            offline_now.set()
            await asyncio.wait_for(back.wait(), 30)
            buffered = len(worker.offline.buffer)
            proxy.down = False
            await asyncio.wait_for(task, 40)
            await proxy.close()
            events = (await c.events(g, 0))["events"]
            return worker, buffered, events, await c.work_item(g, "offline")

    started = time.monotonic()
    worker, buffered, events, item = run(go(), 90)
    elapsed = time.monotonic() - started

    assert isinstance(seen["submit"], OfflineError) and seen["offline"]
    assert all(a["buffered"] for a in seen["answers"]) and buffered == 3
    assert (worker.outcome.state, worker.outcome.ok) == ("submitted", True)
    mine = [e for e in events if e.get("workItemId") == "offline"]
    reported = [e for e in mine if e["type"] == "work.progress_reported"]
    assert [e["data"]["progress"]["phase"] for e in reported] == \
        ["offline-0", "offline-1", "offline-2"]
    assert [e["commandId"] for e in reported] == \
        [a["commandId"] for a in seen["answers"]]  # the buffered ids, each once
    charged = [e for e in mine if e["type"] == USAGE_RECORDED]
    # Each charge once, whichever command carried it: a buffered one its binding's, or
    # (the first report, tried before the worker knew it was offline, whose usage.record
    # lost its answer) the charge settled after the reconnection.
    assert sum(e["data"]["delta"].get("tokens", 0) for e in charged) == 600
    assert sum(e["data"]["delta"].get("toolCalls", 0) for e in charged) == 3
    by_sequence = {e["sequence"]: e for e in mine}
    for usage in (e for e in charged if "offline" in e["data"]):
        applied = by_sequence[usage["sequence"] + 1]  # charged, then applied
        assert applied["type"] == "work.progress_reported"
        assert applied["data"]["offline"] == usage["data"]["offline"]
    assert {e["data"]["offline"]["bufferedAt"] for e in charged if "offline" in e["data"]} \
        <= {e["data"]["offline"]["bufferedAt"] for e in reported}
    assert item["usage"]["tokens"] == 600 and item["usage"]["toolCalls"] == 3
    # Measured by the worker: the handler waited 1.5 s online and longer offline.
    wall = sum(e["data"]["delta"].get("wallClockSeconds", 0) for e in charged)
    assert 1 <= wall <= elapsed and item["usage"].get("wallClockSeconds", 0) == wall
    types = [e["type"] for e in mine]
    # reconciled before the item started again, and submitted only under the new lease
    assert types.index("lease.revoked") < types.index("work.progress_reported")
    last_start = max(i for i, t in enumerate(types) if t == "work.started")
    assert last_start > max(i for i, t in enumerate(types) if t == "work.progress_reported")
    assert types.count("work.submitted") == 1 and types.index("work.submitted") > last_start
    assert worker.offline.buffer is not None and len(worker.offline.buffer) == 0
    assert verify_group(g) == []


@pytestmark_live
def test_a_handler_that_outlives_the_grace_deadline_is_cancelled(live_group, tmp_path):
    g, w1 = live_group.group_id, live_group.workers[0]
    proxy = Switch(target_port(live_group))
    state = {"cancelled": False}

    async def handle(ctx):
        proxy.go_down()
        answer = await ctx.progress("offline, forever")
        state["buffered"] = answer.get("buffered")
        try:
            await asyncio.sleep(120)
        except asyncio.CancelledError:
            state["cancelled"] = True
            raise

    async def go():
        url = await behind(live_group, proxy)
        async with live_group.client(live_group.coordinator) as c, \
                Client(url, w1.key, retries=1, backoff_seconds=0.05) as wc:
            await c.open_session()
            await mission(c, g, {"late": []})
            worker = Worker(wc, [g], handle, tmp_path / "w.sqlite3", tick_seconds=0.2,
                            lease_seconds=3, once=True, transport="http",
                            offline_grace_seconds=2)
            task = asyncio.create_task(worker.run())
            await asyncio.wait_for(worker.ready.wait(), 20)
            await offer(c, g, "late", w1.name)
            await asyncio.wait_for(task, 40)
            await proxy.close()
            return worker

    worker = run(go(), 60)

    assert state == {"cancelled": True, "buffered": True}
    assert worker.outcome.state == "lease-lost"
    assert "grace deadline" in worker.outcome.message
    assert len(worker.offline.buffer) == 1  # kept: reconciled at the worker's next start
    from apps.ledger.verify import verify_group
    assert verify_group(g) == []


async def offline_worker(live_group, handler, body, tmp_path, **options):
    """Run `body(coordinator_client, worker, proxy)` beside a Worker with offline
    execution that reaches the server through a proxy the test can take down."""
    proxy = Switch(target_port(live_group))
    url = await behind(live_group, proxy)
    w1 = live_group.workers[0]
    async with live_group.client(live_group.coordinator) as c, \
            Client(url, w1.key, retries=1, backoff_seconds=0.05) as wc:
        await c.open_session()
        worker = Worker(wc, [live_group.group_id], lambda ctx: handler(ctx, proxy),
                        tmp_path / "w.sqlite3", tick_seconds=0.2, lease_seconds=30,
                        transport="http", offline_grace_seconds=off.DEFAULT_GRACE_SECONDS,
                        **options)
        worker.session.reconnect_seconds = 0.2
        stop = asyncio.Event()
        task = asyncio.create_task(worker.run(stop))
        await asyncio.wait_for(worker.ready.wait(), 20)
        try:
            return await body(c, worker, proxy)
        finally:
            stop.set()
            await asyncio.wait_for(task, 20)
            await proxy.close()


@pytestmark_live
def test_a_checkpoint_buffered_offline_is_where_the_owner_starts_again(live_group, tmp_path):
    from apps.ledger.verify import verify_group
    from tests.sdk.test_live import delivered, until

    g, w1 = live_group.group_id, live_group.workers[0]
    runs, seen = [], {}

    async def handle(ctx, proxy):
        runs.append(ctx.last_checkpoint)
        if ctx.last_checkpoint:  # started again, from the checkpoint buffered offline
            return await delivered(ctx)
        proxy.go_down()
        seen["posted"] = await ctx.post("the source is down; going on from the cache")
        seen["checkpointed"] = await ctx.checkpoint("halfway", milestones=["cached"])
        proxy.down = False  # the worker reconnects and reconciles both

    async def body(c, worker, proxy):
        await mission(c, g, {"resumable": []})
        await offer(c, g, "resumable", w1.name)

        async def submitted():
            item = await c.work_item(g, "resumable")
            return item if item["state"] == "submitted" else None
        item = await until(submitted, 40)
        return item, (await c.events(g, 0))["events"]

    item, events = run(offline_worker(live_group, handle, body, tmp_path), 90)

    assert seen["posted"]["buffered"] and seen["checkpointed"]["buffered"]
    assert runs[0] is None and runs[1]["progress"]["phase"] == "halfway"
    mine = [e for e in events if e.get("workItemId") == "resumable"]
    types = [e["type"] for e in mine]
    posted = next(e for e in mine if e["type"] == "conversation.message_posted")
    checkpointed = next(e for e in mine if e["type"] == "work.checkpointed")
    assert posted["commandId"] == seen["posted"]["commandId"]
    assert checkpointed["commandId"] == seen["checkpointed"]["commandId"]
    assert posted["data"]["text"] == "the source is down; going on from the cache"
    # Both reconciled against the lease the reconnection revoked, in the order buffered,
    # before the owner started again from the checkpoint under a new lease.
    first_lease = mine[types.index("work.started")]["data"]["leaseId"]
    assert posted["data"]["offline"]["leaseId"] == checkpointed["data"]["offline"]["leaseId"] \
        == first_lease
    assert types.index("lease.revoked") < types.index("conversation.message_posted") \
        < types.index("work.checkpointed")
    restarted = [e for e in mine if e["type"] == "work.started"][-1]
    assert restarted["sequence"] > checkpointed["sequence"]
    assert restarted["data"]["leaseId"] != first_lease
    assert item["lastCheckpoint"]["progress"]["phase"] == "halfway"
    assert types.count("work.submitted") == 1
    assert verify_group(g) == []


@pytestmark_live
def test_a_block_buffered_offline_blocks_the_item_on_reconnection(live_group, tmp_path):
    from apps.ledger.verify import verify_group
    from tests.sdk.test_live import until

    g, w1 = live_group.group_id, live_group.workers[0]
    seen = {}

    async def handle(ctx, proxy):
        proxy.go_down()
        ctx.charge(tokens=40)
        seen["blocked"] = await ctx.block("the API key for the archive", "waiting",
                                          milestones=["asked"])
        proxy.down = False

    async def body(c, worker, proxy):
        await mission(c, g, {"stuck": []})
        await offer(c, g, "stuck", w1.name)

        async def blocked():
            item = await c.work_item(g, "stuck")
            return item if item["state"] == "blocked" else None
        item = await until(blocked, 40)
        await until(lambda: worker.offline.buffer is not None and len(worker.offline.buffer) == 0)
        return item, (await c.events(g, 0))["events"]

    item, events = run(offline_worker(live_group, handle, body, tmp_path), 90)

    assert seen["blocked"]["buffered"]
    mine = [e for e in events if e.get("workItemId") == "stuck"]
    block = next(e for e in mine if e["type"] == "work.blocked")
    assert block["commandId"] == seen["blocked"]["commandId"]
    assert block["data"]["requiredResolution"] == "the API key for the archive"
    assert block["data"]["offline"]["leaseId"] == \
        next(e for e in mine if e["type"] == "work.started")["data"]["leaseId"]
    charge = next(e for e in mine if e["type"] == USAGE_RECORDED)
    assert charge["sequence"] == block["sequence"] - 1 and charge["data"]["delta"]["tokens"] == 40
    assert item["lastCheckpoint"]["progress"]["phase"] == "waiting"
    assert item["usage"]["tokens"] == 40
    assert verify_group(g) == []


class Clock:
    """A clock the test moves by hand."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_meter_gives_whole_seconds_and_carries_the_fractions():
    wall, cpu = Clock(), Clock()
    meter = off.Meter(wall=wall, cpu=cpu)
    wall.now, meter.cpu_seconds = 1.6, 0.7
    assert meter.take() == {"wallClockSeconds": 1}
    wall.now, meter.cpu_seconds = 2.5, 1.4
    assert meter.take() == {"wallClockSeconds": 1, "computeSeconds": 1}
    assert meter.take() == {}  # nothing new: nothing charged twice


def test_the_meter_counts_the_handlers_own_steps_only():
    cpu = Clock()
    meter = off.Meter(wall=Clock(), cpu=cpu)

    async def handler():
        cpu.now += 2.0  # the handler computes
        await asyncio.sleep(0)
        cpu.now += 0.5
        return "done"

    async def elsewhere():
        await asyncio.sleep(0)
        cpu.now += 10.0  # another task, while the handler waits: not the handler's

    async def both():
        other = asyncio.create_task(elsewhere())
        result = await asyncio.create_task(meter.run(handler()))
        await other
        return result

    assert asyncio.run(both()) == "done"
    assert meter.cpu_seconds == 2.5


def test_a_cancellation_reaches_the_metered_handler():
    meter = off.Meter()
    caught = []

    async def handler():
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            caught.append(True)
            raise

    async def go():
        task = asyncio.create_task(meter.run(handler()))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert caught == [True]


class Charging(FakeClient):
    """A client whose `send` follows a script: each entry an exception to raise or an
    answer to give, in order."""

    def __init__(self, *script):
        super().__init__()
        self.script = list(script)

    async def send(self, group_id, envelope):
        self.sent.append(envelope)
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step


def a_context(client, tmp_path):
    from mission_weave.sdk.queues import Item
    from mission_weave.sdk.scheduler import Assignment
    from mission_weave.sdk.worker import WorkContext

    worker = Worker(client, [G], None, tmp_path / "w.sqlite3", offline_grace_seconds=300,
                    measure_usage=False)
    item = Item(id="research", mission_id="m1", contract={}, contract_revision=1)
    assignment = Assignment("slot-1", G, "m1", "research", 2, T0, {}, {})
    return worker, WorkContext(worker, G, item, assignment, "lease-1", None)


LOST = httpx.ReadError("the connection closed before the answer")
NEVER_SENT = httpx.ConnectError("connection refused")
CHARGED = {"events": [{"type": USAGE_RECORDED}], "duplicate": True}


def test_a_charge_that_never_left_goes_with_the_next_command(tmp_path):
    client = Charging(NEVER_SENT)
    _, ctx = a_context(client, tmp_path)
    ctx.charge(tokens=50)
    with pytest.raises(httpx.ConnectError):
        run(ctx._charge_now(), 5)
    assert ctx.unsettled is None and ctx.usage.peek() == {"tokens": 50}


def test_a_charge_whose_answer_was_lost_and_that_was_decided_is_not_charged_again(tmp_path):
    client = Charging(LOST, CHARGED)
    worker, ctx = a_context(client, tmp_path)
    ctx.charge(tokens=50)
    with pytest.raises(httpx.ReadError):
        run(ctx._charge_now(), 5)
    assert ctx.unsettled is not None and not ctx.usage

    run(worker.offline.settle(ctx), 5)

    assert client.sent[1] == client.sent[0]  # the same envelope, so a duplicate
    assert ctx.unsettled is None and not ctx.usage


def test_a_charge_whose_answer_was_lost_and_that_was_never_decided_goes_again(tmp_path):
    stale = ApiError(401, "STALE_SESSION", "a newer session exists", {})
    client = Charging(LOST, stale)
    worker, ctx = a_context(client, tmp_path)
    ctx.charge(tokens=50, toolCalls=2)
    with pytest.raises(httpx.ReadError):
        run(ctx._charge_now(), 5)

    run(worker.offline.settle(ctx), 5)

    assert ctx.unsettled is None and ctx.usage.peek() == {"tokens": 50, "toolCalls": 2}


def test_a_lost_charge_never_decided_goes_into_the_first_binding_not_yet_sent(tmp_path):
    stale = ApiError(401, "STALE_SESSION", "a newer session exists", {})
    client = Charging(LOST, stale)
    worker, ctx = a_context(client, tmp_path)
    fill(worker.offline.buffer, ("research", "offline-1", 60), ("research", "offline-2", 70))
    ctx.charge(tokens=50)
    with pytest.raises(httpx.ReadError):
        run(ctx._charge_now(), 5)

    run(worker.offline.settle(ctx), 5)

    first, second = worker.offline.buffer.pending()
    assert first.binding["usage"] == {"tokens": 10 + 50}  # its own, and the lost charge
    assert second.binding["usage"] == {"tokens": 10}
    assert not ctx.usage and ctx.unsettled is None


def test_the_capability_token_is_not_for_side_effects_offline(tmp_path):
    worker, ctx = a_context(Charging(), tmp_path)
    ctx.capability_token = {"id": "cap-1", "bearer": "secret"}
    assert ctx.capability() == {"id": "cap-1", "bearer": "secret"}
    worker.offline.since = T0
    with pytest.raises(OfflineError, match="side effect"):
        ctx.capability()
    assert ctx.capability(side_effect=False)["id"] == "cap-1"  # a read goes on
