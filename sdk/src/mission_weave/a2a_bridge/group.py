"""A MissionWeave Group answering as an A2A agent (`mw-a2a-group`, docs/agents.md).

The bridge is an Agent and a member of one Group. It serves an A2A Agent Card for one
Mission of that Group (one skill, "propose work") and the A2A JSON-RPC endpoint, on the
official a2a-sdk: `GroupExecutor` (its AgentExecutor), the SDK's request handler (refining
two answers, below), its InMemoryTaskStore (written through to SQLite, `group_store`) and
its Starlette routes, served by uvicorn (`group_cli`).

Every new A2A message becomes one `work.propose` into the Mission, with the A2A task id
as the proposal id (so either names the other). The executor then stays with the task,
as the SDK's long-running flow has it, and reports what the Group's events decide
(`group_proposals`): `submitted` (waiting on the Coordinator) -> `working` (authorized:
names the WorkItem) -> `completed` (verified, with the deliverables as artifacts), or
`failed` / `canceled`. A refusal of the proposal is the task's `rejected` (the contract or
the command is invalid) or `failed` status, carrying the protocol's code and message.
A2A's `failed` is final: a WorkItem that failed and is offered again (§11.4) is no longer
followed; its task stays `failed`.

Two answers differ from the SDK's defaults, because the task is the Coordinator's to
decide: a follow-up message on an existing task, and a cancel request, are refused with
an A2A error saying so (`GroupRequestHandler`).

Across a restart (`state`, a SQLite file: `group_store`) the bridge keeps the A2A tasks;
the task id is the proposal id, so nothing links them but the id. The event cursor stays
in memory: a bridge that has unfinished tasks to resume reads the Group's log again from
its start, which tells what became of their proposals meanwhile; one that has none starts
at the Group's head. Without `state`, the tasks are in memory too and a restart forgets
them (their proposals live on in the Group, under the task ids).
"""

import asyncio
import contextlib
import hmac
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import httpx
from a2a.helpers import new_data_part, new_message, new_task, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import Event, EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskManager, TaskStore
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    CancelTaskRequest,
    HTTPAuthSecurityScheme,
    Message,
    Part,
    SecurityRequirement,
    SecurityScheme,
    SendMessageRequest,
    StringList,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.constants import PROTOCOL_VERSION_CURRENT, TransportProtocol
from a2a.utils.errors import TaskNotCancelableError, UnsupportedOperationError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from mission_weave.protocol.json_types import JsonObject
from mission_weave.protocol.timefmt import parse_time
from mission_weave.sdk.client import ApiError, Client, may_have_arrived, utcnow
from mission_weave.sdk.inbox import CursorStore, Inbox

from .group_artifacts import deliverables
from .group_contract import contract_from
from .group_proposals import (
    AUTHORIZED,
    CANCELLED,
    ENDED,
    FAILED,
    VERIFIED,
    Outcome,
    Proposals,
)
from .group_store import ENDED_STATES, DurableTaskStore

log = logging.getLogger("mission_weave.a2a_bridge.group")

# Refusals that say the request itself is not acceptable work: the task is `rejected`.
# Any other refusal (membership, a Mission that ended, the service) makes it `failed`.
REJECTING_CODES = frozenset({"INVALID_CONTRACT", "VALIDATION_ERROR"})
SESSION_CODES = frozenset({"UNAUTHENTICATED", "STALE_SESSION"})


@dataclass(frozen=True)
class Mission:
    group_id: str
    mission_id: str
    title: str
    coordinator_id: str


