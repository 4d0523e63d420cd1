"""`mw-a2a-group` against the live server (tests/sdk/conftest.py): an A2A client, built
from the official a2a-sdk's own client classes, proposes work to a Group's Mission; the
Coordinator (the SDK Client) authorizes it, a Worker (the SDK Worker) delivers it, the
Coordinator accepts it, and the A2A task follows: submitted -> working -> completed with
the deliverable. A message that is no valid contract gets the protocol's refusal; a
follow-up and a cancel are refused; a second Group's bridge (the console script) never
sees the first Group's work; a streaming client sees a WorkItem and a Mission cancelled;
a restarted bridge resumes its unfinished tasks from its state file, the log archived."""

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
import uuid

import httpx
import pytest
import uvicorn
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.helpers import get_data_parts, get_text_parts, new_data_part, new_text_part
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError, UnsupportedOperationError
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mission_weave.a2a_bridge.group import GroupBridge
from mission_weave.a2a_bridge.group_contract import DEFAULT_TEMPLATE
from mission_weave.protocol import canonical
from mission_weave.protocol.timefmt import format_time
from mission_weave.sdk.client import Client, utcnow
from mission_weave.sdk.keys import AgentKey
from mission_weave.sdk.worker import Worker
from mission_weave.stack.services import free_port
from tests.sdk.conftest import OWNER, run
from tests.sdk.test_live import delivered, offer, until

pytestmark = pytest.mark.django_db(transaction=True)

# The Group's defaults for every proposal: work the live workers' Agent Card can take.
TEMPLATE = {**DEFAULT_TEMPLATE, "capabilities": [{"id": "writing", "version": "1"}]}


def bridge_agent(group_id: str, tmp_path, name: str) -> AgentKey:
    """A new Agent, member of the Group with the observer role only (any member may
    propose work), and its key file."""
    from apps.identity import registry
    from apps.ledger.models import Group

    private = Ed25519PrivateKey.generate()
    key = registry.register_agent(name, canonical.public_key_b64url(private))
    registry.add_member(Group.objects.get(id=group_id), f"agent:{name}", ["observer"])
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"agentId": name, "keyId": key.key_id, "groupId": group_id,
                                "privateKey": canonical.private_key_b64url(private)}))
    return AgentKey.load(path)


async def new_mission(c: Client, group_id: str, title: str) -> str:
    mission_id = f"m-{uuid.uuid4().hex[:8]}"
    await c.command(group_id, "mission.create", {"missionId": mission_id, "title": title,
                                                  "ownerId": OWNER,
                                                  "coordinatorId": c.principal})
    return mission_id


@contextlib.asynccontextmanager
async def serving(url: str, key: AgentKey, group_id: str, mission_id: str, state=None,
                  token=None):
    """The bridge in this process, on a free port, with uvicorn; yields its public URL."""
    port = free_port()
    public_url = f"http://127.0.0.1:{port}/"
    async with Client(url, key, backoff_seconds=0.05) as client:
        bridge = await GroupBridge.connect(client, group_id, mission_id, public_url, TEMPLATE,
                                           state, token)
        server = uvicorn.Server(uvicorn.Config(bridge.app(), host="127.0.0.1", port=port,
                                               log_level="warning"))
        task = asyncio.create_task(server.serve())
        try:
            await until(lambda: server.started)
            await asyncio.wait_for(bridge.following.wait(), 10)
            yield public_url
        finally:
            server.should_exit = True
            await asyncio.wait_for(task, 20)


def message(*parts: Part, task_id: str = "") -> SendMessageRequest:
    request = SendMessageRequest(message=Message(
        role=Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=list(parts), task_id=task_id))
    return request


async def send(a2a, request: SendMessageRequest):
    """The task the bridge answers with (the client polls: the answer comes at once)."""
    async for response in a2a.send_message(request):
        return response.task
    raise AssertionError("no answer")


async def task_in(a2a, task_id: str, state: int):
    async def reached():
        task = await a2a.get_task(GetTaskRequest(id=task_id))
        return task if task.status.state == state else None
    return await until(reached, timeout=30)


def said(task) -> tuple[str, dict]:
    """The text and the data of the task's status message."""
    parts = task.status.message.parts
    return "\n".join(get_text_parts(parts)), (get_data_parts(parts) or [{}])[0]


