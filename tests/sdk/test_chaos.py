"""Chaos: thousands of events streamed to an inbox while a TCP proxy between it and the
server cuts every connection at random moments and the server process is restarted
once. After dedupe the application has seen every event exactly once, in order, and
the Cursor never moved over a gap (CursorStore.advance refuses any jump, which would
have stopped the inbox)."""

import asyncio
import os
import random
import uuid

import pytest

from apps.bench.harness import free_port, start_server, stop_server
from mission_weave.sdk.client import Client
from mission_weave.sdk.inbox import CursorStore, Inbox
from tests.sdk.conftest import OWNER, run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

EVENTS = int(os.environ.get("MW_CHAOS_EVENTS", "4000"))  # more for a longer run: 10000
PRODUCERS = 8


class CuttingProxy:
    """A byte-level TCP proxy (HTTP and WebSocket alike) that can drop every open
    connection at once."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.open: set = set()
        self.cuts = 0

    async def start(self, port: int) -> None:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", port)

    async def _accept(self, reader, writer):
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(
                "127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        pair = (writer, upstream_writer)
        self.open.add(pair)
        await asyncio.gather(self._pipe(reader, upstream_writer),
                             self._pipe(upstream_reader, writer), return_exceptions=True)
        self.open.discard(pair)
        for end in pair:
            end.close()

    @staticmethod
    async def _pipe(source, sink):
        try:
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
        finally:
            sink.close()

    def cut(self) -> None:
        self.cuts += 1
        for pair in list(self.open):
            for end in pair:
                end.transport.abort()

    async def close(self):
        self.cut()
        self.server.close()


def test_every_event_exactly_once_in_order_through_cuts_and_a_server_restart(
        mw_server, live_group, tmp_path):
    g = live_group.group_id
    port = free_port()
    process = start_server(port, env=mw_server.env)
    direct_url = f"http://127.0.0.1:{port}"
    seen: list = []
    rng = random.Random(7)

    async def handle(event):
        seen.append(event["sequence"])

    async def scenario():
        nonlocal process
        proxy = CuttingProxy(port)
        proxy_port = free_port()
        await proxy.start(proxy_port)
        producers = [Client(direct_url, live_group.coordinator.key, retries=12,
                            backoff_seconds=0.2) for _ in range(PRODUCERS)]
        await producers[0].open_session()
        for producer in producers[1:]:  # one session, shared by the producing connections
            producer.token, producer.session_epoch = producers[0].token, producers[0].session_epoch
        consumer = Client(f"http://127.0.0.1:{proxy_port}", live_group.workers[0].key,
                          retries=12, backoff_seconds=0.1)
        await consumer.open_session()
        inbox = Inbox(consumer, [g], handle, CursorStore(tmp_path / "chaos.sqlite3"),
                      transport="ws", gap_seconds=0.5)
        stop = asyncio.Event()
        inbox_task = asyncio.create_task(inbox.run(stop))
        await asyncio.wait_for(inbox.connected.wait(), 20)
        produced = 0

        async def produce(producer, count):
            nonlocal produced
            for _ in range(count):
                await producer.command(g, "mission.create", {
                    "missionId": f"m-{uuid.uuid4().hex}", "title": "chaos",
                    "ownerId": OWNER, "coordinatorId": producer.principal})
                produced += 1

        async def chaos():
            nonlocal process
            restarted = False
            while produced < EVENTS:
                await asyncio.sleep(rng.uniform(0.05, 0.4))
                proxy.cut()
                if not restarted and produced >= EVENTS // 2:
                    restarted = True
                    await asyncio.to_thread(stop_server, process)
                    process = await asyncio.to_thread(start_server, port, env=mw_server.env)
            return restarted

        share = EVENTS // PRODUCERS
        results = await asyncio.gather(
            chaos(), *(produce(p, share + (EVENTS % PRODUCERS if i == 0 else 0))
                       for i, p in enumerate(producers)))
        head = (await producers[0].events(g, 0, 1))["headSequence"]
        deadline = asyncio.get_running_loop().time() + 180
        while inbox.cursor(g) < head and asyncio.get_running_loop().time() < deadline:
            assert not inbox_task.done(), inbox_task.exception()
            await asyncio.sleep(0.2)
        stop.set()
        proxy.cut()
        await asyncio.wait_for(inbox_task, 30)
        await proxy.close()
        for client in [*producers, consumer]:
            await client.aclose()
        return results[0], head, proxy.cuts, inbox

    try:
        restarted, head, cuts, inbox = run(scenario(), timeout=900)
    finally:
        stop_server(process)

    assert restarted
    assert head == EVENTS
    assert cuts >= 10
    assert seen == list(range(1, EVENTS + 1))
    assert CursorStore(tmp_path / "chaos.sqlite3").get(g)[0] == EVENTS
    assert inbox.received["ws"] > 0