class GroupBridge:
    """One Mission of one Group as an A2A agent. `connect()` opens the Agent's session and
    reads the Mission; `app()` is the Starlette application to serve (its lifespan
    follows the Group's events)."""

    def __init__(self, client: Client, mission: Mission, public_url: str,
                 template: JsonObject, task_store: TaskStore | None = None,
                 bearer_token: str | None = None):
        self.client, self.mission, self.public_url = client, mission, public_url
        self.template, self.bearer_token = template, bearer_token
        self.proposals = Proposals(mission.mission_id)
        self.task_store = task_store or InMemoryTaskStore()
        self.card = agent_card(mission, public_url, bearer=bearer_token is not None)
        self.handler = GroupRequestHandler(GroupExecutor(self), self.task_store, self.card)
        self.following = asyncio.Event()  # set once the follower has caught up
        self._session_expires: datetime | None = None
        self._resumed: list[asyncio.Task[None]] = []  # following stored tasks

    @classmethod
    async def connect(cls, client: Client, group_id: str, mission_id: str, public_url: str,
                      template: JsonObject, state: str | Path | None = None,
                      bearer_token: str | None = None) -> "GroupBridge":
        """With `state`, a SQLite file, the A2A tasks are kept there across restarts;
        without, in memory. With `bearer_token`, the card says so and the endpoint
        answers 401 to a request without it."""
        session = await client.open_session()
        bridge = cls(client, await read_mission(client, group_id, mission_id), public_url,
                     template, DurableTaskStore(state) if state else None, bearer_token)
        bridge._session_expires = parse_time(session["expiresAt"])
        return bridge

    async def open_session(self) -> None:
        session = await self.client.open_session()
        self._session_expires = parse_time(session["expiresAt"])

    def app(self) -> Starlette:
        routes = [*create_agent_card_routes(self.card),
                  *create_jsonrpc_routes(self.handler, rpc_url="/")]
        guard = [Middleware(RequireBearer, token=self.bearer_token)] if self.bearer_token else []
        return Starlette(routes=routes, lifespan=self._lifespan, middleware=guard)

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        stop = asyncio.Event()
        await self.resume()
        tasks = [asyncio.create_task(self.follow(stop)),
                 asyncio.create_task(self.keep_session(stop))]
        try:
            yield
        finally:
            stop.set()
            await self.handler.aclose()
            tasks += self._resumed
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def follow(self, stop: asyncio.Event) -> None:
        """Follow the Group's events. The cursor is kept in memory: with stored tasks to
        resume, the Group's log is read again from its start (what happened to their
        proposals while the bridge was stopped, and which WorkItems they became); without
        any, from its current head."""
        group_id = self.mission.group_id
        cursors = CursorStore(":memory:")
        if not self.handler.resumed:
            # Without its hash: the inbox takes the one of the server's event at the head.
            cursors.reset(group_id, await head_sequence(self.client, group_id))
        inbox = Inbox(self.client, [group_id], self.proposals.apply, cursors,
                      self.proposals.load_snapshot)

        async def announce() -> None:
            await inbox.caught_up.wait()
            self.following.set()
        announcer = asyncio.create_task(announce())
        try:
            await inbox.run(stop)
        except Exception:  # said loudly: from now on no task moves
            log.exception("stopped following Group %s", group_id)
            raise
        finally:
            announcer.cancel()

    async def keep_session(self, stop: asyncio.Event) -> None:
        """Open a new session before the current one expires (the bridge holds no leases,
        so a new session costs nothing)."""
        while not stop.is_set():
            left = (self._session_expires - utcnow()).total_seconds() \
                if self._session_expires else 0
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=max(left * 0.8, 1.0))
            if not stop.is_set():
                try:
                    await self.open_session()
                except (ApiError, httpx.TransportError) as error:
                    log.warning("renewing the session failed: %r", error)

    # --- reporting outcomes ------------------------------------------------------------

    async def report(self, task_id: str, context_id: str,
                     outcome: Outcome) -> list[TaskStatusUpdateEvent | TaskArtifactUpdateEvent]:
        """The A2A events that report one outcome of the proposal on its task."""
        item = outcome.work_item_id

        def status(state: TaskState, text: str, **facts: str | None) -> TaskStatusUpdateEvent:
            return TaskStatusUpdateEvent(task_id=task_id, context_id=context_id,
                                         status=TaskStatus(
                                             state=state, timestamp=utcnow(),
                                             message=self.say(task_id, context_id, text,
                                                              workItemId=item, **facts)))
        if outcome.state == AUTHORIZED:
            return [status(TaskState.TASK_STATE_WORKING,
                           f"The Coordinator authorized the proposal as WorkItem {item}.")]
        if outcome.state == VERIFIED:
            assert item is not None
            try:
                artifacts = await deliverables(self.client, self.mission.group_id, item,
                                               outcome.artifacts)
            except ApiError as error:
                return [status(TaskState.TASK_STATE_FAILED,
                               f"WorkItem {item} was verified, but its deliverables could not "
                               f"be read: {error.code}: {error.message}", code=error.code)]
            return [*(TaskArtifactUpdateEvent(task_id=task_id, context_id=context_id,
                                              artifact=artifact, last_chunk=True)
                      for artifact in artifacts),
                    status(TaskState.TASK_STATE_COMPLETED,
                           f"WorkItem {item} was verified: {len(artifacts)} deliverable(s).")]
        what = f"WorkItem {item}" if item else "The proposal"
        if outcome.state == FAILED:
            return [status(TaskState.TASK_STATE_FAILED, f"{what} failed: {outcome.reason}")]
        assert outcome.state == CANCELLED
        return [status(TaskState.TASK_STATE_CANCELED,
                       f"{what} was cancelled: {outcome.reason}")]

    def say(self, task_id: str, context_id: str, text: str, **facts: str | None) -> Message:
        """An agent message: the text, and the MissionWeave ids it names as a data part."""
        names = {"groupId": self.mission.group_id, "missionId": self.mission.mission_id,
                 **{key: value for key, value in facts.items() if value is not None}}
        return new_message([new_text_part(text), new_data_part(names)],
                           context_id=context_id, task_id=task_id)

    # --- tasks kept across a restart --------------------------------------------------

    async def resume(self) -> None:
        """Follow again the stored tasks that had not ended when the bridge stopped. Their
        outcomes are written to the task store (no request is running for them)."""
        if not isinstance(self.task_store, DurableTaskStore):
            return
        await self.task_store.load()
        for task, owner in self.task_store.unfinished():
            outcomes = self.proposals.follow(
                task.id, authorized=task.status.state == TaskState.TASK_STATE_WORKING)
            self.handler.resumed.add(task.id)
            self._resumed.append(asyncio.create_task(self._follow_stored(task, owner,
                                                                         outcomes)))

    async def _follow_stored(self, task: Task, owner: ServerCallContext,
                             outcomes: asyncio.Queue[Outcome]) -> None:
        manager = TaskManager(self.task_store, owner, task.id, task.context_id, None)
        try:
            while True:
                outcome = await outcomes.get()
                for event in await self.report(task.id, task.context_id, outcome):
                    await manager.process(event)
                if outcome.state in ENDED:
                    return
        finally:
            self.proposals.forget(task.id)
            self.handler.resumed.discard(task.id)

    async def propose(self, proposal_id: str, contract: JsonObject) -> JsonObject:
        """`work.propose`; a session that expired or was superseded is opened again once."""
        body = {"proposalId": proposal_id, "missionId": self.mission.mission_id,
                "contract": contract}
        try:
            return await self.client.command(self.mission.group_id, "work.propose", body)
        except ApiError as error:
            if error.code not in SESSION_CODES:
                raise
        await self.open_session()
        return await self.client.command(self.mission.group_id, "work.propose", body)


