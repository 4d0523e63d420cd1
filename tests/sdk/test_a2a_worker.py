"""`mw-a2a-worker` against the live server (tests/sdk/conftest.py) and an A2A agent built
on a2a-sdk's server classes (a2a_test_agent.py): `register` makes the Agent from the
agent's card, and the bridge's Worker runs a WorkItem as an A2A task: progress, a
question relayed as a block and answered in the Conversation, the artifact published and
verified; a cancellation cancels the A2A task."""

import asyncio
import json
import stat
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from a2a.types import Part

from mission_weave.a2a_bridge.worker import A2AWork
from mission_weave.a2a_bridge.worker_agent import AgentBearer, AgentError, RemoteAgent
from mission_weave.a2a_bridge.worker_cli import beside
from mission_weave.a2a_bridge.worker_cli import main as mw_a2a_worker
from mission_weave.a2a_bridge.worker_state import TaskLinks
from mission_weave.protocol.timefmt import format_time
from mission_weave.sdk.client import ApiError, Client, utcnow
from mission_weave.sdk.keys import AgentKey
from mission_weave.sdk.worker import Worker
from tests.samples import contract
from tests.sdk.a2a_test_agent import QUESTION, REFUSAL, TestAgent
from tests.sdk.conftest import OWNER, run
from tests.sdk.test_live import until

pytestmark = pytest.mark.django_db(transaction=True)

ANSWER = "The risks section, please."
SUMMARIZE = [{"id": "summarize", "version": "2"}]  # the test agent is version 2.1.0
# Criteria the server's review decides by itself (deterministic checks, §13.2).
CRITERIA = [{"id": "ac1", "description": "A Markdown summary",
             "method": "check:media-type:text/markdown"},
            {"id": "ac2", "description": "Not empty", "method": "check:non-empty"}]


@pytest.fixture
def a2a_agent(request):
    """The test agent; its script (`asks` unless parametrized indirectly) in a2a_test_agent."""
    agent = TestAgent(getattr(request, "param", "asks")).start()
    yield agent
    agent.stop()


def register(live_group, agent, tmp_path, capsys) -> tuple[AgentKey, dict, str]:
    """`mw-a2a-worker register`, then the operator commands it prints, done the test's
    way (the registry): the bridge's key, its Agent Card and what register printed."""
    from apps.identity import registry
    from apps.ledger.models import Group

    agent_id = f"a2a-{uuid.uuid4().hex[:8]}"
    key_file = tmp_path / "agents" / f"{agent_id}.json"
    mw_a2a_worker(["register", "--a2a-url", agent.url, "--agent-id", agent_id,
                   "--group", live_group.group_id, "--out", str(key_file)])
    printed = capsys.readouterr().out
    card = json.loads((tmp_path / "agents" / f"{agent_id}.card.json").read_text())
    key = AgentKey.load(key_file)
    registered = registry.register_agent(agent_id, key.public_key, card)
    assert registered.key_id == key.key_id
    registry.add_member(Group.objects.get(id=live_group.group_id), key.principal, ["worker"])
    return key, card, printed


def key_file(tmp_path, key) -> Path:
    return tmp_path / "agents" / f"{key.agent_id}.json"


def bridge(live_group, key, agent, tmp_path, body, timeout=60):
    """Run `body(coordinator_client, worker)` beside the bridge's Worker, whose links and
    Cursors are where `mw-a2a-worker run` keeps them (beside the key)."""
    async def scenario():
        remote = await RemoteAgent.connect(agent.url)
        async with live_group.client(live_group.coordinator) as c, \
                Client(live_group.server.url, key, backoff_seconds=0.05) as wc:
            await c.open_session()
            links_file = beside(key_file(tmp_path, key), ".a2a-tasks.json")
            worker = Worker(wc, [live_group.group_id], A2AWork(remote, TaskLinks(links_file)),
                            beside(key_file(tmp_path, key), ".cursors.sqlite3"),
                            tick_seconds=0.2)
            stop = asyncio.Event()
            task = asyncio.create_task(worker.run(stop))
            await asyncio.wait_for(worker.ready.wait(), 20)
            try:
                return await body(c, worker)
            finally:
                stop.set()
                await asyncio.wait_for(task, 20)
                await remote.aclose()
    return run(scenario(), timeout)


