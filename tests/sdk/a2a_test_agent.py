"""An A2A agent for the bridge's tests, built on a2a-sdk's own server classes (an
AgentExecutor, the DefaultRequestHandler, an InMemoryTaskStore and the Starlette routes)
and served by uvicorn in a thread on a free port.

Its script (`asks`): two `working` status updates, one question (`input-required`), and
after the answer a Markdown artifact quoting it, then `completed`. A `patient` agent
works instead until it is cancelled; one that `rejects` rejects the task after the two
updates. It records what it receives and the cancellations."""

import asyncio
import threading
from dataclasses import dataclass, field

import uvicorn
from a2a.helpers import get_data_parts, get_message_text, new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Message,
    Part,
    TaskState,
)
from starlette.applications import Starlette
from starlette.middleware import Middleware

from apps.bench.harness import free_port
from mission_weave.a2a_bridge.group import RequireBearer

QUESTION = "Which section of the report matters most to you?"
REFUSAL = "I only summarize reports written in English."


@dataclass
class Seen:
    """What the agent received, read by the tests (the agent runs in another thread)."""

    messages: list[Message] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)  # task ids

    def texts(self) -> list[str]:
        return [get_message_text(m) for m in self.messages]

    def data(self) -> list[object]:
        return [d for m in self.messages for d in get_data_parts(m.parts)]


class ScriptedExecutor(AgentExecutor):
    def __init__(self, seen: Seen, script: str):
        self.seen, self.script = seen, script

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        self.seen.messages.append(context.message)
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)

        def say(text: str) -> Message:
            return updater.new_agent_message([Part(text=text)])

        if task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:  # the answer
            answer = context.get_user_input()
            await updater.add_artifact(
                [Part(text=f"# Summary\n\nFocused on: {answer}\n", media_type="text/markdown")],
                name="summary")
            await updater.complete(say("done"))
            return
        await updater.start_work(say("reading the contract"))
        await asyncio.sleep(0.05)
        await updater.update_status(TaskState.TASK_STATE_WORKING, say("drafting the summary"))
        if self.script == "patient":
            await asyncio.sleep(60)  # until cancelled
        elif self.script == "rejects":
            await updater.reject(say(REFUSAL))
            return
        await updater.requires_input(say(QUESTION))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None and context.context_id is not None
        self.seen.cancelled.append(context.task_id)
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def card(url: str) -> AgentCard:
    return AgentCard(
        name="Test Summarizer", description="Summarizes reports, asking one question.",
        version="2.1.0", default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/markdown"],
        capabilities=AgentCapabilities(streaming=True),
        supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC",
                                             protocol_version="1.0")],
        skills=[AgentSkill(id="summarize", name="Summarize", description="One-page summaries",
                           tags=["writing"]),
                AgentSkill(id="research", name="Research", description="Finds sources",
                           tags=["research"])])


class TestAgent:
    """The agent served on 127.0.0.1 in a thread: `url`, `seen`; `stop()` when done."""

    __test__ = False  # not a test class for pytest

    def __init__(self, script: str = "asks", token: str | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.seen = Seen()
        agent_card = card(self.url + "/")
        handler = DefaultRequestHandler(agent_executor=ScriptedExecutor(self.seen, script),
                                        task_store=InMemoryTaskStore(), agent_card=agent_card)
        # With `token`, it requires a bearer token as mw-a2a-group does (the card is public).
        guard = [Middleware(RequireBearer, token=token)] if token else []
        app = Starlette(routes=[*create_agent_card_routes(agent_card),
                                *create_jsonrpc_routes(handler, rpc_url="/")],
                        middleware=guard)
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port,
                                                    log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> "TestAgent":
        self.thread.start()
        for _ in range(200):
            if self.server.started:
                return self
            self.thread.join(0.05)
        raise RuntimeError(f"the test A2A agent did not start on {self.url}")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