async def head_sequence(client: Client, group_id: str) -> int:
    """The sequence of the Group's latest event; from the online floor (the snapshot's
    sequence) when the log's start is archived."""
    try:
        return int((await client.events(group_id, 0, 1))["headSequence"])
    except ApiError as error:
        if error.code != "CURSOR_TOO_OLD":
            raise
        floor = error.details["snapshot"]["sequence"]
        return int((await client.events(group_id, floor, 1))["headSequence"])


async def read_mission(client: Client, group_id: str, mission_id: str) -> Mission:
    mission = await client.get(f"/api/v1/groups/{group_id}/missions/{mission_id}")
    return Mission(group_id, mission_id, mission["title"], mission["coordinatorId"])


class RequireBearer:
    """Every request but the Agent Card's (discovery stays public) must carry
    `Authorization: Bearer <token>`, as the card's security scheme says."""

    def __init__(self, app: ASGIApp, token: str):
        self.app, self.expected = app, f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope["path"].startswith("/.well-known/"):
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                response = JSONResponse({"error": "a bearer token is required (the Agent "
                                         "Card's security scheme)"}, status_code=401,
                                        headers={"WWW-Authenticate": "Bearer"})
                return await response(scope, receive, send)
        await self.app(scope, receive, send)


def agent_card(mission: Mission, public_url: str, bearer: bool = False) -> AgentCard:
    card = described_card(mission, public_url)
    if bearer:  # A2A's way to say a token is required: a scheme, and a requirement naming it
        card.security_schemes["bearer"].CopyFrom(SecurityScheme(
            http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="bearer")))
        card.security_requirements.append(SecurityRequirement(schemes={"bearer": StringList()}))
    return card