def links(tmp_path, key) -> dict:
    """The bridge's WorkItem -> A2A task links."""
    links_file = beside(key_file(tmp_path, key), ".a2a-tasks.json")
    return json.loads(links_file.read_text()) if links_file.exists() else {}


async def mission(c, group_id, items: dict) -> dict:
    """A Mission of WorkItems {id: [dependency ids]} needing `summarize` v2: their
    contracts."""
    mission_id = f"m-{uuid.uuid4().hex[:8]}"
    await c.command(group_id, "mission.create", {"missionId": mission_id, "title": "A2A",
                                                 "ownerId": OWNER,
                                                 "coordinatorId": c.principal})
    contracts = {}
    for item_id, depends_on in items.items():
        contracts[item_id] = contract(
            capabilities=SUMMARIZE, acceptanceCriteria=CRITERIA,
            dependencies={"workItems": depends_on, "policy": "all_verified"})
        await c.command(group_id, "work.authorize", {
            "workItemId": item_id, "missionId": mission_id, "contract": contracts[item_id]})
    return contracts


async def offer(c, group_id, item_id, agent_id) -> None:
    await c.command(group_id, "work.offer", {
        "candidates": [agent_id], "mode": "sequential",
        "expiresAt": format_time(utcnow() + timedelta(minutes=5))}, workItemId=item_id)


def in_state(c, group_id, item_id, state):
    async def check():
        item = await c.work_item(group_id, item_id)
        return item if item["state"] == state else None
    return check


async def answer(c, group_id, item_id, text=ANSWER) -> dict:
    """Wait for the item to block, answer in its Conversation and unblock it: the
    blocked item."""
    blocked = await until(in_state(c, group_id, item_id, "blocked"), timeout=30)
    await c.command(group_id, "conversation.post", {"kind": "message", "text": text},
                    workItemId=item_id)
    await c.command(group_id, "work.unblock", {"resolution": "answered in the Conversation"},
                    workItemId=item_id)
    return blocked


async def accept(c, group_id, item_id) -> dict:
    """Wait for the submission and accept it once the server's review (inline) passed
    it: the submitted item."""
    submitted = await until(in_state(c, group_id, item_id, "submitted"), timeout=30)

    async def accepted():
        how = {"id": f"ev-{uuid.uuid4().hex[:12]}", "subject": f"workItem:{item_id}",
               "criteria": ["ac1", "ac2"], "method": "test coordinator: the review",
               "result": "pass", "producer": c.principal,
               "timestamp": format_time(utcnow()), "artifacts": []}
        try:
            return await c.command(group_id, "work.accept_result", {"evidence": [how]},
                                   workItemId=item_id)
        except ApiError as error:
            if error.code != "REVIEW_PENDING":
                raise
            return None
    await until(accepted)
    return submitted


def test_register_writes_the_card_with_the_skills_as_capabilities(live_group, a2a_agent,
                                                                  tmp_path, capsys):
    key, card, printed = register(live_group, a2a_agent, tmp_path, capsys)

    assert card == {"version": "2.1.0", "maxConcurrency": 1,
                    "capabilities": [{"id": "summarize", "version": "2"},
                                     {"id": "research", "version": "2"}]}
    key_file = tmp_path / "agents" / f"{key.agent_id}.json"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert key.group_id == live_group.group_id
    assert (f"python manage.py mw_register_agent {key.agent_id} "
            f"--public-key={key.public_key} --card {key_file.with_suffix('')}.card.json"
            ) in printed
    assert (f"python manage.py mw_add_member {live_group.group_id} {key.principal} "
            "--roles worker") in printed
    assert key.public_key in printed and "privateKey" not in printed


