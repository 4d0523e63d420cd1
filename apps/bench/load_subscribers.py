"""WebSocket subscribers in a process of their own (no Django): mw_bench --load's, and
the fault tests' (a Redis restart, the scale-out run). Like apps/bench/fanout_receivers.py
they run on one event loop away from the process that drives the load, so its Python
does not hold their GIL; unlike those, they behave as a protocol client must when the
server or the network lets them down (PROTOCOL §4): every EVENT is deduplicated by
sequence, and a dropped connection is opened again and each Group subscribed again
from the last sequence it has.

`run(pipe, sockets, token, after)`: `sockets` is [(ws url, [group ids])], one connection
each; each Group is subscribed with afterSequence = after[group] - 1, so that its first
frame, a replay of event after[group], proves the subscription live. Once every socket
has that, "ready" goes up the pipe. Then the parent sends {"heads": {group: sequence},
"seconds": S} when its load is over: the subscribers go on until each has every event
up to those heads, or S seconds passed, and send back {"sockets": [...], "latencies":
[...]} (each socket: frames, duplicates, reconnects, out-of-order frames, and the events
missing per Group; latencies: seconds from each event's occurredAt to its first
receipt), or ("error", text)."""

import asyncio
import json
import time
from datetime import datetime

RECONNECT_SECONDS = 0.2


def run(pipe, sockets: list, token: str, after: dict) -> None:
    try:
        pipe.send(asyncio.run(_run(pipe, sockets, token, after)))
    except BaseException as error:  # reported to the parent, which raises it
        pipe.send(("error", repr(error)))
    finally:
        pipe.close()


class Subscriber:
    def __init__(self, url: str, groups: list, token: str, after: dict):
        self.url, self.groups, self.token = url, groups, token
        self.last = {g: after[g] - 1 for g in groups}  # highest contiguous sequence held
        self.seen: dict[str, set[int]] = {g: set() for g in groups}
        self.first = {g: after[g] for g in groups}
        self.frames = self.duplicates = self.reconnects = self.out_of_order = 0
        self.latencies: list = []
        self.live = asyncio.Event()
        self.closing = False

    async def run(self) -> None:
        from websockets.asyncio.client import connect
        from websockets.exceptions import WebSocketException

        while not self.closing:
            try:
                async with connect(self.url, compression=None, max_queue=None,
                                   additional_headers={"Authorization": f"Bearer {self.token}"},
                                   open_timeout=10) as socket:
                    for group_id in self.groups:
                        await socket.send(json.dumps({"op": "SUBSCRIBE", "groupId": group_id,
                                                      "afterSequence": self.last[group_id]}))
                    async for text in socket:
                        self.take(json.loads(text))
                        if self.closing:
                            return
            except (TimeoutError, OSError, WebSocketException):
                pass
            if not self.closing:
                self.reconnects += 1
                await asyncio.sleep(RECONNECT_SECONDS)

    def take(self, frame: dict) -> None:
        if frame.get("op") != "EVENT":
            return
        event, received = frame["event"], time.time()
        group_id, sequence = event["groupId"], event["sequence"]
        self.frames += 1
        if sequence in self.seen[group_id]:
            self.duplicates += 1
            return
        if sequence != self.last[group_id] + 1:
            self.out_of_order += 1
        self.seen[group_id].add(sequence)
        while self.last[group_id] + 1 in self.seen[group_id]:
            self.last[group_id] += 1
        if self.live.is_set():
            occurred = datetime.fromisoformat(event["occurredAt"].replace("Z", "+00:00"))
            self.latencies.append(received - occurred.timestamp())
        elif all(self.first[g] in self.seen[g] for g in self.groups):
            self.live.set()

    def complete(self, heads: dict) -> bool:
        return all(self.last[g] >= heads.get(g, 0) for g in self.groups)

    def report(self, heads: dict) -> dict:
        missing = {g: sorted(set(range(self.first[g], heads.get(g, 0) + 1)) - self.seen[g])
                   for g in self.groups}
        return {"url": self.url, "groups": len(self.groups), "frames": self.frames,
                "duplicates": self.duplicates, "reconnects": self.reconnects,
                "outOfOrder": self.out_of_order,
                "missing": {g: m for g, m in missing.items() if m}}


async def _run(pipe, sockets, token, after) -> dict:
    subscribers = [Subscriber(url, groups, token, after) for url, groups in sockets]
    tasks = [asyncio.create_task(s.run()) for s in subscribers]
    await asyncio.wait_for(asyncio.gather(*(s.live.wait() for s in subscribers)), 60)
    pipe.send("ready")
    order = await asyncio.to_thread(pipe.recv)
    heads, deadline = order["heads"], time.monotonic() + order["seconds"]
    while not all(s.complete(heads) for s in subscribers) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    for s in subscribers:
        s.closing = True
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {"sockets": [s.report(heads) for s in subscribers],
            "latencies": [x for s in subscribers for x in s.latencies]}


class Subscribers:
    """The parent's handle: `Subscribers(sockets, token, after)` returns once they are
    all live; `finish(heads, seconds)` returns their report (see the module docstring)."""

    def __init__(self, sockets: list, token: str, after: dict):
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self.pipe, child = context.Pipe()
        self.process = context.Process(target=run, args=(child, sockets, token, after),
                                       daemon=True)
        self.process.start()
        ready = self.pipe.recv() if self.pipe.poll(120) else ("error", "not live in 120 s")
        if ready != "ready":
            self.close()
            raise RuntimeError(f"the subscribers failed: {ready}")

    def finish(self, heads: dict, seconds: float) -> dict:
        try:
            self.pipe.send({"heads": heads, "seconds": seconds})
            result = self.pipe.recv() if self.pipe.poll(seconds + 60) else ("error", "silent")
            if isinstance(result, tuple):
                raise RuntimeError(f"the subscribers failed: {result}")
            return result
        finally:
            self.close()

    def close(self) -> None:
        self.process.join(timeout=10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
