"""PostgreSQL restarted under load: a private server (the pgserver wheel's binaries,
mission_weave/stack/services.py, on a port and data folder of its own; never this
machine's), stopped with an immediate shutdown (SIGQUIT: no checkpoint, crash recovery
at the next start) twice while SDK clients keep sending commands through daphne × 2.

No command that was acknowledged (200) is lost: each is in the log after the restarts
with its events, sequences and hashes as answered. The clients recover on their own:
the SDK retries the same envelope on a 5xx or a broken connection, and the web
processes are the same ones before and after (their connection pools drop the broken
connections). mw_verify is green on every Group."""

import asyncio
import logging
import signal
import time
import uuid

import psycopg
import pytest

from apps.bench.harness import free_port
from mission_weave.protocol import canonical
from mission_weave.sdk.client import Client
from mission_weave.sdk.keys import AgentKey
from mission_weave.stack import services
from tests.faults import procs, seed
from tests.integration.wslive import server_env

GROUPS, CLIENTS = 8, 8
RESTARTS, EVERY = 2, 5.0  # restarts, seconds of load before each and after the last


class Retries(logging.Handler):
    """Counts the SDK's "retrying" log lines (a 5xx or a broken connection)."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def emit(self, record):
        self.count += "retrying" in record.getMessage()


@pytest.fixture
def private_postgres(tmp_path_factory):
    folder = tmp_path_factory.mktemp("private-pg")
    port = free_port()
    server = services.start_postgres(folder / "data", port, folder / "postgres.log")
    holder = {"server": server}

    def restart() -> float:
        """Immediate shutdown, then start again on the same folder and port: the
        seconds the database was away."""
        went = time.monotonic()
        holder["server"].process.send_signal(signal.SIGQUIT)
        holder["server"].process.wait(30)
        holder["server"] = services.start_postgres(folder / "data", port,
                                                   folder / "postgres.log")
        return time.monotonic() - went

    yield server.url, restart
    holder["server"].stop()


def test_postgres_restarted_under_load_loses_no_acknowledged_command(private_postgres,
                                                                     tmp_path, figure):
    url, restart = private_postgres
    cast = seed.run(url, "cast", f"pg{uuid.uuid4().hex[:6]}", str(GROUPS), "1")
    port = free_port()
    env = {**server_env(), "DATABASE_URL": url, "MW_DB_POOL_TIMEOUT": "5",
           "MW_DATA_DIR": str(tmp_path)}
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    log = tmp_path / "web.log"
    web = procs.web(port, env, log, workers=2)
    daphnes = _children(web.pid)
    retries = Retries()
    logging.getLogger("mission_weave.sdk").addHandler(retries)
    try:
        acked, downtimes, recoveries = asyncio.run(asyncio.wait_for(
            _load(f"http://127.0.0.1:{port}", cast, restart), 300))
        assert _children(web.pid) == daphnes  # the same web processes throughout
    finally:
        logging.getLogger("mission_weave.sdk").removeHandler(retries)
        procs.stop(web)

    assert len(acked) > 100
    with psycopg.connect(url) as connection:
        logged = {}
        for command_id, sequence, hash_ in connection.execute(
                "SELECT command_id, sequence, hash FROM ledger_event WHERE command_id = ANY(%s)",
                [list(acked)]):
            logged.setdefault(command_id, []).append((sequence, hash_))
        recorded = {c for (c,) in connection.execute(
            "SELECT command_id FROM ledger_commandrecord WHERE accepted AND command_id = ANY(%s)",
            [list(acked)])}
    lost = [c for c, events in acked.items() if sorted(logged.get(c, [])) != sorted(events)]
    assert lost == []
    assert recorded == set(acked)
    assert retries.count > 0  # the restarts were felt, and retried through
    assert seed.run(url, "verify", *cast["groups"]) == {"problems": []}
    figure(f"private PostgreSQL restarted {RESTARTS}× (immediate shutdown, down "
           f"{', '.join(f'{d:.1f}' for d in downtimes)} s) under {CLIENTS} SDK clients "
           f"through daphne × 2: {len(acked)} commands acknowledged, 0 lost; "
           f"{retries.count} retries (5xx or broken connection), first acknowledgement "
           f"{', '.join(f'{r:.1f}' for r in recoveries)} s after each restart, no manual "
           f"step, same web processes; mw_verify green")


def _children(pid: int) -> list:
    with open(f"/proc/{pid}/task/{pid}/children") as children:
        return sorted(children.read().split())


async def _load(url: str, cast: dict, restart) -> tuple[dict, list, list]:
    """CLIENTS coroutines sending mission.create (one event each) round-robin over the
    Groups while the database is restarted RESTARTS times; {command id: [(sequence,
    hash)]} of the acknowledged ones, the downtimes, and for each restart the seconds
    from the database being back to the next acknowledgement."""
    me = cast["coordinator"]
    key = AgentKey(me["agentId"], me["keyId"], canonical.private_key_from_b64url(
        me["privateKey"]))
    acked, stop = {}, asyncio.Event()
    last_ack = [0.0]

    async def client(index: int) -> None:
        c = Client(url, key, retries=40, backoff_seconds=0.1)
        c.token, c.session_epoch = me["token"], me["sessionEpoch"]
        k = index
        try:
            while not stop.is_set():
                group_id = cast["groups"][k % len(cast["groups"])]
                k += CLIENTS
                answer = await c.command(group_id, "mission.create", {
                    "title": "load", "ownerId": "user:bench", "coordinatorId": key.principal})
                acked[answer["commandId"]] = [(e["sequence"], e["hash"])
                                              for e in answer["events"]]
                last_ack[0] = time.monotonic()
        finally:
            await c.aclose()

    tasks = [asyncio.create_task(client(i)) for i in range(CLIENTS)]
    downtimes, recoveries = [], []
    for _ in range(RESTARTS):
        await asyncio.sleep(EVERY)
        downtimes.append(await asyncio.to_thread(restart))
        back = time.monotonic()
        while last_ack[0] < back:
            assert not any(t.done() for t in tasks), [t.exception() for t in tasks if t.done()]
            await asyncio.sleep(0.05)
        recoveries.append(last_ack[0] - back)
    await asyncio.sleep(EVERY)
    stop.set()
    await asyncio.gather(*tasks)
    return acked, downtimes, recoveries