def test_register_says_so_when_the_agent_cannot_be_reached(tmp_path, capsys):
    with pytest.raises(SystemExit) as refused:
        mw_a2a_worker(["register", "--a2a-url", "http://user:secret@127.0.0.1:9",
                       "--agent-id", "nobody", "--group", "grp_x",
                       "--out", str(tmp_path / "nobody.json")])

    said = str(refused.value)
    assert said.startswith("fetching the Agent Card with the A2A agent http://127.0.0.1:9 "
                           "failed: AgentCardResolutionError")
    assert "secret" not in said
    assert not (tmp_path / "nobody.json").exists()


def test_the_agent_works_asks_is_answered_in_the_conversation_and_is_verified(
        live_group, a2a_agent, tmp_path, capsys):
    g = live_group.group_id
    key, _, _ = register(live_group, a2a_agent, tmp_path, capsys)

    async def body(c, worker):
        work = (await mission(c, g, {"brief": []}))["brief"]
        await offer(c, g, "brief", key.agent_id)
        blocked = await answer(c, g, "brief")
        links_while_blocked = links(tmp_path, key)
        submitted = await accept(c, g, "brief")
        item = await c.work_item(g, "brief")
        audit = await c.get(f"/api/v1/groups/{g}/work-items/brief/audit")
        artifact = submitted["submission"]["artifacts"][0]
        manifest = (await c.get(f"/api/v1/groups/{g}/artifacts/{artifact}"))["manifest"]
        return (work, blocked, links_while_blocked, submitted, item, audit["events"],
                await c.get_blob(artifact), manifest)

    work, blocked, linked, submitted, item, events, data, manifest = bridge(
        live_group, key, a2a_agent, tmp_path, body)

    assert item["state"] == "verified"
    progress = [e["data"]["progress"] for e in events if e["type"] == "work.progress_reported"]
    assert progress == [{"phase": "a2a:working", "milestones": ["reading the contract"]},
                        {"phase": "a2a:working", "milestones": ["drafting the summary"]}]
    assert blocked["requiredResolution"] == QUESTION
    [(link_key, link)] = linked.items()
    assert link_key == f"{g}/brief" and link["blockedAt"] is not None
    # The agent got the contract (its brief as text, the whole as data), then the answer.
    assert [m.task_id for m in a2a_agent.seen.messages] == [link["taskId"]] * 2
    assert a2a_agent.seen.texts()[0].startswith(f"Goal: {work['goal']}\n")
    assert "- ac2: Not empty" in a2a_agent.seen.texts()[0]
    [sent] = a2a_agent.seen.data()
    assert sent["acceptanceCriteria"] == work["acceptanceCriteria"]
    assert a2a_agent.seen.texts()[1] == ANSWER
    # Its artifact, published and cited by Evidence for each criterion.
    assert data == f"# Summary\n\nFocused on: {ANSWER}\n".encode()
    assert manifest["mediaType"] == "text/markdown" and manifest["producer"] == key.agent_id
    evidence = submitted["submission"]["evidence"]
    assert [(e["criteria"], e["method"], e["result"], e["artifacts"]) for e in evidence] == [
        (["ac1"], "a2a:Test Summarizer", "pass", [manifest["hash"]]),
        (["ac2"], "a2a:Test Summarizer", "pass", [manifest["hash"]])]
    types = [e["type"] for e in events]
    assert types.count("work.started") == 2
    assert types.index("work.blocked") < types.index("conversation.message_posted") \
        < types.index("work.unblocked") < types.index("work.submitted")
    assert links(tmp_path, key) == {}