async def authorize(c: Client, group_id: str, mission_id: str, proposal_id: str,
                    item_id: str) -> dict:
    """As the Coordinator: authorize the proposal with the contract it proposed."""
    events = (await c.events(group_id, 0))["events"]
    proposed = next(e for e in events if e["type"] == "work.proposed"
                    and e["data"]["proposalId"] == proposal_id)
    contract = proposed["data"]["contract"]
    await c.command(group_id, "work.authorize", {
        "workItemId": item_id, "missionId": mission_id, "proposalId": proposal_id,
        "contract": contract})
    return contract


async def accept(c: Client, group_id: str, item_id: str, contract: dict) -> None:
    """As the Coordinator: accept the submission, with its own Evidence for every
    criterion (PROTOCOL §2 REVIEW_PENDING: the Coordinator's override)."""
    item = await c.work_item(group_id, item_id)
    await c.command(group_id, "work.accept_result", {"evidence": [{
        "id": f"ev-{uuid.uuid4().hex[:12]}", "subject": f"workItem:{item_id}",
        "criteria": [ac["id"] for ac in contract["acceptanceCriteria"]],
        "method": "coordinator read the deliverable", "result": "pass",
        "producer": c.principal, "timestamp": format_time(utcnow()),
        "artifacts": item["submission"]["artifacts"]}]}, workItemId=item_id)


def test_a_message_becomes_a_proposal_whose_task_follows_it_to_the_deliverable(live_group,
                                                                               tmp_path):
    g, url, w1 = live_group.group_id, live_group.server.url, live_group.workers[0]
    desk = bridge_agent(g, tmp_path, f"desk-{uuid.uuid4().hex[:8]}")
    goal = "Write a haiku about weaving"
    criteria = [{"id": "haiku", "description": "Three lines, 5-7-5"}]

    async def scenario():
        async with live_group.client(live_group.coordinator) as c, \
                live_group.client(w1) as wc:
            await c.open_session()
            mission_id = await new_mission(c, g, "Poetry desk")
            async with serving(url, desk, g, mission_id) as public_url, \
                    httpx.AsyncClient(timeout=20) as http:
                card = await A2ACardResolver(http, public_url).get_agent_card()
                a2a = await create_client(card, ClientConfig(streaming=False, polling=True,
                                                             httpx_client=http))
                submitted = await send(a2a, message(
                    new_text_part(goal), new_data_part({"acceptanceCriteria": criteria})))
                with pytest.raises(UnsupportedOperationError) as follow_up:
                    await send(a2a, message(new_text_part("also rhyme"),
                                            task_id=submitted.id))
                with pytest.raises(TaskNotCancelableError) as cancel:
                    await a2a.cancel_task(CancelTaskRequest(id=submitted.id))

                contract = await authorize(c, g, mission_id, submitted.id, "haiku")
                working = await task_in(a2a, submitted.id, TaskState.TASK_STATE_WORKING)

                worker = Worker(wc, [g], delivered, tmp_path / "w.sqlite3", tick_seconds=0.2)
                stop = asyncio.Event()
                running = asyncio.create_task(worker.run(stop))
                try:
                    await asyncio.wait_for(worker.ready.wait(), 20)
                    await offer(c, g, "haiku", w1.name)
                    await until(lambda: worker.submitted, timeout=30)
                finally:
                    stop.set()
                    await asyncio.wait_for(running, 20)
                await accept(c, g, "haiku", contract)
                completed = await task_in(a2a, submitted.id, TaskState.TASK_STATE_COMPLETED)
                return card, public_url, mission_id, submitted, follow_up.value, \
                    cancel.value, contract, working, completed

    card, public_url, mission_id, submitted, follow_up, cancel, contract, working, \
        completed = run(scenario(), 90)

    assert card.name == "Poetry desk" and g in card.description
    assert [s.name for s in card.skills] == ["propose work"]
    assert card.supported_interfaces[0].url == public_url

    assert submitted.status.state == TaskState.TASK_STATE_SUBMITTED
    text, data = said(submitted)
    assert "waits on the Coordinator" in text
    assert data == {"groupId": g, "missionId": mission_id, "proposalId": submitted.id}
    assert contract["goal"] == goal and contract["acceptanceCriteria"] == criteria
    assert contract["capabilities"] == TEMPLATE["capabilities"]  # the template's default
    assert "no follow-up messages" in follow_up.message
    assert "only the Mission's Coordinator can cancel" in cancel.message

    text, data = said(working)
    assert "WorkItem haiku" in text and data["workItemId"] == "haiku"

    [artifact] = completed.artifacts
    [part] = artifact.parts
    assert part.text == f"# {goal}\n" and part.media_type == "text/markdown"
    assert artifact.artifact_id.startswith("sha256:")
    assert [m.role for m in completed.history][:1] == [Role.ROLE_USER]