def described_card(mission: Mission, public_url: str) -> AgentCard:
    return AgentCard(
        name=mission.title,
        description=f"Proposes work to the Mission \"{mission.title}\" ({mission.mission_id}) "
                    f"of the MissionWeave Group {mission.group_id}. Each message becomes a "
                    "Work Proposal that the Mission's Coordinator authorizes, or not; the "
                    "task follows it to the verified deliverables.",
        version="1",
        supported_interfaces=[AgentInterface(
            url=public_url, protocol_binding=TransportProtocol.JSONRPC,
            protocol_version=PROTOCOL_VERSION_CURRENT)],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json", "application/octet-stream"],
        skills=[AgentSkill(
            id="propose-work", name="propose work",
            description="Propose work to the Mission: the text is the goal; a data part "
                        "may carry Work Contract members (acceptanceCriteria, deliverables, "
                        "budgets, deadline, ...) over the Group's defaults.",
            tags=["missionweave", "work-proposal"],
            examples=["Summarize the attached quarterly report in one page"],
            input_modes=["text/plain", "application/json"],
            output_modes=["text/plain", "application/json", "application/octet-stream"])])


class GroupExecutor(AgentExecutor):
    """Proposes, then reports the proposal's fate until its task ends."""

    def __init__(self, bridge: GroupBridge):
        self.bridge = bridge

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message, task_id, context_id = context.message, context.task_id, context.context_id
        assert message is not None and task_id and context_id  # the SDK's builder sets them
        outcomes = self.bridge.proposals.follow(task_id)
        try:
            try:
                await self.bridge.propose(task_id, contract_from(message, self.bridge.template))
            except ApiError as error:
                state = TaskState.TASK_STATE_REJECTED if error.code in REJECTING_CODES \
                    else TaskState.TASK_STATE_FAILED
                await event_queue.enqueue_event(new_task_with(
                    message, state, refusal(error, task_id, context_id)))
                return
            except httpx.TransportError as error:
                arrived = f"; it may have been proposed all the same, as {task_id}" \
                    if may_have_arrived(error) else ""
                await event_queue.enqueue_event(new_task_with(
                    message, TaskState.TASK_STATE_FAILED, self.bridge.say(
                        task_id, context_id,
                        f"the Group service could not be reached: {error!r}{arrived}")))
                return
            mission = self.bridge.mission
            await event_queue.enqueue_event(new_task_with(
                message, TaskState.TASK_STATE_SUBMITTED, self.bridge.say(
                    task_id, context_id, f"Proposed as Work Proposal {task_id} in Mission "
                    f"{mission.mission_id}; it waits on the Coordinator "
                    f"({mission.coordinator_id}) to authorize it.", proposalId=task_id)))
            while True:
                outcome = await outcomes.get()
                for event in await self.bridge.report(task_id, context_id, outcome):
                    await event_queue.enqueue_event(event)
                if outcome.state in ENDED:
                    return
        finally:
            self.bridge.proposals.forget(task_id)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise TaskNotCancelableError(message=NOT_CANCELABLE)  # refused before, in the handler