def test_the_command_line_bridge_goes_on_with_the_task_a_stopped_one_began(
        live_group, a2a_agent, tmp_path, capsys):
    g = live_group.group_id
    key, _, _ = register(live_group, a2a_agent, tmp_path, capsys)

    async def until_blocked(c, worker):
        await mission(c, g, {"brief": []})
        await offer(c, g, "brief", key.agent_id)
        return await answer(c, g, "brief")  # answered once that bridge is stopped

    bridge(live_group, key, a2a_agent, tmp_path, until_blocked)
    task_id = links(tmp_path, key)[f"{g}/brief"]["taskId"]
    log = tmp_path / "mw-a2a-worker.log"
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [Path(sys.executable).parent / "mw-a2a-worker", "run", "--url",
             live_group.server.url, "--key", key_file(tmp_path, key), "--a2a-url",
             a2a_agent.url], stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        async def verified():
            async with live_group.client(live_group.coordinator) as c:
                await c.open_session()
                await accept(c, g, "brief")
                return await c.work_item(g, "brief")
        item = run(verified())
    finally:
        process.terminate()
        code = process.wait(timeout=20)

    said = log.read_text()
    assert code == 0, said[-2000:]
    private_key = json.loads(key_file(tmp_path, key).read_text())["privateKey"]
    assert private_key not in said and "Bearer" not in said and "Traceback" not in said
    assert item["state"] == "verified"
    assert [m.task_id for m in a2a_agent.seen.messages] == [task_id] * 2
    assert a2a_agent.seen.texts()[1] == ANSWER
    assert links(tmp_path, key) == {}


def test_the_dependencies_artifacts_go_to_the_agent_as_file_parts(live_group, a2a_agent,
                                                                  tmp_path, capsys):
    g = live_group.group_id
    key, _, _ = register(live_group, a2a_agent, tmp_path, capsys)

    async def body(c, worker):
        await mission(c, g, {"sources": [], "brief": ["sources"]})
        await offer(c, g, "sources", key.agent_id)
        await answer(c, g, "sources")
        sources = (await accept(c, g, "sources"))["submission"]["artifacts"]
        await offer(c, g, "brief", key.agent_id)
        await answer(c, g, "brief", "The conclusions.")  # another summary: other bytes
        await accept(c, g, "brief")
        return sources, await c.get_blob(sources[0])

    [published], data = bridge(live_group, key, a2a_agent, tmp_path, body)

    brief = a2a_agent.seen.messages[2]  # sources: asked, answered; then brief's contract
    [given] = [part for part in brief.parts if part.HasField("raw")]
    assert (given.raw, given.media_type, given.filename) == (data, "text/markdown", published)
    assert given.metadata["missionweave"]["workItemId"] == "sources"
    assert not any(p.HasField("raw") for p in a2a_agent.seen.messages[0].parts)


@pytest.mark.parametrize("a2a_agent", ["rejects"], indirect=True)
def test_a_task_the_agent_rejects_fails_the_work_item_with_its_reason(live_group, a2a_agent,
                                                                      tmp_path, capsys):
    g = live_group.group_id
    key, _, _ = register(live_group, a2a_agent, tmp_path, capsys)

    async def body(c, worker):
        await mission(c, g, {"brief": []})
        await offer(c, g, "brief", key.agent_id)
        await until(in_state(c, g, "brief", "failed"), timeout=30)
        audit = await c.get(f"/api/v1/groups/{g}/work-items/brief/audit")
        return next(e["data"] for e in audit["events"] if e["type"] == "work.failed")

    failed = bridge(live_group, key, a2a_agent, tmp_path, body)

    task_id = a2a_agent.seen.messages[0].task_id
    said = f"the A2A agent Test Summarizer rejected task {task_id}: {REFUSAL}"
    assert failed["reason"] == said
    [evidence] = failed["evidence"]
    assert evidence["criteria"] == ["ac1", "ac2"] and said in evidence["result"]
    assert links(tmp_path, key) == {}


