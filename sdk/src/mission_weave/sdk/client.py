"""The async client of a Group Authority (PROTOCOL §1, §2, §4, §5).

    async with Client("http://127.0.0.1:8000", AgentKey.load(".mw/agents/worker-1.json")) as c:
        await c.open_session()
        answer = await c.command("grp_demo", "work.accept_offer", {"contractRevision": 1},
                                 workItemId="research")

Every command goes through one seam, `send(group_id, envelope)`: it posts the signed
envelope and retries the *same* envelope (same id) on a network error or a 5xx, so the
server's idempotency answers a retry with the original outcome (`duplicate: true`).
Offline buffering can later wrap `send` without reshaping callers.
"""

import asyncio
import hashlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from mission_weave.protocol import canonical
from mission_weave.protocol.json_types import JsonObject
from mission_weave.protocol.timefmt import format_time

from .ids import uuid7
from .keys import AgentKey

log = logging.getLogger("mission_weave.sdk")

CHUNK = 1 << 16


# Transport failures before a request left this process: the server never saw it.
NEVER_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


def retry_after(response: httpx.Response, longest: float = 60.0) -> float:
    """The seconds a 429 (RATE_LIMITED) asks to wait (`Retry-After`), at most `longest`;
    0 without one."""
    try:
        return min(max(float(response.headers.get("Retry-After", 0)), 0.0), longest)
    except ValueError:
        return 0.0


def may_have_arrived(error: BaseException) -> bool:
    """Whether a request that failed with `error` (a transport failure of `Client`) may
    have reached the server, its answer lost: False only if no attempt was ever sent."""
    return bool(getattr(error, "request_sent", not isinstance(error, NEVER_SENT)))


class ApiError(Exception):
    """A PROTOCOL error answer (`{"error": {code, message, details}}`), or a client-side
    check that failed with the same vocabulary (HASH_MISMATCH on a download)."""

    def __init__(self, status: int, code: str, message: str,
                 details: JsonObject | None = None):
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message = status, code, message
        self.details = details or {}

    @classmethod
    def from_response(cls, response: httpx.Response) -> "ApiError":
        try:
            error = response.json()["error"]
            return cls(response.status_code, error["code"], error["message"],
                       error.get("details"))
        except (ValueError, KeyError, TypeError):
            return cls(response.status_code, "UNEXPECTED_RESPONSE", response.text[:300])


def utcnow() -> datetime:
    return datetime.now(UTC)


blob_hash = canonical.sha256_hex  # a blob is named by its bytes' sha256


