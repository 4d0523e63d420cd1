"""Tools every member gets: read a WorkItem, its inputs, its Conversation and its
Mission's graph (the same documents as the resources, for hosts that only use tools),
and post to the Conversation.

No `from __future__ import annotations`: the MCP SDK reads the signatures as written."""

import inspect
from collections.abc import Awaitable, Callable
from typing import Annotated, Literal

from mcp.server import MCPServer
from mcp.types import ToolAnnotations
from pydantic import Field

from mission_weave.protocol.json_types import JsonObject

from . import reads
from .agent import Agent
from .answers import answering

WorkItemId = Annotated[str, Field(description="The WorkItem's id.")]
READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
Tool = Callable[..., Awaitable[JsonObject]]


def adder(server: MCPServer) -> Callable[[Tool, ToolAnnotations | None], None]:
    def add(tool: Tool, annotations: ToolAnnotations | None = None) -> None:
        server.add_tool(answering(tool), description=inspect.cleandoc(tool.__doc__ or ""),
                        annotations=annotations, structured_output=False)
    return add


def register(server: MCPServer, agent: Agent) -> None:
    add = adder(server)

    async def get_work_item(work_item_id: WorkItemId) -> JsonObject:
        """Read one WorkItem: its state, owner, lease, dependencies and its contract's
        goal, deliverables, acceptance criteria, budgets and deadline."""
        return reads.work_item(await agent.work_item(work_item_id))

    async def read_inputs(work_item_id: WorkItemId) -> JsonObject:
        """Read a WorkItem's inputs: the artifacts its dependencies delivered (hash, media
        type and, for text, the content itself) and the contract's own inputs. Call it
        after start_work, before doing the work; cite the hashes you used as `sources`
        when you publish_deliverable. Same as resource
        missionweave://work-items/{id}/inputs."""
        return await reads.inputs(agent, work_item_id)

    async def read_conversation(work_item_id: WorkItemId) -> JsonObject:
        """Read a WorkItem's Conversation, oldest first: messages, ambiguities and their
        resolutions, the questions it was blocked on and their answers. Same as resource
        missionweave://work-items/{id}/conversation."""
        return await reads.conversation(agent, work_item_id)

    async def read_mission_graph(
            mission_id: Annotated[str, Field(description="The Mission's id (a WorkItem's "
                                             "missionId).")]) -> JsonObject:
        """Read a Mission: its WorkItems with their states and owners, and the dependency
        edges between them (`from` must be verified before `to` can start). Same as
        resource missionweave://missions/{id}/graph."""
        return await reads.mission_graph(agent, mission_id)

    async def post_message(
            work_item_id: WorkItemId,
            text: Annotated[str, Field(description="The message.")],
            kind: Annotated[Literal["message", "ambiguity", "resolution"],
                            Field(description="'message' (default); 'ambiguity' when the "
                                  "contract can be read two ways (it blocks acceptance "
                                  "until the Coordinator revises the contract); "
                                  "'resolution' (Coordinators only) answers an "
                                  "ambiguity named in `resolves`.")] = "message",
            resolves: Annotated[str | None, Field(description="For a resolution: the "
                                                  "messageId of the ambiguity.")] = None,
    ) -> JsonObject:
        """Post to a WorkItem's Conversation (`conversation.post`), read by its Coordinator
        and owner. Any state; no lease needed."""
        body: JsonObject = {"kind": kind, "text": text}
        if resolves:
            body["resolves"] = resolves
        answer = await agent.command("conversation.post", body, workItemId=work_item_id)
        posted = answer["events"][-1]["data"]
        return {"workItemId": work_item_id, "messageId": posted.get("messageId"),
                "kind": kind}

    for tool in (get_work_item, read_inputs, read_conversation, read_mission_graph):
        add(tool, READ_ONLY)
    add(post_message, None)