def test_a_message_that_is_no_valid_contract_gets_the_protocols_refusal(live_group, tmp_path):
    g, url = live_group.group_id, live_group.server.url
    desk = bridge_agent(g, tmp_path, f"desk-{uuid.uuid4().hex[:8]}")

    async def scenario():
        async with live_group.client(live_group.coordinator) as c:
            await c.open_session()
            mission_id = await new_mission(c, g, "Strict desk")
            async with serving(url, desk, g, mission_id) as public_url, \
                    httpx.AsyncClient(timeout=20) as http:
                a2a = await create_client(public_url, ClientConfig(
                    streaming=False, polling=True, httpx_client=http))
                typo = await send(a2a, message(new_text_part("Do it"),
                                               new_data_part({"budget": {"tokens": 5}})))
                no_goal = await send(a2a, message(new_data_part({"urgency": "high"})))
                stored = await a2a.get_task(GetTaskRequest(id=typo.id))
                events = (await c.events(g, 0))["events"]
                return typo, no_goal, stored, [e["type"] for e in events]

    typo, no_goal, stored, types = run(scenario())

    for task in (typo, no_goal, stored):
        assert task.status.state == TaskState.TASK_STATE_REJECTED
        text, data = said(task)
        assert data["code"] == "INVALID_CONTRACT" and data["message"] in text
    assert "budget" in said(typo)[1]["message"]
    assert "work.proposed" not in types  # a refusal appends nothing