def new_task_with(message: Message, state: TaskState, status: Message) -> Task:
    """The task a message opened, in its first state."""
    task = new_task(status.task_id, status.context_id, state, history=[message])
    task.status.message.CopyFrom(status)
    return task


def refusal(error: ApiError, task_id: str, context_id: str) -> Message:
    """The protocol's refusal as the task's status message: code and message in the text,
    and `{code, message, details}` as a data part."""
    parts: list[Part] = [
        new_text_part(f"The Group refused the proposal: {error.code}: {error.message}"),
        new_data_part({"code": error.code, "message": error.message,
                       "details": error.details})]
    return new_message(parts, context_id=context_id, task_id=task_id)


NOT_CANCELABLE = ("only the Mission's Coordinator can cancel this work (work.cancel in "
                  "MissionWeave); the task follows the proposal and turns canceled when "
                  "the Coordinator cancels it")


class GroupRequestHandler(DefaultRequestHandler):
    """The SDK's handler, except that a task is the Coordinator's to decide: no follow-up
    messages on it, no cancel from the A2A client."""

    def __init__(self, executor: AgentExecutor, tasks: TaskStore, card: AgentCard):
        super().__init__(executor, tasks, card)
        self.tasks = tasks
        self.resumed: set[str] = set()  # tasks followed again after a restart

    async def on_subscribe_to_task(self, params: SubscribeToTaskRequest,
                                   context: ServerCallContext) -> AsyncGenerator[Event, None]:
        if params.id in self.resumed:
            raise UnsupportedOperationError(message=(
                f"task {params.id} was resumed after the bridge restarted: its updates are "
                "written to the task store only; poll GetTask"))
        async for event in super().on_subscribe_to_task(params, context):
            yield event

    async def on_message_send(self, params: SendMessageRequest,
                              context: ServerCallContext) -> Message | Task:
        await self._refuse_follow_up(params, context)
        answer: Message | Task = await super().on_message_send(params, context)
        return answer

    async def on_message_send_stream(self, params: SendMessageRequest,
                                     context: ServerCallContext) -> AsyncGenerator[Event, None]:
        await self._refuse_follow_up(params, context)
        async for event in super().on_message_send_stream(params, context):
            yield event

    async def on_cancel_task(self, params: CancelTaskRequest,
                             context: ServerCallContext) -> Task | None:
        task = await self.tasks.get(params.id, context)
        if task is not None and task.status.state not in ENDED_STATES:
            waiting = " (a Work Proposal not yet authorized)" \
                if task.status.state == TaskState.TASK_STATE_SUBMITTED else ""
            raise TaskNotCancelableError(message=f"task {params.id}{waiting}: {NOT_CANCELABLE}")
        cancelled: Task | None = await super().on_cancel_task(params, context)
        return cancelled  # an unknown or ended task: the SDK's answer, an error

    async def _refuse_follow_up(self, params: SendMessageRequest,
                                context: ServerCallContext) -> None:
        task_id = params.message.task_id
        if task_id and await self.tasks.get(task_id, context) is not None:
            raise UnsupportedOperationError(message=(
                f"task {task_id} is a Work Proposal (or its WorkItem), decided by the "
                "Mission's Coordinator: it takes no follow-up messages; send a new message "
                "without a taskId to propose more work"))
