"""The SDK against a live server (daphne + PostgreSQL + Redis, tests/sdk/conftest.py):
sessions, signed commands with idempotent retry, blobs, the inbox over the WebSocket,
the Worker running an item to `submitted`, preemption, CURSOR_TOO_OLD recovery."""

import asyncio
import inspect
import uuid
from datetime import timedelta

import httpx
import pytest

from mission_weave.protocol.timefmt import format_time
from mission_weave.sdk.client import ApiError, Client, blob_hash, utcnow
from mission_weave.sdk.coordinator import Coordinator
from mission_weave.sdk.demo import handle as demo_handle
from mission_weave.sdk.inbox import CursorStore, Inbox
from mission_weave.sdk.worker import Worker
from tests.samples import contract
from tests.sdk.conftest import OWNER, run

# The server is another process: what the tests set up must be committed.
pytestmark = pytest.mark.django_db(transaction=True)

def work_contract(depends_on=(), **overrides) -> dict:
    return contract(capabilities=[{"id": "research", "version": "1"}],
                    dependencies={"workItems": list(depends_on), "policy": "all_verified"},
                    **overrides)


async def mission(c: Client, group_id: str, items: dict) -> str:
    """A Mission with WorkItems {id: [dependency ids]}, authorized by coordinator `c`."""
    mission_id = f"m-{uuid.uuid4().hex[:8]}"
    await c.command(group_id, "mission.create", {"missionId": mission_id, "title": "SDK test",
                                                  "ownerId": OWNER,
                                                  "coordinatorId": c.principal})
    for item_id, depends_on in items.items():
        await c.command(group_id, "work.authorize", {
            "workItemId": item_id, "missionId": mission_id,
            "contract": work_contract(depends_on)})
    return mission_id


async def offer(c: Client, group_id: str, item_id: str, *agents) -> dict:
    return await c.command(group_id, "work.offer", {
        "candidates": list(agents), "mode": "sequential",
        "expiresAt": format_time(utcnow() + timedelta(minutes=10))}, workItemId=item_id)


async def delivered(ctx, method: str = "test") -> dict:
    """A handler's result: the deliverable published as an artifact (the server takes a
    submission only with one) and passing Evidence for every criterion."""
    summary = await ctx.publish_artifact(f"# {ctx.contract['goal']}\n".encode(),
                                         "text/markdown")
    criteria = [c["id"] for c in ctx.contract["acceptanceCriteria"]]
    return {"evidence": [ctx.evidence(criteria, method, "pass", artifacts=[summary])],
            "artifacts": [summary]}