def test_a_second_groups_bridge_never_sees_the_first_groups_work(live_group, tmp_path):
    from apps.identity import registry

    g, url = live_group.group_id, live_group.server.url
    other, _ = registry.create_group(f"a2a-{uuid.uuid4().hex[:8]}")
    registry.add_member(other, OWNER, ["owner"])
    registry.add_member(other, live_group.coordinator.key.principal, ["coordinator"])
    desk = bridge_agent(g, tmp_path, f"desk-{uuid.uuid4().hex[:8]}")
    other_desk = bridge_agent(other.id, tmp_path, f"desk-{uuid.uuid4().hex[:8]}")
    port = free_port()
    template = tmp_path / "template.json"
    template.write_text(json.dumps({**TEMPLATE, "urgency": "high"}))

    async def scenario():
        async with live_group.client(live_group.coordinator) as c:
            await c.open_session()
            mission_id = await new_mission(c, g, "First desk")
            other_mission = await new_mission(c, other.id, "Second desk")
            # The second Group's bridge is the console script.
            process = subprocess.Popen(
                [sys.executable, "-m", "mission_weave.a2a_bridge.group_cli", "--url", url,
                 "--key", str(tmp_path / f"{other_desk.agent_id}.json"),
                 "--mission", other_mission, "--port", str(port),
                 "--contract-template", str(template), "--state", str(tmp_path / "b.sqlite3")],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            try:
                async with serving(url, desk, g, mission_id) as public_url, \
                        httpx.AsyncClient(timeout=20) as http:
                    first = await create_client(public_url, ClientConfig(
                        streaming=False, polling=True, httpx_client=http))

                    async def other_card():
                        with contextlib.suppress(httpx.HTTPError, Exception):
                            return await A2ACardResolver(
                                http, f"http://127.0.0.1:{port}/").get_agent_card()
                    card = await until(other_card, timeout=30, every=0.2)
                    second = await create_client(card, ClientConfig(
                        streaming=False, polling=True, httpx_client=http))
                    task = await send(first, message(new_text_part("First Group's work")))
                    await authorize(c, g, mission_id, task.id, "first")
                    await task_in(first, task.id, TaskState.TASK_STATE_WORKING)
                    with pytest.raises(TaskNotFoundError):
                        await second.get_task(GetTaskRequest(id=task.id))
                    theirs = await send(second, message(new_text_part("Second Group's work")))
                    other_events = (await c.events(other.id, 0))["events"]
                    first_events = (await c.events(g, 0))["events"]
                    return card, theirs, other_events, first_events
            finally:
                process.terminate()
                code, errors = process.wait(timeout=20), process.stderr.read().decode()
                # uvicorn stops gracefully, then ends by the signal it caught, as expected
                # of a process asked to stop (systemd counts SIGTERM as a clean exit).
                assert code == -signal.SIGTERM and "Traceback" not in errors, errors[-2000:]

    card, theirs, other_events, first_events = run(scenario(), 90)

    assert card.name == "Second desk" and other.id in card.description
    assert theirs.status.state == TaskState.TASK_STATE_SUBMITTED
    proposed = [e["data"] for e in other_events if e["type"] == "work.proposed"]
    assert [p["proposalId"] for p in proposed] == [theirs.id]
    assert [p["contract"]["goal"] for p in proposed] == ["Second Group's work"]
    assert [p["contract"]["urgency"] for p in proposed] == ["high"]  # the template's
    assert not any(e["data"].get("proposalId") == theirs.id for e in first_events)


async def stream(a2a, request: SendMessageRequest, states: list, texts: list) -> None:
    """Follow the task over the SSE stream until it ends: each state, and what it said."""
    async for response in a2a.send_message(request):
        status = response.task.status if response.HasField("task") \
            else response.status_update.status
        if response.HasField("task") or response.HasField("status_update"):
            states.append(status.state)
            texts.append("\n".join(get_text_parts(status.message.parts)))


def test_a_streaming_client_sees_the_coordinator_cancel_the_work_and_the_mission(live_group,
                                                                                 tmp_path):
    g, url = live_group.group_id, live_group.server.url
    desk = bridge_agent(g, tmp_path, f"desk-{uuid.uuid4().hex[:8]}")

    async def scenario():
        async with live_group.client(live_group.coordinator) as c:
            await c.open_session()
            mission_id = await new_mission(c, g, "Streaming desk")
            async with serving(url, desk, g, mission_id) as public_url, \
                    httpx.AsyncClient(timeout=20) as http:
                a2a = await create_client(public_url, ClientConfig(httpx_client=http))
                (first, first_texts), (second, second_texts) = ([], []), ([], [])
                streams = [asyncio.create_task(stream(a2a, message(new_text_part(goal)),
                                                      states, texts))
                           for goal, states, texts in (("Authorized, then cancelled", first,
                                                        first_texts),
                                                       ("Never authorized", second,
                                                        second_texts))]
                await until(lambda: first and second)
                proposals = [e["data"] for e in (await c.events(g, 0))["events"]
                             if e["type"] == "work.proposed"]
                authorized = next(p["proposalId"] for p in proposals
                                  if p["contract"]["goal"] == "Authorized, then cancelled")
                await authorize(c, g, mission_id, authorized, "doomed")
                await until(lambda: len(first) == 2)
                await c.command(g, "work.cancel", {"reason": "no longer needed"},
                                workItemId="doomed")
                await asyncio.wait_for(streams[0], 20)
                await c.command(g, "mission.cancel", {"missionId": mission_id,
                                                      "reason": "the desk closes"})
                await asyncio.wait_for(streams[1], 20)
                return first, first_texts, second, second_texts

    first, first_texts, second, second_texts = run(scenario())

    assert first == [TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING,
                     TaskState.TASK_STATE_CANCELED]
    assert "WorkItem doomed" in first_texts[1]
    assert first_texts[2] == "WorkItem doomed was cancelled: no longer needed"
    assert second == [TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_CANCELED]
    assert "the desk closes" in second_texts[1]


def test_a_restarted_bridge_resumes_its_unfinished_tasks_from_its_state_file(live_group,
                                                                              tmp_path):
    from apps.ledger import snapshots
    from apps.ledger.archive import archive_through

    g, url = live_group.group_id, live_group.server.url
    desk = bridge_agent(g, tmp_path, f"desk-{uuid.uuid4().hex[:8]}")
    state = tmp_path / "desk.sqlite3"

    async def polling_client(public_url, http):
        return await create_client(public_url, ClientConfig(streaming=False, polling=True,
                                                            httpx_client=http))

    async def before():
        async with live_group.client(live_group.coordinator) as c, \
                httpx.AsyncClient(timeout=20) as http:
            await c.open_session()
            mission_id = await new_mission(c, g, "Restarting desk")
            async with serving(url, desk, g, mission_id, state) as public_url:
                a2a = await polling_client(public_url, http)
                early = await send(a2a, message(new_text_part("Authorized before")))
                late = await send(a2a, message(new_text_part("Authorized meanwhile")))
                refused = await send(a2a, message(new_data_part({"urgency": "now"})))
                await authorize(c, g, mission_id, early.id, "early")
                await task_in(a2a, early.id, TaskState.TASK_STATE_WORKING)
            # While the bridge is stopped, the Coordinator authorizes the other proposal.
            await authorize(c, g, mission_id, late.id, "late")
            return mission_id, early, late, refused

    async def after(mission_id, early, late, refused):
        async with live_group.client(live_group.coordinator) as c, \
                httpx.AsyncClient(timeout=20) as http:
            await c.open_session()
            async with serving(url, desk, g, mission_id, state) as public_url:
                a2a = await polling_client(public_url, http)
                working = await task_in(a2a, late.id, TaskState.TASK_STATE_WORKING)
                still_refused = await a2a.get_task(GetTaskRequest(id=refused.id))
                streaming = await create_client(public_url, ClientConfig(httpx_client=http))
                with pytest.raises(UnsupportedOperationError) as no_stream:
                    async for _ in streaming.subscribe(SubscribeToTaskRequest(id=late.id)):
                        pass
                await c.command(g, "work.cancel", {"reason": "after the restart"},
                                workItemId="early")
                cancelled = await task_in(a2a, early.id, TaskState.TASK_STATE_CANCELED)
            return working, still_refused, no_stream.value, cancelled

    mission_id, early, late, refused = run(before(), 60)
    # The log so far is archived: the restarted bridge learns it from the signed snapshot.
    archive_through(snapshots.take(g))
    working, still_refused, no_stream, cancelled = run(after(mission_id, early, late, refused))

    assert working.context_id == late.context_id
    assert "WorkItem late" in said(working)[0]
    assert still_refused.status.state == TaskState.TASK_STATE_REJECTED
    assert "poll GetTask" in no_stream.message
    assert said(cancelled)[0] == "WorkItem early was cancelled: after the restart"
    assert get_text_parts(cancelled.history[0].parts) == ["Authorized before"]
    # Reported once each, though the restarted bridge read the Group's state again.
    assert [opening(m) for m in cancelled.history[1:]] == [
        f"Proposed as Work Proposal {cancelled.id}",
        "The Coordinator authorized the proposal as WorkItem early."]


def opening(message: Message) -> str:
    return get_text_parts(message.parts)[0].split(" in Mission")[0]


def test_with_a_bearer_token_the_card_says_so_and_the_endpoint_requires_it(live_group,
                                                                        tmp_path):
    g, url = live_group.group_id, live_group.server.url
    desk = bridge_agent(g, tmp_path, f"desk-{uuid.uuid4().hex[:8]}")

    async def scenario():
        async with live_group.client(live_group.coordinator) as c:
            await c.open_session()
            mission_id = await new_mission(c, g, "Guarded desk")
            async with serving(url, desk, g, mission_id, token="t0ken") as public_url, \
                    httpx.AsyncClient(timeout=20) as anonymous, \
                    httpx.AsyncClient(timeout=20, headers={
                        "Authorization": "Bearer t0ken"}) as holder:
                card = await A2ACardResolver(anonymous, public_url).get_agent_card()
                refused = await anonymous.post(public_url, json={
                    "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {}})
                a2a = await create_client(card, ClientConfig(streaming=False, polling=True,
                                                             httpx_client=holder))
                task = await send(a2a, message(new_text_part("Write a limerick")))
                return card, refused, task

    card, refused, task = run(scenario(), 60)
    assert card.security_schemes["bearer"].http_auth_security_scheme.scheme == "bearer"
    assert list(card.security_requirements[0].schemes) == ["bearer"]
    assert refused.status_code == 401 and refused.headers["WWW-Authenticate"] == "Bearer"
    assert task.status.state == TaskState.TASK_STATE_SUBMITTED

    # Anywhere but loopback, no token is no server.
    refused_to_start = subprocess.run(
        [sys.executable, "-m", "mission_weave.a2a_bridge.group_cli", "--url", url, "--key",
         str(tmp_path / f"{desk.agent_id}.json"), "--mission", "m", "--host", "0.0.0.0"],
        capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin"})
    assert refused_to_start.returncode == 2
    assert "MW_A2A_TOKEN" in refused_to_start.stderr
