"""Bounded offline execution (§11.5), the SDK's half: the durable buffer (offline.py) and,
against the live server (tests/sdk/conftest.py) behind a proxy that can refuse every
connection, a Worker whose handler goes on while the Group service is unreachable, buffers
its progress with the binding and its charge, reconnects, reconciles (every buffered
progress exactly once, in order, charged) and only then submits."""

import asyncio
from datetime import datetime, timedelta, timezone

import httpx
import pytest

from apps.bench.harness import free_port
from mission_weave.protocol import canonical
from mission_weave.sdk import OfflineError
from mission_weave.sdk import offline as off
from mission_weave.sdk.client import ApiError, Client
from mission_weave.sdk.keys import AgentKey, new_key
from mission_weave.sdk.offline import URN, OfflineBuffer, Usage
from mission_weave.sdk.worker import Worker
from tests.sdk.conftest import run
from tests.sdk.test_chaos import CuttingProxy
from tests.sdk.test_live import mission, offer

T0 = datetime(2026, 11, 29, 8, 0, tzinfo=timezone.utc)
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
    from mission_weave.core.offline import BINDING
    from mission_weave.protocol import jsonschema_check

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


class Answering:
    """A client whose `send` answers from a script keyed by the body's phase."""

    def __init__(self, refuse=None):
        self.inner = Client("http://127.0.0.1:9", key())
        self.inner.session_epoch = 5
        self.session_epoch = 5
        self.refuse = refuse or {}
        self.sent = []

    def envelope(self, *args, **kwargs):
        return self.inner.envelope(*args, **kwargs)

    async def membership(self, group_id, refresh=False):
        return {"membershipEpoch": 1}

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
            worker.reconnect_seconds = 0.2
            task = asyncio.create_task(worker.run())
            await asyncio.wait_for(worker.ready.wait(), 20)
            await offer(c, g, "offline", w1.name)
            while not any(ctx for _, ctx in worker.running.values()):
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.5)  # the artifact is published
            proxy.go_down()
            offline_now.set()
            await asyncio.wait_for(back.wait(), 30)
            buffered = len(worker.buffer)
            proxy.down = False
            await asyncio.wait_for(task, 40)
            await proxy.close()
            events = (await c.events(g, 0))["events"]
            return worker, buffered, events, await c.work_item(g, "offline")

    worker, buffered, events, item = run(go(), 90)

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
    assert [e["data"]["delta"] for e in charged] == \
        [{"tokens": 100, "toolCalls": 1}, {"tokens": 200, "toolCalls": 1},
         {"tokens": 300, "toolCalls": 1}]
    for usage, progress in zip(charged, reported):
        assert usage["sequence"] == progress["sequence"] - 1  # charged, then applied
        assert progress["data"]["offline"]["leaseId"] == usage["data"]["leaseId"]
    assert item["usage"]["tokens"] == 600 and item["usage"]["toolCalls"] == 3
    types = [e["type"] for e in mine]
    # reconciled before the item started again, and submitted only under the new lease
    assert types.index("lease.revoked") < types.index("work.progress_reported")
    last_start = max(i for i, t in enumerate(types) if t == "work.started")
    assert last_start > max(i for i, t in enumerate(types) if t == "work.progress_reported")
    assert types.count("work.submitted") == 1 and types.index("work.submitted") > last_start
    assert worker.buffer is not None and len(worker.buffer) == 0
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
    assert len(worker.buffer) == 1  # kept: reconciled at the worker's next start
