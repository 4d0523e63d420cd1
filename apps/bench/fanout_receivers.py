"""The subscribers of mw_bench --fanout, run in a process of their own (no Django):
the committing process's Python work must not steal their GIL, and the raw Redis
subscribers get the same treatment. Receipt times are time.perf_counter(), which on
Linux is CLOCK_MONOTONIC and so comparable across processes of one machine.

Each entry point connects, reports "ready" through `pipe`, receives `count` messages
per subscriber and sends back [(key, receipt time)], or ("error", text)."""

import asyncio
import json
import time


def websocket(pipe, port: int, token: str, group_id: str, subscribers: int, head: int,
              count: int) -> None:
    _run(pipe, _websocket(pipe, port, token, group_id, subscribers, head, count))


def redis_pubsub(pipe, url: str, channel: str, subscribers: int, count: int) -> None:
    _run(pipe, _redis(pipe, url, channel, subscribers, count))


def _run(pipe, coroutine) -> None:
    try:
        pipe.send(asyncio.run(coroutine))
    except BaseException as error:  # reported to the parent, which raises it
        pipe.send(("error", repr(error)))
    finally:
        pipe.close()


async def _websocket(pipe, port, token, group_id, subscribers, head, count) -> list:
    from websockets.asyncio.client import connect

    sockets = [await connect(f"ws://127.0.0.1:{port}/ws/v1/", compression=None,
                             additional_headers={"Authorization": f"Bearer {token}"},
                             max_queue=None) for _ in range(subscribers)]
    for socket in sockets:  # one replayed event each proves the subscription live
        await socket.send(json.dumps({"op": "SUBSCRIBE", "groupId": group_id,
                                      "afterSequence": head - 1}))
    for socket in sockets:
        assert json.loads(await asyncio.wait_for(socket.recv(), 30))["op"] == "EVENT"
    receipts: list = []

    async def receive(socket):
        last = head
        while last < head + count:
            frame = json.loads(await socket.recv())
            received = time.perf_counter()
            assert frame["op"] == "EVENT", frame
            sequence = frame["event"]["sequence"]
            assert sequence == last + 1, (sequence, last)  # in order, none lost
            last = sequence
            receipts.append((sequence, received))

    pipe.send("ready")
    await asyncio.wait_for(asyncio.gather(*(receive(socket) for socket in sockets)), 120)
    for socket in sockets:
        await socket.close()
    return receipts


async def _redis(pipe, url, channel, subscribers, count) -> list:
    import redis.asyncio

    clients = [redis.asyncio.from_url(url) for _ in range(subscribers)]
    pubsubs = [client.pubsub() for client in clients]
    for pubsub in pubsubs:
        await pubsub.subscribe(channel)
        confirmation = await pubsub.get_message(timeout=5)
        assert confirmation and confirmation["type"] == "subscribe", confirmation
    receipts: list = []

    async def receive(pubsub):
        seen = 0
        while seen < count:
            message = await pubsub.get_message(timeout=30)
            if message is None or message["type"] != "message":
                continue
            received = time.perf_counter()
            receipts.append((json.loads(message["data"])["k"], received))
            seen += 1

    pipe.send("ready")
    await asyncio.wait_for(asyncio.gather(*(receive(pubsub) for pubsub in pubsubs)), 120)
    for pubsub, client in zip(pubsubs, clients):
        await pubsub.aclose()
        await client.aclose()
    return receipts
