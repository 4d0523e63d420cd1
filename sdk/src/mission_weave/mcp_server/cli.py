"""`mw-mcp`: serve one Agent's MCP server over stdio (for a host that spawns it) or
streamable HTTP (at http://HOST:PORT/mcp).

    mw-mcp --url http://127.0.0.1:8000 --key .mw/agents/worker-1.json [--group GROUP_ID]
           [--transport stdio|http] [--host 127.0.0.1 --port 8765] [--lease-seconds N]

MW_URL, MW_KEY_FILE and MW_GROUP stand in for --url, --key and --group. The key file is
named, never passed; over stdio, stdout carries the protocol alone and logs go to stderr.
Over HTTP, MW_MCP_TOKEN (from the environment only) is a bearer token every request must
carry; it is required to listen anywhere but on loopback, where anyone who reaches the
port would act as the Agent.
"""

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence

import httpx

from mission_weave.sdk.client import ApiError, Client
from mission_weave.sdk.keys import AgentKey
from mission_weave.sdk.listening import bearer_token

from .agent import Agent
from .server import build

log = logging.getLogger("mission_weave.mcp_server")


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="mw-mcp", description="An MCP server for one MissionWeave Agent (docs/agents.md).")
    parser.add_argument("--url", default=os.environ.get("MW_URL"),
                        help="the Group Authority, e.g. http://127.0.0.1:8000 (env MW_URL)")
    parser.add_argument("--key", default=os.environ.get("MW_KEY_FILE"),
                        help="the Agent's key file (env MW_KEY_FILE)")
    parser.add_argument("--group", default=os.environ.get("MW_GROUP"),
                        help="the Group (env MW_GROUP; default: the key file's)")
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP: the address to listen on")
    parser.add_argument("--port", type=int, default=8765, help="HTTP: the port (default 8765)")
    parser.add_argument("--lease-seconds", type=int, default=None,
                        help="the lease asked for on start and renewal (default: the "
                             "server's, 300)")
    parser.add_argument("--log-level", default="INFO",
                        choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    args = parser.parse_args(argv)
    if not args.url:
        parser.error("--url (or MW_URL) is required")
    if not args.key:
        parser.error("--key (or MW_KEY_FILE) is required")
    if args.lease_seconds is not None and args.lease_seconds < 1:
        parser.error("--lease-seconds must be at least 1")
    args.token = None
    if args.transport == "http":
        try:
            args.token = bearer_token("MW_MCP_TOKEN", args.host)
        except ValueError as error:
            parser.error(str(error))
    return args


async def serve(args: argparse.Namespace, key: AgentKey, group_id: str) -> None:
    agent = Agent(Client(args.url, key), group_id, args.lease_seconds)
    try:
        try:
            await agent.connect()
        except ApiError as error:
            raise SystemExit(f"mw-mcp: {args.url} refused agent {key.agent_id} in Group "
                             f"{group_id}: {error.code}: {error.message}") from None
        except httpx.TransportError as error:
            raise SystemExit(f"mw-mcp: cannot reach {args.url}: {error!r}") from None
        server = build(agent, args.token, f"http://{args.host}:{args.port}")
        if args.transport == "stdio":
            await server.run_stdio_async()
        else:
            log.info("serving MCP at http://%s:%s/mcp", args.host, args.port)
            await server.run_streamable_http_async(host=args.host, port=args.port)
    finally:
        await agent.close()


def main(argv: Sequence[str] | None = None) -> None:
    args = parse(argv)
    # stdout is the protocol's over stdio: every log line goes to stderr.
    logging.basicConfig(stream=sys.stderr, level=args.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    try:
        key = AgentKey.load(args.key)
    except (OSError, ValueError, KeyError) as error:
        raise SystemExit(f"mw-mcp: cannot read the key file {args.key}: {error!r}") from None
    group_id = args.group or key.group_id
    if not group_id:
        raise SystemExit("mw-mcp: the key file names no Group: pass --group (or MW_GROUP)")
    try:
        asyncio.run(serve(args, key, group_id))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