async def until(predicate, timeout: float = 20, every: float = 0.1):
    """The first truthy value of `predicate()` (a plain or an async function)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("timed out waiting")
        await asyncio.sleep(every)


# --- sessions and commands ------------------------------------------------------------

def test_session_membership_command_and_a_duplicate(live_group):
    g = live_group.group_id

    async def scenario():
        async with live_group.client(live_group.coordinator) as c:
            session = await c.open_session()
            member = await c.membership(g)
            envelope = c.envelope(g, "mission.create", {"title": "Dup", "ownerId": OWNER,
                                                        "coordinatorId": c.principal},
                                  member["membershipEpoch"])
            first = await c.send(g, envelope)
            again = await c.send(g, envelope)
            changed = c.envelope(g, "mission.create", {"title": "Other", "ownerId": OWNER,
                                                       "coordinatorId": c.principal},
                                 member["membershipEpoch"], id=envelope["id"])
            with pytest.raises(ApiError) as refused:
                await c.send(g, changed)
            head = (await c.events(g, 0))["headSequence"]
            return session, member, first, again, refused.value, head

    session, member, first, again, refused, head = run(scenario())

    assert session["sessionEpoch"] >= 1 and session["token"]
    assert member["roles"] == ["coordinator"] and member["membershipEpoch"] >= 1
    assert member["principal"] == live_group.coordinator.key.principal
    assert (first["duplicate"], again["duplicate"]) == (False, True)
    assert again["commandId"] == first["commandId"]
    assert [e["id"] for e in again["events"]] == [e["id"] for e in first["events"]]
    assert (refused.status, refused.code) == (409, "IDEMPOTENCY_MISMATCH")
    assert head == 1


class LoseFirstAnswer(httpx.AsyncBaseTransport):
    """The server gets the first command, the client never sees the answer."""

    def __init__(self):
        self.inner = httpx.AsyncHTTPTransport()
        self.lost = 0

    async def handle_async_request(self, request):
        response = await self.inner.handle_async_request(request)
        if request.url.path.endswith("/commands") and not self.lost:
            await response.aread()
            self.lost += 1
            raise httpx.ReadError("connection reset after the server answered", request=request)
        return response

    async def aclose(self):
        await self.inner.aclose()


def test_a_lost_answer_is_retried_with_the_same_id_and_answered_as_a_duplicate(live_group):
    g, url = live_group.group_id, live_group.server.url
    transport = LoseFirstAnswer()

    async def scenario():
        http = httpx.AsyncClient(base_url=url, transport=transport)
        async with Client(url, live_group.coordinator.key, http=http,
                          backoff_seconds=0.05) as c:
            await c.open_session()
            answer = await c.command(g, "mission.create", {
                "title": "Retried", "ownerId": OWNER, "coordinatorId": c.principal})
            return answer, (await c.events(g, 0))

    answer, log = run(scenario())

    assert transport.lost == 1
    assert answer["duplicate"] is True
    assert log["headSequence"] == 1
    assert [e["type"] for e in log["events"]] == ["mission.created"]


def test_a_stale_session_is_refused(live_group):
    g = live_group.group_id

    async def scenario():
        async with live_group.client(live_group.coordinator) as c:
            await c.open_session()
            member = await c.membership(g)
            old = c.envelope(g, "mission.create", {"title": "Old", "ownerId": OWNER,
                                                   "coordinatorId": c.principal},
                             member["membershipEpoch"])
            await c.open_session()  # supersedes the first session
            with pytest.raises(ApiError) as refused:
                await c.send(g, old)
            return refused.value

    assert run(scenario()).code == "STALE_SESSION"


# --- blobs ------------------------------------------------------------------------------

def test_blob_upload_and_verified_download(live_group, tmp_path):
    data = b"mission weave " * 10_000
    source = tmp_path / "source.bin"
    source.write_bytes(data + b"!")

    async def scenario():
        async with live_group.client(live_group.workers[0]) as c:
            await c.open_session()
            name = await c.put_blob(data)
            from_file = await c.put_blob(source)
            fetched = await c.get_blob(name)
            saved = await c.get_blob(from_file, into=tmp_path / "copy.bin")
            return name, from_file, fetched, saved

    name, from_file, fetched, saved = run(scenario())

    assert name == blob_hash(data) and fetched == data
    assert from_file == blob_hash(data + b"!")
    assert saved.read_bytes() == data + b"!"


def test_a_download_whose_bytes_do_not_match_the_name_is_refused_and_not_kept(tmp_path):
    name = blob_hash(b"the real bytes")

    def serve(request):
        return httpx.Response(200, content=b"other bytes")

    async def scenario():
        http = httpx.AsyncClient(base_url="http://test", transport=httpx.MockTransport(serve))
        async with Client("http://test", None, http=http) as c:
            with pytest.raises(ApiError) as refused:
                await c.get_blob(name, into=tmp_path / "blob.bin")
            return refused.value

    refused = run(scenario())

    assert refused.code == "HASH_MISMATCH"
    assert list(tmp_path.iterdir()) == []


# --- the inbox over the WebSocket -------------------------------------------------------

def test_the_inbox_follows_the_group_live_and_resumes_after_a_restart(live_group, tmp_path):
    g = live_group.group_id
    cursors = tmp_path / "inbox.sqlite3"

    async def follow(c, seen, commands):
        inbox = Inbox(c, [g], lambda e: _append(seen, e), CursorStore(cursors), transport="ws",
                      gap_seconds=0.5)
        stop = asyncio.Event()
        task = asyncio.create_task(inbox.run(stop))
        await asyncio.wait_for(inbox.connected.wait(), 10)
        await commands()
        head = (await c.events(g, 0, 1))["headSequence"]
        await until(lambda: _true(inbox.cursor(g) == head))
        stop.set()
        await task
        return inbox, head

    async def scenario():
        async with live_group.client(live_group.coordinator) as c:
            await c.open_session()
            first, second = [], []

            async def some_work():
                await mission(c, g, {f"a{uuid.uuid4().hex[:6]}": [] for _ in range(10)})

            inbox1, head1 = await follow(c, first, some_work)
            await mission(c, g, {"while-away": []})  # appended while no inbox runs
            inbox2, head2 = await follow(c, second, some_work)
            return first, second, inbox1, inbox2, head1, head2

    first, second, inbox1, _inbox2, head1, head2 = run(scenario())

    assert [e["sequence"] for e in first] == list(range(1, head1 + 1))
    assert inbox1.received["ws"] == head1  # live, over the WebSocket
    assert [e["sequence"] for e in second] == list(range(head1 + 1, head2 + 1))
    assert CursorStore(cursors).get(g)[0] == head2


async def _append(seen, event):
    seen.append(event)


async def _true(value):
    return value


# --- the Worker -------------------------------------------------------------------------

def run_worker(live_group, agent, handler, body, tmp_path, timeout=60, **options):
    """Run `body(coordinator_client, worker)` beside a running Worker."""
    async def scenario():
        async with live_group.client(live_group.coordinator) as c, \
                live_group.client(agent) as wc:
            await c.open_session()
            worker = Worker(wc, [live_group.group_id], handler, tmp_path / "w.sqlite3",
                            tick_seconds=0.2, **options)
            stop = asyncio.Event()
            task = asyncio.create_task(worker.run(stop))
            await asyncio.wait_for(worker.ready.wait(), 20)
            try:
                return await body(c, worker)
            finally:
                stop.set()
                await asyncio.wait_for(task, 20)
    return run(scenario(), timeout)


def test_the_worker_runs_an_offered_item_to_submitted_with_evidence(live_group, tmp_path):
    g, w1 = live_group.group_id, live_group.workers[0]

    async def body(c, worker):
        await mission(c, g, {"task": []})
        await offer(c, g, "task", w1.name)

        async def submitted():
            item = await c.work_item(g, "task")
            return item if item["state"] == "submitted" else None
        item = await until(submitted)
        # The server shows the submission before the Worker has read its answer.
        await until(lambda: worker.submitted)
        audit = await c.get(f"/api/v1/groups/{g}/work-items/task/audit")
        return item, worker, list(audit["events"])

    item, worker, events = run_worker(live_group, w1, demo_handle, body, tmp_path)

    cited = {c for record in item["submission"]["evidence"] for c in record["criteria"]}
    assert cited == {"ac1", "ac2"}
    assert all(r["producer"] == w1.key.principal for r in item["submission"]["evidence"])
    assert item["owner"] == w1.name
    assert worker.submitted == [(g, "task")]
    types = [e["type"] for e in events]
    assert types.index("work.offer_accepted") < types.index("work.schedule_disclosed") \
        < types.index("work.started") < types.index("work.submitted")
    disclosed = next(e["data"] for e in events if e["type"] == "work.schedule_disclosed")
    assert set(disclosed) == {"estimatedStart", "estimatedCompletion", "confidence",
                              "capacityStatus", "calculatedAt"}


def test_a_preemption_request_reaches_the_handler_which_checkpoints(live_group, tmp_path):
    g, w1 = live_group.group_id, live_group.workers[0]
    reached = []

    async def patient(ctx):
        if ctx.last_checkpoint:  # resumed after the preemption: finish
            return await delivered(ctx)
        await asyncio.wait_for(ctx.preemption.wait(), 30)
        reached.append(ctx.preemption_requested)
        await ctx.raise_if_preempted("halfway", milestones=["first half"])

    async def body(c, worker):
        await mission(c, g, {"long": []})
        await offer(c, g, "long", w1.name)

        async def active():
            item = await c.work_item(g, "long")
            return item if item["state"] == "active" else None
        await until(active)
        await c.command(g, "work.request_preemption", {"reason": "urgent work"},
                        workItemId="long")

        async def resubmitted():
            item = await c.work_item(g, "long")
            return item if item["state"] == "submitted" else None
        item = await until(resubmitted)
        audit = await c.get(f"/api/v1/groups/{g}/work-items/long/audit")
        return item, [e["type"] for e in audit["events"]]

    item, types = run_worker(live_group, w1, patient, body, tmp_path)

    assert reached == [True]
    assert item["lastCheckpoint"]["progress"]["phase"] == "halfway"
    assert types.index("work.preemption_requested") < types.index("work.checkpointed") \
        < types.index("work.submitted")
    assert types.count("work.started") == 2


def test_two_workers_and_the_demo_coordinator_finish_a_dependency_graph(live_group, tmp_path):
    g = live_group.group_id
    graph = {"research": [], "outline": ["research"], "figures": ["research"],
             "report": ["outline", "figures"]}

    async def scenario():
        async with live_group.client(live_group.coordinator) as c:
            await c.open_session()
            await mission(c, g, graph)
        stop = asyncio.Event()
        clients = [live_group.client(a) for a in [live_group.coordinator, *live_group.workers]]
        coordinator = Coordinator(clients[0], g, tmp_path / "c.sqlite3", tick_seconds=0.3)
        workers = [Worker(wc, [g], demo_handle, tmp_path / f"w{i}.sqlite3", tick_seconds=0.2)
                   for i, wc in enumerate(clients[1:])]
        tasks = [asyncio.create_task(x.run(stop)) for x in [*workers, coordinator]]
        reader = live_group.client(live_group.workers[0])
        try:
            await asyncio.wait_for(asyncio.gather(*(w.ready.wait() for w in workers)), 20)
            reader.token = clients[1].token  # borrows worker 1's session to read

            async def all_verified():
                items = {i["id"]: i["state"] for i in await reader.work_items(g)}
                return items if set(items.values()) == {"verified"} else None
            states = await until(all_verified, timeout=60, every=0.3)
        finally:
            stop.set()
            await asyncio.gather(*tasks)
            for client in [*clients, reader]:
                await client.aclose()
        return states, workers

    states, workers = run(scenario(), 90)

    assert set(states) == set(graph)
    done = [item for w in workers for _, item in w.submitted]
    assert sorted(done) == sorted(graph)  # each submitted once, by one of the workers
    # Each acceptance followed the server's review (§13.2), not the worker's claim.
    from apps.ledger.models import Event
    verified = Event.objects.filter(group_id=g, type="work.verified")
    assert {e.data["review"]["verdict"] for e in verified} == {"pass"}
    assert Event.objects.filter(group_id=g, type="review.evaluated").count() >= len(graph)


# --- CURSOR_TOO_OLD ---------------------------------------------------------------------

def test_cursor_too_old_is_recovered_from_the_signed_snapshot(live_group, tmp_path):
    from apps.ledger import snapshots
    from apps.ledger.archive import archive_through

    g = live_group.group_id

    async def prepare():
        async with live_group.client(live_group.coordinator) as c:
            await c.open_session()
            await mission(c, g, {"x1": [], "x2": []})
            return (await c.events(g, 0))["headSequence"]

    archived_head = run(prepare())
    archive_through(snapshots.take(g))

    received = []

    async def scenario():
        async with live_group.client(live_group.coordinator) as c:
            await c.open_session()
            snapshot_docs = []

            async def on_snapshot(group_id, document):
                snapshot_docs.append(document)

            inbox = Inbox(c, [g], lambda e: _append(received, e),
                          CursorStore(tmp_path / "old.sqlite3"), on_snapshot, transport="ws",
                          gap_seconds=0.5)
            stop = asyncio.Event()
            task = asyncio.create_task(inbox.run(stop))
            await asyncio.wait_for(inbox.connected.wait(), 10)
            await c.command(g, "work.authorize", {"workItemId": "x3", "missionId": (
                await c.work_item(g, "x1"))["missionId"], "contract": work_contract()})
            head = (await c.events(g, archived_head, 1))["headSequence"]
            await until(lambda: _true(inbox.cursor(g) == head))
            stop.set()
            await task
            return snapshot_docs, head

    snapshot_docs, head = run(scenario())

    assert len(snapshot_docs) == 1
    assert snapshot_docs[0]["sequence"] == archived_head
    assert {i["id"] for i in snapshot_docs[0]["state"]["workItems"]} == {"x1", "x2"}
    assert [e["sequence"] for e in received] == list(range(archived_head + 1, head + 1))


def test_a_worker_started_after_archiving_rebuilds_its_queues_from_the_snapshot(live_group,
                                                                                tmp_path):
    from apps.ledger import snapshots
    from apps.ledger.archive import archive_through

    g, w1 = live_group.group_id, live_group.workers[0]

    async def prepare():
        async with live_group.client(live_group.coordinator) as c:
            await c.open_session()
            await mission(c, g, {"kept": []})
            await offer(c, g, "kept", w1.name)

    run(prepare())
    archive_through(snapshots.take(g))  # the offer is now only in the snapshot

    async def body(c, worker):
        async def submitted():
            item = await c.work_item(g, "kept")
            return item if item["state"] == "submitted" else None
        item = await until(submitted)
        await until(lambda: worker.submitted)  # the Worker has read the answer too
        return item, worker

    item, worker = run_worker(live_group, w1, demo_handle, body, tmp_path)

    assert item["owner"] == w1.name
    assert worker.submitted == [(g, "kept")]


def test_a_changed_membership_is_read_again_and_the_command_sent_once_more(live_group):
    from apps.identity import registry
    from apps.ledger.models import Group

    g = live_group.group_id

    async def cache_membership():
        async with live_group.client(live_group.coordinator) as c:
            await c.open_session()
            return await c.membership(g), c.token, c.session_epoch

    before, token, epoch = run(cache_membership())
    registry.add_member(Group.objects.get(id=g), live_group.coordinator.key.principal,
                        ["coordinator", "reviewer"])

    async def command():
        async with live_group.client(live_group.coordinator) as c:
            c.token, c.session_epoch = token, epoch
            c._memberships[g] = before  # what it read before the change
            answer = await c.command(g, "mission.create", {
                "title": "After", "ownerId": OWNER, "coordinatorId": c.principal})
            return answer, await c.membership(g)

    answer, after = run(command())

    assert answer["duplicate"] is False
    assert after["membershipEpoch"] == before["membershipEpoch"] + 1


def test_the_worker_command_line_runs_an_item_and_stops_on_sigterm(live_group, tmp_path):
    import subprocess
    import sys

    g, w2 = live_group.group_id, live_group.workers[1]

    async def prepare():
        async with live_group.client(live_group.coordinator) as c:
            await c.open_session()
            await mission(c, g, {"cli": []})
            await offer(c, g, "cli", w2.name)
            return c.token, c.session_epoch

    token, epoch = run(prepare())
    process = subprocess.Popen(
        [sys.executable, "-m", "mission_weave.sdk.worker", "--key", str(w2.key_file),
         "--group", g, "--handler", "mission_weave.sdk.demo:handle",
         "--url", live_group.server.url, "--cursors", str(tmp_path / "cli.sqlite3")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        async def submitted():
            async with live_group.client(live_group.coordinator) as c:
                c.token, c.session_epoch = token, epoch

                async def state():
                    return (await c.work_item(g, "cli"))["state"] == "submitted"
                return await until(state, timeout=40, every=0.3)

        assert run(submitted(), timeout=60)
    finally:
        process.terminate()
        code = process.wait(timeout=20)

    assert code == 0, process.stderr.read().decode()[-2000:]


def test_the_lease_is_renewed_while_a_long_handler_runs(live_group, tmp_path):
    g, w1 = live_group.group_id, live_group.workers[0]

    async def slow(ctx):
        await asyncio.sleep(4.5)  # past the 3-second lease: only renewals keep it
        return await delivered(ctx)

    async def body(c, worker):
        await mission(c, g, {"slow": []})
        await offer(c, g, "slow", w1.name)

        async def submitted():
            item = await c.work_item(g, "slow")
            return item if item["state"] == "submitted" else None
        item = await until(submitted)
        # The server shows the submission before the Worker has read its answer.
        await until(lambda: worker.submitted)
        audit = await c.get(f"/api/v1/groups/{g}/work-items/slow/audit")
        return item, [e["type"] for e in audit["events"]]

    _item, types = run_worker(live_group, w1, slow, body, tmp_path, lease_seconds=3)

    assert types.count("work.started") == 1
    assert types.count("lease.renewed") >= 2
    assert "lease.expired" not in types
