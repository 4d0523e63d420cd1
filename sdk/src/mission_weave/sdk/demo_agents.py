"""The demo's agents in one process, for `make run`: the demo coordinator loop and two
Workers with the demo handler, started once the server answers, stopped with it.

    python -m mission_weave.sdk.demo_agents --url http://127.0.0.1:8000 --keys .mw/agents
"""

import argparse
import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path

import httpx

from .client import Client
from .coordinator import Coordinator
from .demo import handle
from .keys import AgentKey
from .ticks import stop_on_signals
from .worker import Worker

log = logging.getLogger("mission_weave.sdk.demo_agents")


async def wait_for_server(url: str, stop: asyncio.Event, seconds: float = 120) -> bool:
    deadline = asyncio.get_running_loop().time() + seconds
    async with httpx.AsyncClient(timeout=2) as http:
        while not stop.is_set() and asyncio.get_running_loop().time() < deadline:
            try:
                if (await http.get(f"{url}/api/v1/authority")).status_code == 200:
                    return True
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.5)
    return False


async def run(url: str, keys: Path, group_id: str, workers: list[str],
              stop: asyncio.Event) -> None:
    if not await wait_for_server(url, stop):
        log.error("the server at %s did not answer; no demo agents", url)
        return
    clients = [Client(url, AgentKey.load(keys / f"{name}.json"))
               for name in ["coordinator", *workers]]
    agents: list[Coordinator | Worker] = [
        Coordinator(clients[0], group_id, keys / "coordinator.cursors.sqlite3")]
    agents += [Worker(client, [group_id], handle, keys / f"{name}.cursors.sqlite3")
               for client, name in zip(clients[1:], workers)]
    log.info("demo agents running: coordinator, %s", ", ".join(workers))
    try:
        await asyncio.gather(*(agent.run(stop) for agent in agents))
    finally:
        for client in clients:
            await client.aclose()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m mission_weave.sdk.demo_agents")
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--keys", default=".mw/agents", help="where mw_demo wrote the keys")
    parser.add_argument("--group", default="grp_demo")
    parser.add_argument("--workers", default="worker-1,worker-2")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s demo-agents %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)

    async def serve() -> None:
        stop = stop_on_signals()
        await run(args.url, Path(args.keys), args.group, args.workers.split(","), stop)

    asyncio.run(serve())


if __name__ == "__main__":
    main()
