"""The remote A2A agent as the bridge talks to it, through a2a-sdk's client: its Agent
Card (the card resolver), messages (streamed when the agent streams), a task read,
resubscribed to or cancelled, and a file part's URL downloaded.

Every failure of the agent or of the way to it (unreachable, an HTTP or JSON-RPC error, a
refused request) is raised as `AgentError`, one readable sentence naming the agent and
what was being done; URLs are shown without any credentials they carry."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from urllib.parse import urlsplit, urlunsplit

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client import Client as A2AClient
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
)
from a2a.utils.errors import A2AError

# A2A calls may stay silent while the agent works (streams above all): no read timeout.
TIMEOUT = httpx.Timeout(30.0, read=None)
LONGEST_DOWNLOAD = 64 * 1024 * 1024  # a file part's URL, downloaded to be published
CREDENTIALS = re.compile(r"//[^/@\s]+@")  # user:password@ in a URL quoted by an error
FAILURES = (A2AError, httpx.HTTPError, OSError, ValueError, NotImplementedError)
# The agent's bearer token, when its card requires one: from the environment only.
TOKEN_VARIABLE = "MW_A2A_AGENT_TOKEN"


class AgentError(Exception):
    """The A2A agent could not be reached or refused; the message says which and why."""


def shown(url: str) -> str:
    """`url` without user and password, for messages and logs."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host  # an IPv6 address
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit(parts._replace(netloc=netloc))


@contextmanager
def _talking(to: str, doing: str) -> Iterator[None]:
    try:
        yield
    except AgentError:
        raise
    except FAILURES as error:
        reason = getattr(error, "message", None) or str(error) or type(error).__name__
        raise AgentError(f"{doing} with the A2A agent {to} failed: "
                         f"{type(error).__name__}: {CREDENTIALS.sub('//', reason)}") from error


class AgentBearer(httpx.Auth):
    """`Authorization: Bearer <token>` on requests to the agent's own origins only: a file
    part's URL may point anywhere, and the token must not follow it there."""

    def __init__(self, token: str, *urls: str):
        self.header, self.origins = f"Bearer {token}", {origin(url) for url in urls}

    def trust(self, *urls: str) -> None:
        self.origins |= {origin(url) for url in urls}

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if origin(str(request.url)) in self.origins:
            request.headers["Authorization"] = self.header
        yield request


def origin(url: str) -> tuple[str, str, int | None]:
    parts = httpx.URL(url)
    return parts.scheme, parts.host, parts.port


def agent_http(url: str) -> tuple[httpx.AsyncClient, AgentBearer | None]:
    """The HTTP client to talk to the agent at `url`, with its token if one is set."""
    token = os.environ.get(TOKEN_VARIABLE)
    bearer = AgentBearer(token, url) if token else None
    return httpx.AsyncClient(timeout=TIMEOUT, auth=bearer), bearer


async def fetch_card(url: str, http: httpx.AsyncClient | None = None) -> AgentCard:
    """The agent's A2A Agent Card from `<url>/.well-known/agent-card.json`."""
    async with _http(http, url) as client:
        with _talking(shown(url), "fetching the Agent Card"):
            return await A2ACardResolver(client, url).get_agent_card()


@asynccontextmanager
async def _http(given: httpx.AsyncClient | None, url: str) -> AsyncIterator[httpx.AsyncClient]:
    """The given httpx client, or one of our own for `url`, closed on exit."""
    if given is not None:
        yield given
        return
    async with agent_http(url)[0] as own:
        yield own


class RemoteAgent:
    def __init__(self, url: str, card: AgentCard, client: A2AClient, http: httpx.AsyncClient):
        self.url, self.card, self.client, self.http = url, card, client, http

    @classmethod
    async def connect(cls, url: str) -> RemoteAgent:
        """Fetch the agent's card and make a client for the transport it offers (with
        MW_A2A_AGENT_TOKEN, sent to the agent's URL and the interfaces its card names)."""
        http, bearer = agent_http(url)
        try:
            card = await fetch_card(url, http)
            if bearer:
                bearer.trust(*(interface.url for interface in card.supported_interfaces))
            with _talking(shown(url), "choosing a transport"):
                client = ClientFactory(ClientConfig(httpx_client=http)).create(card)
        except BaseException:
            await http.aclose()
            raise
        return cls(url, card, client, http)

    async def aclose(self) -> None:
        await self.client.close()
        await self.http.aclose()

    @property
    def name(self) -> str:
        return self.card.name or shown(self.url)

    def _talking(self, doing: str) -> AbstractContextManager[None]:
        return _talking(f"{self.name} ({shown(self.url)})", doing)

    async def send(self, parts: list[Part], task_id: str | None = None,
                   context_id: str | None = None, metadata: dict[str, object] | None = None
                   ) -> AsyncGenerator[StreamResponse, None]:
        """Send a user message (to a task of the agent when `task_id`); its events follow
        (one Task or Message when the agent does not stream)."""
        message = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=parts,
                          task_id=task_id or "", context_id=context_id or "")
        if metadata:
            message.metadata.update(metadata)
        with self._talking("sending a message"):
            async for event in self.client.send_message(SendMessageRequest(message=message)):
                yield event

    async def follow(self, task_id: str) -> AsyncGenerator[StreamResponse, None]:
        """The events of a task under way (resubscribing), or the task once when the
        agent does not stream."""
        if not self.card.capabilities.streaming:
            yield StreamResponse(task=await self.task(task_id))
            return
        with self._talking(f"following task {task_id}"):
            async for event in self.client.subscribe(SubscribeToTaskRequest(id=task_id)):
                yield event

    async def task(self, task_id: str) -> Task:
        with self._talking(f"reading task {task_id}"):
            return await self.client.get_task(GetTaskRequest(id=task_id))

    async def cancel(self, task_id: str) -> Task:
        with self._talking(f"cancelling task {task_id}"):
            return await self.client.cancel_task(CancelTaskRequest(id=task_id))

    async def download(self, url: str) -> bytes:
        """The bytes a file part points to (at most LONGEST_DOWNLOAD)."""
        with self._talking(f"downloading {shown(url)}"):
            async with self.http.stream("GET", url) as response:
                response.raise_for_status()
                data = bytearray()
                async for chunk in response.aiter_bytes():
                    data += chunk
                    if len(data) > LONGEST_DOWNLOAD:
                        raise ValueError(f"the file is larger than {LONGEST_DOWNLOAD} bytes")
                return bytes(data)
