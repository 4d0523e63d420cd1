"""A remote A2A agent working as a MissionWeave Worker (`mw-a2a-worker run`,
docs/agents.md): `A2AWork` is the handler of an SDK `Worker`, so offers, admission,
leases, renewals, Presence and offline handling stay the SDK's. Each WorkItem it takes
is one A2A task of the agent:

- the contract goes out as one message (worker_parts.py), the dependencies' published
  artifacts as its file parts;
- the task's status updates become `work.progress`;
- `input-required` becomes `work.block` with the agent's question as the
  requiredResolution; when the Coordinator unblocks the item and it starts again, what
  was posted in its Conversation since the block (else the unblock's resolution) goes to
  the same task as the next message. The WorkItem -> task link is kept in a file
  (worker_state.py), so a restarted bridge goes on with the task too;
- `completed`: each artifact part is published (a signed manifest) and the result
  submitted with Evidence per acceptance criterion citing them (method `a2a:<agent>`);
  `failed`, `rejected` or `canceled` by the agent: the item is failed (the SDK's
  work.fail with Evidence), the agent's last words as the reason;
- the item cancelled, the lease lost, or a preemption requested: the A2A task is
  cancelled (a preemption then checkpoints, and the next start is a new task).
  A bridge that is stopping leaves the task running, to follow it when it is back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Awaitable
from contextlib import aclosing
from typing import TypeVar

from a2a.types import Artifact, Message, Part, StreamResponse, Task, TaskState

from mission_weave.protocol.json_types import JsonObject
from mission_weave.sdk.client import ApiError, blob_hash
from mission_weave.sdk.handler_context import HandlerResult, Preempted, WorkContext

from .worker_agent import AgentError, RemoteAgent
from .worker_parts import Input, Output, contract_parts, outputs, text_of
from .worker_state import TaskLink, TaskLinks

log = logging.getLogger("mission_weave.a2a_bridge.worker")

T = TypeVar("T")

WORKING = frozenset({TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING})
ASKING = frozenset({TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED})
GAVE_UP = {TaskState.TASK_STATE_FAILED: "failed", TaskState.TASK_STATE_REJECTED: "rejected",
           TaskState.TASK_STATE_CANCELED: "cancelled"}
POLL_SECONDS = 2.0  # between reads of a task whose stream ended while it works on
LONGEST_TEXT = 10000  # the server's longest requiredResolution or Evidence result
CANCEL_SECONDS = 10.0  # a cancellation that takes longer is given up (and logged)


class AgentGaveUp(Exception):
    """The A2A agent ended the task without a result; the message says how and why."""


class A2AWork:
    """The Worker's handler: `Worker(client, groups, A2AWork(agent, links), ...)`."""

    def __init__(self, agent: RemoteAgent, links: TaskLinks):
        self.agent, self.links = agent, links

    @property
    def method(self) -> str:
        return f"a2a:{self.agent.name}"

    async def __call__(self, ctx: WorkContext) -> HandlerResult | None:
        try:
            answered = await _unless_preempted(ctx, self._converse(ctx))
            if answered is None:
                await self._cancel_task(ctx, "a preemption was requested")
                await ctx.checkpoint("a2a:preempted", milestones=[
                    "the A2A task was cancelled for a preemption; the next start begins anew"])
                raise Preempted(ctx.work_item_id)
            return await self._conclude(ctx, answered)
        except asyncio.CancelledError:
            if ctx.lease_lost is not None:  # not the bridge stopping: the item is gone
                await self._cancel_task(ctx, ctx.lease_lost)
            raise
        except Preempted:
            raise
        except Exception as error:  # the worker fails the item: its task is of no more use
            await self._cancel_task(ctx, f"the WorkItem fails: {error}")
            raise

    # --- the conversation with the agent ------------------------------------------------

    async def _converse(self, ctx: WorkContext) -> Task | Message:
        """Talk with the agent until its task rests: asking, or ended (or it answered
        with a message alone)."""
        link = self.links.get(ctx.group_id, ctx.work_item_id)
        if link is None:
            return await self._follow(ctx, self.agent.send(
                contract_parts(ctx.contract, await self._inputs(ctx)),
                metadata={"missionweave": {"groupId": ctx.group_id,
                                           "workItemId": ctx.work_item_id,
                                           "contractRevision": ctx.contract_revision}}))
        task = await self.agent.task(link.task_id)
        if task.status.state in ASKING:
            answer = await self._answer(ctx, link)
            if answer is None:
                return task  # nobody answered yet (a restart before the block): ask again
            return await self._follow(ctx, self.agent.send(
                [Part(text=answer, media_type="text/plain")], link.task_id, link.context_id))
        if task.status.state in WORKING:
            return await self._follow(ctx, self.agent.follow(link.task_id))
        return task

    async def _follow(self, ctx: WorkContext,
                      events: AsyncGenerator[StreamResponse, None]) -> Task | Message:
        """Report the task's status updates as progress until it rests; the task is read
        whole at rest (its artifacts and last message)."""
        task_id: str | None = None
        while True:
            async with aclosing(events):  # left early, the stream is closed at once
                async for event in events:
                    if event.HasField("message"):
                        return event.message
                    state, task_id = self._state_of(ctx, event)
                    if state in WORKING and event.HasField("status_update"):
                        await self._progress(ctx, event.status_update.status.message, state)
                    elif state not in WORKING and state != TaskState.TASK_STATE_UNSPECIFIED:
                        return await self.agent.task(task_id)
            if task_id is None:
                raise AgentError(f"the A2A agent {self.agent.name} answered with neither a "
                                 "task nor a message")
            task = await self.agent.task(task_id)
            if task.status.state not in WORKING:
                return task
            await asyncio.sleep(POLL_SECONDS)  # the stream ended early: follow it again
            events = self.agent.follow(task_id)

    def _state_of(self, ctx: WorkContext, event: StreamResponse) -> tuple[TaskState, str]:
        """The task's state the event tells, linking the WorkItem to the task."""
        if event.HasField("task"):
            task_id, context_id = event.task.id, event.task.context_id
            state = event.task.status.state
        elif event.HasField("status_update"):
            task_id, context_id = event.status_update.task_id, event.status_update.context_id
            state = event.status_update.status.state
        else:  # an artifact chunk: read whole from the task at rest
            task_id = event.artifact_update.task_id
            context_id = event.artifact_update.context_id
            state = TaskState.TASK_STATE_UNSPECIFIED
        self.links.link(ctx.group_id, ctx.work_item_id, TaskLink(task_id, context_id))
        return state, task_id

    async def _progress(self, ctx: WorkContext, said: Message, state: TaskState) -> None:
        text = text_of(said)
        await ctx.progress(f"a2a:{TaskState.Name(state).removeprefix('TASK_STATE_').lower()}",
                           milestones=[text[:500]] if text else [])

    async def _inputs(self, ctx: WorkContext) -> list[Input]:
        """The artifacts the contract's dependencies submitted, with their bytes."""
        found = []
        for dependency in ctx.contract.get("dependencies", {}).get("workItems", []):
            item = await ctx.client.work_item(ctx.group_id, dependency)
            for name in (item.get("submission") or {}).get("artifacts", []):
                record = await ctx.client.get(f"/api/v1/groups/{ctx.group_id}/artifacts/{name}")
                data = await ctx.client.get_blob(name)
                assert isinstance(data, bytes)  # no `into`: the bytes themselves
                found.append(Input(name, record["manifest"]["mediaType"], data, dependency))
        return found

    async def _answer(self, ctx: WorkContext, link: TaskLink) -> str | None:
        """What was said in the item's Conversation since the block that asked the task's
        question, by others than this agent; else the resolution the Coordinator unblocked
        it with. None when the question was not asked (the bridge stopped before)."""
        if link.blocked_at is None:
            return None
        trail: list[JsonObject] = (await ctx.client.get(
            f"/api/v1/groups/{ctx.group_id}/work-items/{ctx.work_item_id}/audit"))["events"]
        since = [event for event in trail if event["sequence"] > link.blocked_at]
        said = [e["data"]["text"] for e in since if e["type"] == "conversation.message_posted"
                and e["data"].get("author") != ctx.producer]
        resolutions = [e["data"]["resolution"] for e in since if e["type"] == "work.unblocked"]
        return "\n\n".join(said) if said else (resolutions[-1] if resolutions else None)

    # --- how it ends ------------------------------------------------------------------

    async def _conclude(self, ctx: WorkContext, answered: Task | Message) -> HandlerResult | None:
        if isinstance(answered, Message):  # no task: the message is the result
            return await self._deliver(ctx, await outputs([_as_artifact(answered)],
                                                          self.agent.download))
        state = answered.status.state
        said = text_of(answered.status.message)
        if state in ASKING:
            question = said or f"the A2A agent {self.agent.name} asks for " + (
                "input" if state == TaskState.TASK_STATE_INPUT_REQUIRED else "authorization")
            blocked = await ctx.block(question[:LONGEST_TEXT], "a2a:input-required",
                                      milestones=[f"A2A task {answered.id} waits for an answer"])
            # Buffered offline, the block has no sequence yet: any later answer will do.
            sequence = max((e["sequence"] for e in blocked.get("events", [])), default=0)
            self.links.link(ctx.group_id, ctx.work_item_id,
                            TaskLink(answered.id, answered.context_id, sequence))
            return None
        self.links.forget(ctx.group_id, ctx.work_item_id)
        if state == TaskState.TASK_STATE_COMPLETED:
            artifacts = list(answered.artifacts) or [_as_artifact(answered.status.message)]
            return await self._deliver(ctx, await outputs(artifacts, self.agent.download))
        how = GAVE_UP.get(state, TaskState.Name(state))
        raise AgentGaveUp(f"the A2A agent {self.agent.name} {how} task {answered.id}"
                          + (f": {said}" if said else " without saying why"))

    async def _deliver(self, ctx: WorkContext, found: list[Output]) -> HandlerResult:
        """Publish each output and claim every acceptance criterion with them."""
        if not found:
            raise AgentGaveUp(f"the A2A agent {self.agent.name} completed without any "
                              "artifact or message to deliver")
        unique = {blob_hash(output.data): output for output in found}  # one per content
        hashes = [await self._publish(ctx, output) for output in unique.values()]
        evidence = [ctx.evidence([criterion["id"]], self.method, "pass", artifacts=hashes)
                    for criterion in ctx.contract.get("acceptanceCriteria", [])]
        return {"evidence": evidence, "artifacts": hashes}

    async def _publish(self, ctx: WorkContext, output: Output) -> str:
        """Publish the output; one this item published already (before a restart of the
        bridge) is taken as it is. Content is published once per Group: the same bytes
        published for another item are refused, and that refusal stands."""
        try:
            return await ctx.publish_artifact(output.data, output.media_type)
        except ApiError as refusal:
            if refusal.code != "VALIDATION_ERROR":
                raise
            name = blob_hash(output.data)
            try:
                record = await ctx.client.get(f"/api/v1/groups/{ctx.group_id}/artifacts/{name}")
            except ApiError:
                raise refusal from None
            if record["manifest"].get("workItemId") != ctx.work_item_id:
                raise
            return name

    async def _cancel_task(self, ctx: WorkContext, why: str) -> None:
        """Cancel the item's A2A task (shielded: the handler may be cancelled itself),
        and forget it."""
        link = self.links.get(ctx.group_id, ctx.work_item_id)
        if link is None:
            return
        self.links.forget(ctx.group_id, ctx.work_item_id)
        log.info("%s: cancelling A2A task %s (%s)", ctx.work_item_id, link.task_id, why)
        try:
            await asyncio.wait_for(asyncio.shield(self.agent.cancel(link.task_id)),
                                   CANCEL_SECONDS)
        except (AgentError, TimeoutError) as error:
            log.warning("%s: cancelling A2A task %s failed: %s", ctx.work_item_id,
                        link.task_id, error)


def _as_artifact(message: Message) -> Artifact:
    """A message's parts, as the artifact it is when the agent delivers no other."""
    return Artifact(artifact_id=message.message_id or "reply", name="reply",
                    parts=list(message.parts))


async def _unless_preempted(ctx: WorkContext, work: Awaitable[T]) -> T | None:
    """`work`'s result, or None when a preemption was requested first (work cancelled)."""
    working = asyncio.ensure_future(work)
    preempted = asyncio.ensure_future(ctx.preemption.wait())
    try:
        await asyncio.wait({working, preempted}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (working, preempted):
            task.cancel()
        await asyncio.gather(working, preempted, return_exceptions=True)
    if working.done() and not working.cancelled():
        return working.result()
    return None