@pytest.mark.parametrize("a2a_agent", ["patient"], indirect=True)
def test_a_cancelled_work_item_cancels_its_a2a_task(live_group, a2a_agent, tmp_path, capsys):
    g = live_group.group_id
    key, _, _ = register(live_group, a2a_agent, tmp_path, capsys)

    async def body(c, worker):
        await mission(c, g, {"long": []})
        await offer(c, g, "long", key.agent_id)

        async def working():
            audit = await c.get(f"/api/v1/groups/{g}/work-items/long/audit")
            return len([e for e in audit["events"] if e["type"] == "work.progress_reported"]) == 2
        await until(working, timeout=30)
        task_id = links(tmp_path, key)[f"{g}/long"]["taskId"]
        await c.command(g, "work.cancel", {"reason": "no longer needed"}, workItemId="long")
        await until(lambda: a2a_agent.seen.cancelled, timeout=20)
        return task_id, await c.work_item(g, "long")

    task_id, item = bridge(live_group, key, a2a_agent, tmp_path, body)

    assert item["state"] == "cancelled"
    assert a2a_agent.seen.cancelled == [task_id]
    assert links(tmp_path, key) == {}


def test_run_says_so_when_the_agent_cannot_be_reached(live_group, tmp_path):
    with pytest.raises(SystemExit) as refused:
        mw_a2a_worker(["run", "--url", live_group.server.url,
                       "--key", str(live_group.workers[0].key_file),
                       "--a2a-url", "http://127.0.0.1:9"])

    assert str(refused.value).startswith("fetching the Agent Card with the A2A agent "
                                         "http://127.0.0.1:9 failed")


@pytest.mark.parametrize("a2a_agent", ["patient"], indirect=True)
def test_a_preemption_cancels_the_a2a_task_and_the_next_start_begins_a_new_one(
        live_group, a2a_agent, tmp_path, capsys):
    g = live_group.group_id
    key, _, _ = register(live_group, a2a_agent, tmp_path, capsys)

    async def body(c, worker):
        await mission(c, g, {"long": []})
        await offer(c, g, "long", key.agent_id)
        await until(lambda: links(tmp_path, key))
        first = links(tmp_path, key)[f"{g}/long"]["taskId"]
        await c.command(g, "work.request_preemption", {"reason": "urgent work"},
                        workItemId="long")
        await until(lambda: len(a2a_agent.seen.messages) == 2, timeout=20)  # started anew
        audit = await c.get(f"/api/v1/groups/{g}/work-items/long/audit")
        return first, audit["events"]

    first, events = bridge(live_group, key, a2a_agent, tmp_path, body)

    assert a2a_agent.seen.cancelled == [first]  # the second task outlives the bridge's stop
    [checkpointed] = [e["data"] for e in events if e["type"] == "work.checkpointed"]
    assert checkpointed["progress"]["phase"] == "a2a:preempted"
    second = a2a_agent.seen.messages[1].task_id
    assert second != first and links(tmp_path, key)[f"{g}/long"]["taskId"] == second


def test_the_agents_token_goes_to_the_agent_and_nowhere_else(monkeypatch):
    agent = TestAgent(token="s3cret").start()
    try:
        async def talk():
            remote = await RemoteAgent.connect(agent.url)
            try:
                return [e async for e in remote.send([Part(text="hello")])]
            finally:
                await remote.aclose()

        with pytest.raises(AgentError, match="401"):
            run(talk(), 30)
        monkeypatch.setenv("MW_A2A_AGENT_TOKEN", "s3cret")
        answered = run(talk(), 30)
    finally:
        agent.stop()
    assert answered and agent.seen.texts()[-1] == "hello"

    # A file part may point anywhere: the token goes only to the agent's origins.
    bearer = AgentBearer("s3cret", "https://agent.example/a2a")
    bearer.trust("https://rpc.agent.example/")
    sent = {url: next(bearer.auth_flow(httpx.Request("GET", url))).headers.get("Authorization")
            for url in ("https://agent.example/files/1", "https://rpc.agent.example/x",
                        "http://agent.example/files/1", "https://elsewhere.example/f")}
    assert sent == {"https://agent.example/files/1": "Bearer s3cret",
                    "https://rpc.agent.example/x": "Bearer s3cret",
                    "http://agent.example/files/1": None, "https://elsewhere.example/f": None}
