"""The resources (URI templates) an MCP host can attach to the model's context: a
WorkItem's contract, inputs and Conversation, and a Mission's graph, as JSON. The read
tools (tools_shared.py) return the same documents, for hosts that only use tools."""

from collections.abc import Awaitable, Callable

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError

from mission_weave.protocol.json_types import JsonObject
from mission_weave.sdk.client import ApiError

from . import reads
from .agent import Agent
from .answers import compact

JSON = "application/json"


async def as_json(read: Callable[[], Awaitable[JsonObject]]) -> str:
    """The document as compact JSON; a refusal as a resource error `CODE: message`."""
    try:
        return compact(await read())
    except ApiError as error:
        raise ResourceError(f"{error.code}: {error.message}") from None


def register(server: MCPServer, agent: Agent) -> None:
    @server.resource("missionweave://work-items/{id}/contract", name="contract", mime_type=JSON,
                     description="A WorkItem's Work Contract (every member) with its state and "
                                 "contract revision.")
    async def contract(id: str) -> str:
        async def read() -> JsonObject:
            item = await agent.work_item(id)
            return {"workItemId": id, "state": item["state"],
                    "contractRevision": item["contractRevision"], "contract": item["contract"]}
        return await as_json(read)

    @server.resource("missionweave://work-items/{id}/inputs", name="inputs", mime_type=JSON,
                     description="A WorkItem's inputs: its dependencies' delivered artifacts "
                                 "(text content included) and the contract's inputs.")
    async def inputs(id: str) -> str:
        return await as_json(lambda: reads.inputs(agent, id))

    @server.resource("missionweave://work-items/{id}/conversation", name="conversation",
                     mime_type=JSON, description="A WorkItem's Conversation, oldest first.")
    async def conversation(id: str) -> str:
        return await as_json(lambda: reads.conversation(agent, id))

    @server.resource("missionweave://missions/{id}/graph", name="mission-graph", mime_type=JSON,
                     description="A Mission's WorkItems, their states and dependency edges.")
    async def mission_graph(id: str) -> str:
        return await as_json(lambda: reads.mission_graph(agent, id))
