"""Driving `mw-mcp` with the `mcp` package's own client, as an MCP host would: over stdio
(the client spawns the server) or streamable HTTP (a server started on a free port)."""

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from apps.bench.harness import free_port

MW_MCP = str(Path(sys.executable).with_name("mw-mcp"))  # the installed console script


@contextlib.asynccontextmanager
async def stdio_session(url: str, key_file: Path, *args: str,
                        errlog: Path) -> AsyncIterator[ClientSession]:
    """An initialized session with `mw-mcp` spawned over stdio; its settings come from
    the environment (MW_URL, MW_KEY_FILE), as a host's short config gives them."""
    server = StdioServerParameters(command=MW_MCP, args=list(args),
                                   env={"MW_URL": url, "MW_KEY_FILE": str(key_file)})
    with errlog.open("a") as log:
        async with stdio_client(server, errlog=log) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            yield session


@contextlib.asynccontextmanager
async def http_server(url: str, key_file: Path, *args: str, errlog: Path,
                      token: str | None = None) -> AsyncIterator[str]:
    """`mw-mcp --transport http` on a free port (with MW_MCP_TOKEN = `token`): its URL."""
    port = free_port()
    env = {**os.environ, **({"MW_MCP_TOKEN": token} if token else {})}
    with errlog.open("a") as log:
        process = subprocess.Popen(
            [MW_MCP, "--url", url, "--key", str(key_file), "--transport", "http",
             "--port", str(port), *args], stdout=log, stderr=log, env=env)
    try:
        await listening(port, process)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=20)


@contextlib.asynccontextmanager
async def http_session(url: str, key_file: Path, *args: str, errlog: Path,
                       token: str | None = None) -> AsyncIterator[ClientSession]:
    """An initialized session with `mw-mcp --transport http` on a free port, sending
    `token` as its bearer token."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with http_server(url, key_file, *args, errlog=errlog, token=token) as endpoint, \
            httpx2.AsyncClient(headers=headers, timeout=30) as client, \
            streamable_http_client(endpoint, http_client=client) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def listening(port: int, process: subprocess.Popen, timeout: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"mw-mcp exited with {process.returncode}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        await asyncio.sleep(0.1)
    raise AssertionError(f"mw-mcp did not listen on {port}")


async def call(session: ClientSession, tool: str, **arguments) -> dict:
    """The tool's JSON answer; fails the test on a tool error, showing its text."""
    result = await session.call_tool(tool, arguments)
    text = result.content[0].text
    assert not result.is_error, f"{tool}: {text}"
    return json.loads(text)


async def refusal(session: ClientSession, tool: str, **arguments) -> str:
    """The text of the tool error the call must end in."""
    result = await session.call_tool(tool, arguments)
    assert result.is_error, f"{tool} was not refused: {result.content[0].text}"
    return result.content[0].text


async def tool_names(session: ClientSession) -> set[str]:
    return {tool.name for tool in (await session.list_tools()).tools}


async def resource(session: ClientSession, uri: str) -> dict:
    contents = (await session.read_resource(uri)).contents
    return json.loads(contents[0].text)