class Client:
    def __init__(self, base_url: str, key: AgentKey, *, retries: int = 6,
                 backoff_seconds: float = 0.2, timeout: float = 30.0,
                 http: httpx.AsyncClient | None = None):
        self.base_url = base_url.rstrip("/")
        self.key = key
        self.retries = retries
        self.backoff_seconds = backoff_seconds
        self.http = http or httpx.AsyncClient(base_url=self.base_url, timeout=timeout)
        self.token: str | None = None
        self.session_epoch: int | None = None
        self._memberships: dict[str, JsonObject] = {}

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    @property
    def agent_id(self) -> str:
        return self.key.agent_id

    @property
    def principal(self) -> str:
        return self.key.principal

    @property
    def ws_url(self) -> str:
        return self.base_url.replace("http://", "ws://", 1).replace("https://", "wss://", 1) \
            + "/ws/v1/"

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    # --- sessions and membership (§1) ------------------------------------------------

    async def open_session(self) -> JsonObject:
        """Open a session; it supersedes the previous one (whose leases the server
        revokes) and sets the token and sessionEpoch every command carries."""
        request = self.key.sign({"agentId": self.agent_id, "keyId": self.key.key_id,
                                 "nonce": uuid.uuid4().hex, "issuedAt": format_time(utcnow())})
        session = await self._request("POST", "/api/v1/sessions", json=request, retry=False)
        self.token, self.session_epoch = session["token"], session["sessionEpoch"]
        self._memberships.clear()
        return session

    async def membership(self, group_id: str, refresh: bool = False) -> JsonObject:
        """`{groupId, principal, roles, membershipEpoch, agentCard}` of this Agent."""
        if refresh or group_id not in self._memberships:
            self._memberships[group_id] = await self.get(f"/api/v1/groups/{group_id}/membership")
        return self._memberships[group_id]

    def known_membership(self, group_id: str) -> JsonObject | None:
        """The membership as last read (`membership()`, or re-read by `command()` on
        STALE_MEMBERSHIP), without a request; None before the first read."""
        return self._memberships.get(group_id)

    # --- commands (§2) ---------------------------------------------------------------

    def envelope(self, group_id: str, type_: str, body: JsonObject, membership_epoch: int,
                 **fields: Any) -> JsonObject:
        """A signed command envelope; `fields` are workItemId, ownershipEpoch, leaseId,
        expectedRevision, extensions or id (None values are left out)."""
        envelope = {"id": fields.pop("id", None) or uuid7(), "type": type_, "groupId": group_id,
                    "actor": self.principal, "issuedAt": format_time(utcnow()),
                    "sessionEpoch": self.session_epoch, "membershipEpoch": membership_epoch,
                    "body": body}
        envelope.update({k: v for k, v in fields.items() if v is not None})
        return self.key.sign(envelope)

    async def send(self, group_id: str, envelope: JsonObject) -> JsonObject:
        """Post one signed envelope; the one path every command takes. Retries the same
        envelope on network errors, 5xx and 429; an answer with `duplicate: true` is the
        original success. A 4xx raises ApiError (the server appended nothing)."""
        return await self._request("POST", f"/api/v1/groups/{group_id}/commands", json=envelope,
                                   retry=True)

    async def command(self, group_id: str, type_: str, body: JsonObject | None = None,
                      **fields: Any) -> JsonObject:
        """Build, sign and send a command. When the membership changed since it was
        read (STALE_MEMBERSHIP), re-read it and send a new command once."""
        member = await self.membership(group_id)
        envelope = self.envelope(group_id, type_, body or {}, member["membershipEpoch"],
                                 **fields)
        try:
            return await self.send(group_id, envelope)
        except ApiError as error:
            if error.code != "STALE_MEMBERSHIP" or "id" in fields:
                raise
        member = await self.membership(group_id, refresh=True)
        return await self.send(group_id, self.envelope(group_id, type_, body or {},
                                                       member["membershipEpoch"], **fields))

    # --- reads and presence ----------------------------------------------------------

    async def get(self, path: str, params: JsonObject | None = None) -> JsonObject:
        return await self._request("GET", path, params=params, retry=True)

    async def events(self, group_id: str, after: int, limit: int = 1000) -> JsonObject:
        """`{events, headSequence}`; raises ApiError CURSOR_TOO_OLD (410) below the floor."""
        return await self.get(f"/api/v1/groups/{group_id}/events",
                              {"after": after, "limit": limit})

    async def work_item(self, group_id: str, work_item_id: str) -> JsonObject:
        return await self.get(f"/api/v1/groups/{group_id}/work-items/{work_item_id}")

    async def work_items(self, group_id: str, **filters: Any) -> list[JsonObject]:
        items: list[JsonObject] = (await self.get(f"/api/v1/groups/{group_id}/work-items",
                                                  filters))["workItems"]
        return items

    async def authority_keys(self) -> dict[str, Ed25519PublicKey]:
        """{keyId: Ed25519PublicKey} of the Group Authority."""
        answer = await self.get("/api/v1/authority")
        return {k["keyId"]: canonical.public_key_from_b64url(k["publicKey"])
                for k in answer["keys"]}

    async def presence(self, available_slots: int, status: str = "available",
                       retry: bool = True) -> JsonObject:
        return await self._request("POST", "/api/v1/presence", retry=retry,
                                   json={"availableSlots": available_slots, "status": status})

    # --- blobs (§5) ------------------------------------------------------------------

    async def put_blob(self, data: bytes | str | Path) -> str:
        """Upload bytes (or a file, streamed) under their sha256 name; returns the name."""
        if isinstance(data, (str, Path)):
            path = Path(data)
            digest = hashlib.sha256()
            with path.open("rb") as source:
                for chunk in iter(lambda: source.read(CHUNK), b""):
                    digest.update(chunk)
            name = "sha256:" + digest.hexdigest()

            def body() -> bytes | AsyncIterator[bytes]:  # a fresh stream for every attempt
                return stream()

            async def stream() -> AsyncIterator[bytes]:
                with path.open("rb") as source:
                    while chunk := await asyncio.to_thread(source.read, CHUNK):
                        yield chunk
        else:
            name = blob_hash(data)

            def body() -> bytes | AsyncIterator[bytes]:
                return data
        await self._request("PUT", f"/api/v1/blobs/{name}", content_factory=body, retry=True,
                            headers={"Content-Type": "application/octet-stream"})
        return name

    async def get_blob(self, name: str, into: str | Path | None = None) -> bytes | Path:
        """Download a blob, hashing it while it streams; raises ApiError HASH_MISMATCH
        (and keeps nothing) when the bytes are not the ones named. With `into`, the
        bytes go to that file (written beside it first, renamed once verified)."""
        expected = name.removeprefix("sha256:")
        digest = hashlib.sha256()
        parts: list[bytes] = []
        target = Path(into) if into is not None else None
        partial = Path(f"{into}.partial") if into is not None else None
        sink = partial.open("wb") if partial else None
        try:
            async with self.http.stream("GET", f"/api/v1/blobs/{name}",
                                        headers=self.auth_headers()) as response:
                if response.status_code != 200:
                    await response.aread()
                    raise ApiError.from_response(response)
                async for chunk in response.aiter_bytes(CHUNK):
                    digest.update(chunk)
                    sink.write(chunk) if sink else parts.append(chunk)
            if digest.hexdigest() != expected:
                raise ApiError(422, "HASH_MISMATCH", f"the downloaded bytes are not {name}",
                               {"actual": "sha256:" + digest.hexdigest()})
        except BaseException:
            if sink and partial:
                sink.close()
                partial.unlink(missing_ok=True)
            raise
        if sink and partial and target:
            sink.close()
            partial.replace(target)
            return target
        return b"".join(parts)

    # --- transport ---------------------------------------------------------------------

    async def _request(self, method: str, path: str, *, retry: bool,
                       json: JsonObject | None = None, params: JsonObject | None = None,
                       content_factory: Callable[[], bytes | AsyncIterator[bytes]] | None = None,
                       headers: dict[str, str] | None = None) -> JsonObject:
        attempts = self.retries + 1 if retry else 1
        sent = False  # whether any attempt may have reached the server
        for attempt in range(attempts):
            last = attempt == attempts - 1
            delay = min(self.backoff_seconds * 2 ** attempt, 5.0)
            try:
                response = await self.http.request(
                    method, path, json=json, params=params,
                    content=content_factory() if content_factory else None,
                    headers={**self.auth_headers(), **(headers or {})})
            except httpx.TransportError as error:
                sent = sent or not isinstance(error, NEVER_SENT)
                if last:
                    # An attribute of ours on httpx's exception, read by may_have_arrived().
                    setattr(error, "request_sent", sent)
                    raise
                log.info("%s %s: %s; retrying", method, path, error)
            else:
                if response.status_code < 400:
                    # Every answer of the API is a JSON object (or empty: 204).
                    answer: JsonObject = response.json() if response.content else {}
                    return answer
                retryable = response.status_code >= 500 or response.status_code == 429
                if not retryable or last:
                    raise ApiError.from_response(response)
                delay = max(delay, retry_after(response))
                log.info("%s %s: %s; retrying in %.1f s", method, path, response.status_code,
                         delay)
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")
