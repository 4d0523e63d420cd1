"""The MCP server of one Agent: the shared reads for every member, the worker's tools
for an Agent with the `worker` role, the Coordinator's for one with `coordinator` (its
membership in the Group says which), and the resources."""

import hmac

from mcp.server import MCPServer
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from pydantic import AnyHttpUrl

from . import resources, tools_coordinator, tools_shared, tools_worker
from .agent import Agent

INSTRUCTIONS = """\
You act as MissionWeave Agent {agent} in Group {group} (roles: {roles}). Work comes as
WorkItems, each with a Work Contract (goal, deliverables, acceptance criteria, budgets,
deadline). A worker's order of steps: list_offers -> accept_offer -> start_work ->
read_inputs -> (report_progress) -> publish_deliverable -> submit_work with Evidence for
every acceptance criterion. If you cannot go on: block_work (a question for the
Coordinator), pause_work, or give_up. This server renews your lease in the background.
A refused call's text starts with the protocol's code (e.g. STALE_LEASE) and says what
to do next."""

COORDINATING = """
As Coordinator: create_mission -> authorize_work_item (add_dependency, revise_contract)
-> offer_work_item -> after a submission, read_review -> accept_result or fail_result."""


class SharedToken:
    """The MCP library's token check for one shared bearer token (MW_MCP_TOKEN): over HTTP
    whoever reaches the port acts as this Agent, so a listener off loopback requires it."""

    def __init__(self, token: str):
        self.token = token

    async def verify_token(self, token: str) -> AccessToken | None:
        if hmac.compare_digest(token.encode(), self.token.encode()):
            return AccessToken(token=token, client_id="mw-mcp", scopes=[])
        return None


def build(agent: Agent, bearer_token: str | None = None,
          public_url: str = "http://127.0.0.1") -> MCPServer:
    """The server for `agent`; with `bearer_token`, its HTTP transport answers 401 to a
    request without `Authorization: Bearer <token>`."""
    instructions = INSTRUCTIONS.format(agent=agent.agent_id, group=agent.group_id,
                                       roles=", ".join(sorted(agent.roles)) or "none")
    if agent.is_coordinator:
        instructions += COORDINATING
    server: MCPServer = MCPServer(
        "missionweave", instructions=instructions, log_level="WARNING",
        token_verifier=SharedToken(bearer_token) if bearer_token else None,
        auth=AuthSettings(issuer_url=AnyHttpUrl(public_url), resource_server_url=None)
        if bearer_token else None)
    tools_shared.register(server, agent)
    if "worker" in agent.roles:
        tools_worker.register(server, agent)
    if agent.is_coordinator:
        tools_coordinator.register(server, agent)
    resources.register(server, agent)
    return server
