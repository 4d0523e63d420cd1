"""`mw-a2a-worker`: put a remote A2A agent to work as a MissionWeave Worker.

    mw-a2a-worker register --a2a-url URL --agent-id ID --group G [--out KEYFILE]
    mw-a2a-worker run --url SERVER --key KEYFILE --a2a-url URL

`register` reads the agent's A2A Agent Card, writes a new key file (mode 0600) and the
MissionWeave Agent Card beside it (its skills as capabilities, worker_card.py), and
prints the operator commands that register the Agent. `run` works for the key's Group
(worker.py) until SIGINT or SIGTERM; the WorkItem -> A2A task links are kept beside the
key (`<key>.a2a-tasks.json`), the Cursors too (`<key>.cursors.sqlite3`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

import httpx

from mission_weave.sdk import keys
from mission_weave.sdk.client import ApiError, Client
from mission_weave.sdk.keys import AgentKey
from mission_weave.sdk.ticks import stop_on_signals
from mission_weave.sdk.worker import Worker

from .worker import A2AWork
from .worker_agent import AgentError, RemoteAgent, fetch_card, shown
from .worker_card import mission_weave_card
from .worker_state import TaskLinks

log = logging.getLogger("mission_weave.a2a_bridge.worker")


def beside(key_file: str | Path, suffix: str) -> Path:
    """A file next to the key: `.mw/agents/a.json` -> `.mw/agents/a<suffix>`."""
    return Path(str(Path(key_file).with_suffix("")) + suffix)


def register(args: argparse.Namespace) -> None:
    if not keys.AGENT_ID.match(args.agent_id):
        raise SystemExit(f"agent id {args.agent_id!r}: letters, digits and _ . @ + - only, "
                         "starting with a letter or digit, at most 100")
    try:
        a2a_card = asyncio.run(fetch_card(args.a2a_url))
    except AgentError as error:
        raise SystemExit(str(error)) from None
    card = mission_weave_card(a2a_card, args.max_concurrency, args.capability_version)
    out = Path(args.out or Path(".mw") / "agents" / f"{args.agent_id}.json")
    card_file = Path(args.card or beside(out, ".card.json"))
    key = keys.new_key(args.agent_id, args.group)
    try:
        key.save(out, overwrite=args.force)
        card_file.write_text(json.dumps(card, indent=2) + "\n")
    except FileExistsError:
        raise SystemExit(f"{out} exists: keep it, or pass --force to replace that key") from None
    except OSError as error:
        raise SystemExit(f"cannot write {error.filename}: {error.strerror}") from None
    print(f"A2A agent {a2a_card.name!r} {a2a_card.version} at {shown(args.a2a_url)}: "
          f"{len(card['capabilities'])} skills as capabilities "
          f"({', '.join(c['id'] + ' v' + c['version'] for c in card['capabilities']) or 'none'})")
    print(f"wrote {out} (mode 0600): agent {key.agent_id}, keyId {key.key_id}, "
          f"Group {key.group_id}")
    print(f"wrote {card_file}: its Agent Card")
    print("next, on the server (from the project folder, its virtualenv active):")
    for line in keys.next_steps(key, str(card_file)):
        print(f"  {line}")
    print("then:")
    print(f"  mw-a2a-worker run --url SERVER --key {out} --a2a-url {shown(args.a2a_url)}")
    sys.stdout.flush()


def run(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for noisy in ("httpx", "a2a"):  # request lines and whole cards: not for the log
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        key = AgentKey.load(args.key)
    except (OSError, ValueError, KeyError) as error:
        raise SystemExit(f"cannot read the key file {args.key}: {error!r} (make one with "
                         "mw-a2a-worker register)") from None
    groups = args.group or ([key.group_id] if key.group_id else None)
    if not groups:
        raise SystemExit(f"no Group to work for: pass --group (the key file {args.key} "
                         "names none)")
    try:
        asyncio.run(serve(args.url, key, groups, args.a2a_url,
                          args.cursors or beside(args.key, ".cursors.sqlite3"),
                          args.state or beside(args.key, ".a2a-tasks.json")))
    except AgentError as error:
        raise SystemExit(str(error)) from None
    except ApiError as error:
        raise SystemExit(f"the server at {args.url} refused: {error}") from None
    except httpx.TransportError as error:
        raise SystemExit(f"cannot reach the server at {args.url}: {error!r}") from None


async def serve(url: str, key: AgentKey, groups: list[str], a2a_url: str,
                cursors: str | Path, state: str | Path) -> None:
    stop = stop_on_signals()
    agent = await RemoteAgent.connect(a2a_url)
    log.info("agent %s works for %s as the A2A agent %s at %s", key.agent_id,
             ", ".join(groups), agent.name, shown(a2a_url))
    try:
        async with Client(url, key) as client:
            worker = Worker(client, groups, A2AWork(agent, TaskLinks(state)), cursors)
            await worker.run(stop)
    finally:
        await agent.aclose()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="mw-a2a-worker", description="A remote A2A agent "
                                     "as a MissionWeave Worker.")
    commands = parser.add_subparsers(dest="command", required=True)
    new = commands.add_parser("register", help="read the agent's A2A card, write its key and "
                              "Agent Card, print the commands that register it")
    new.add_argument("--a2a-url", required=True, help="the A2A agent's base URL (its card is "
                     "at /.well-known/agent-card.json)")
    new.add_argument("--agent-id", required=True, help="the MissionWeave agent id")
    new.add_argument("--group", required=True, help="the Group it works for")
    new.add_argument("--out", help="the key file (default: .mw/agents/AGENT_ID.json)")
    new.add_argument("--card", help="the Agent Card file (default: beside the key, "
                     "KEY.card.json)")
    new.add_argument("--capability-version", help="the version of every capability "
                     "(default: the A2A card's major version, else 1)")
    new.add_argument("--max-concurrency", type=int, default=1,
                     help="WorkItems at once (default: 1)")
    new.add_argument("--force", action="store_true", help="replace an existing key file")
    new.set_defaults(action=register)
    work = commands.add_parser("run", help="work for the Group: each WorkItem an A2A task")
    work.add_argument("--url", default="http://127.0.0.1:8000", help="the MissionWeave server")
    work.add_argument("--key", required=True, help="the key file register wrote")
    work.add_argument("--a2a-url", required=True, help="the A2A agent's base URL")
    work.add_argument("--group", action="append", help="a Group to work for (repeatable; "
                      "default: the key file's)")
    work.add_argument("--cursors", help="the SQLite Cursor file (default: beside the key)")
    work.add_argument("--state", help="the WorkItem -> A2A task links (default: beside the "
                      "key, KEY.a2a-tasks.json)")
    work.set_defaults(action=run)
    args = parser.parse_args(argv)
    if args.command == "register" and not 1 <= args.max_concurrency <= 1000:
        parser.error("--max-concurrency: from 1 to 1000")
    args.action(args)
