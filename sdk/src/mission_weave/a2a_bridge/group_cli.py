"""`mw-a2a-group`: serve one Mission of a MissionWeave Group as an A2A agent.

    mw-a2a-group --url http://127.0.0.1:8000 --key .mw/agents/a2a-desk.json \\
        --mission m-research [--group grp_demo] [--host 127.0.0.1 --port 9100] \\
        [--public-url https://desk.example.org/] [--contract-template contract.json] \
        [--state desk.sqlite3]

The key's Agent must be a member of the Group (any role may propose work). The Agent Card
is at `<public URL>/.well-known/agent-card.json`, the JSON-RPC endpoint at `<public URL>`.
MW_A2A_TOKEN (from the environment only) is a bearer token the endpoint then requires, as
its card says; it is required to listen anywhere but on loopback.
"""

import argparse
import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path

import httpx
import uvicorn

from mission_weave.sdk.client import ApiError, Client
from mission_weave.sdk.keys import AgentKey
from mission_weave.sdk.listening import bearer_token

from .group import GroupBridge
from .group_contract import load_template


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="mw-a2a-group", description="Serve a MissionWeave Group's Mission as an A2A "
        "agent: each A2A message becomes a work.propose for the Mission's Coordinator.")
    parser.add_argument("--url", default="http://127.0.0.1:8000",
                        help="the Group Authority (default: %(default)s)")
    parser.add_argument("--key", required=True, help="the bridge Agent's key file")
    parser.add_argument("--mission", required=True, help="the Mission that receives proposals")
    parser.add_argument("--group", help="the Group (default: the key file's groupId)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="the address to listen on (default: %(default)s)")
    parser.add_argument("--port", type=int, default=9100,
                        help="the port to listen on (default: %(default)s)")
    parser.add_argument("--public-url", help="the URL A2A clients reach this agent at "
                        "(default: http://HOST:PORT/)")
    parser.add_argument("--state", metavar="FILE", help="the SQLite file that keeps the A2A "
                        "tasks across restarts (default: beside the key file, "
                        "KEY.a2a-group-MISSION.sqlite3; ':memory:' keeps them in memory)")
    parser.add_argument("--contract-template", metavar="FILE", help="a JSON object of Work "
                        "Contract members: the defaults of every proposal (acceptance "
                        "criteria, deliverables, budgets, ...)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise

    try:
        key = AgentKey.load(args.key)
        template = load_template(args.contract_template)
        token = bearer_token("MW_A2A_TOKEN", args.host)
    except (OSError, ValueError, KeyError) as error:
        parser.error(str(error))
    group_id = args.group or key.group_id
    if not group_id:
        parser.error(f"no Group: pass --group (the key file {args.key} names none)")
    public_url = args.public_url or f"http://{args.host}:{args.port}/"
    state = args.state or str(Path(args.key).with_suffix("")) \
        + f".a2a-group-{args.mission}.sqlite3"
    try:
        asyncio.run(serve(args.url, key, group_id, args.mission, public_url, template,
                          state, args.host, args.port, token))
    except ApiError as error:
        raise SystemExit(f"mw-a2a-group: the Group Authority refused: {error.code}: "
                         f"{error.message}") from None
    except httpx.TransportError as error:
        raise SystemExit(f"mw-a2a-group: cannot reach the Group Authority at {args.url}: "
                         f"{error!r}") from None


async def serve(url: str, key: AgentKey, group_id: str, mission_id: str, public_url: str,
                template: dict[str, object], state: str, host: str, port: int,
                token: str | None) -> None:
    async with Client(url, key) as client:
        bridge = await GroupBridge.connect(client, group_id, mission_id, public_url, template,
                                           state, token)
        config = uvicorn.Config(bridge.app(), host=host, port=port, log_level="info")
        await uvicorn.Server(config).serve()


if __name__ == "__main__":
    main()
