"""The one Agent an `mw-mcp` process acts for: its SDK client and session, the Group it
works in, its roles and Agent Card there (from its membership), and the leases it holds."""

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from mission_weave.protocol.json_types import JsonObject
from mission_weave.sdk.client import ApiError, Client

from .lease_keeper import LeaseKeeper

log = logging.getLogger("mission_weave.mcp_server")
T = TypeVar("T")


class Agent:
    def __init__(self, client: Client, group_id: str, lease_seconds: int | None = None):
        self.client, self.group_id = client, group_id
        self.roles: frozenset[str] = frozenset()
        self.card: JsonObject = {}
        self.leases = LeaseKeeper(self.command, lease_seconds)

    @property
    def agent_id(self) -> str:
        return self.client.agent_id

    @property
    def principal(self) -> str:
        return self.client.principal

    @property
    def is_coordinator(self) -> bool:
        return "coordinator" in self.roles

    async def connect(self) -> None:
        """Open a session (it supersedes this Agent's previous one, whose leases the server
        revokes) and read the membership: the roles decide which tools are offered."""
        await self.client.open_session()
        member = await self.client.membership(self.group_id, refresh=True)
        self.roles = frozenset(member.get("roles") or ())
        self.card = member.get("agentCard") or {}
        log.info("agent %s in Group %s with roles %s", self.agent_id, self.group_id,
                 sorted(self.roles))

    async def close(self) -> None:
        await self.leases.close()
        await self.client.aclose()

    # --- the Group Authority's API ------------------------------------------------------

    async def command(self, type_: str, body: JsonObject, **fields: Any) -> JsonObject:
        return await self._again_if_signed_out(
            lambda: self.client.command(self.group_id, type_, body, **fields))

    async def get(self, path: str, params: JsonObject | None = None) -> JsonObject:
        """A read under the Group: `path` is relative to /api/v1/groups/{group}/."""
        return await self._again_if_signed_out(
            lambda: self.client.get(f"/api/v1/groups/{self.group_id}/{path}", params))

    async def work_item(self, work_item_id: str) -> JsonObject:
        return await self.get(f"work-items/{work_item_id}")

    async def work_items(self, **filters: Any) -> list[JsonObject]:
        items: list[JsonObject] = (await self.get("work-items", filters))["workItems"]
        return items

    async def blob(self, name: str) -> bytes:
        data = await self._again_if_signed_out(lambda: self.client.get_blob(name))
        return data if isinstance(data, bytes) else data.read_bytes()

    async def _again_if_signed_out(self, call: Callable[[], Awaitable[T]]) -> T:
        """A session whose token ran out (UNAUTHENTICATED) is opened again, once. The new
        session revokes this Agent's leases: the keeper learns it at its next renewal."""
        try:
            return await call()
        except ApiError as error:
            if error.code != "UNAUTHENTICATED":
                raise
        log.info("the session ended: opening a new one")
        await self.connect()
        return await call()
