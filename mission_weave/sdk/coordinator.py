"""A tiny demo coordinator, so that the demo Mission moves on its own:

    python -m mission_weave.sdk.coordinator --key .mw/agents/coordinator.json --group grp_demo

It follows the Group (inbox.py, queues.py) and, after every batch of events:
- offers (`candidates: "auto"`, sequential) each `open` WorkItem whose dependencies are
  met, and re-offers an `offered` one whose offers all lapsed or were declined;
- follows the server's review of each `submitted` WorkItem (§13.2): records reviewer
  Evidence (`evidence.record`) for the criteria no deterministic check decides, saying
  whether the submission's Evidence covers them, then accepts (`work.accept_result`)
  what the evaluation passed and fails (`work.fail`) what it failed.
It judges coverage, not content: a real reviewer Agent or a human would.
"""

import argparse
import asyncio
import logging
import uuid
from datetime import timedelta
from pathlib import Path

from mission_weave.protocol.timefmt import format_time

from .client import ApiError, Client, utcnow
from .inbox import CursorStore, Inbox
from .keys import AgentKey
from .queues import GroupWork, Item
from .ticks import stop_on_signals, tick_until_stopped

log = logging.getLogger("mission_weave.sdk.coordinator")

OFFER_SECONDS = 600


class Coordinator:
    def __init__(self, client: Client, group_id: str, cursor_path: str | Path, *,
                 transport: str = "auto", tick_seconds: float = 2.0):
        self.client, self.group_id = client, group_id
        self.cursor_path, self.transport, self.tick_seconds = cursor_path, transport, tick_seconds
        self.work = GroupWork(group_id)
        self.tried: dict = {}  # item id -> the sequence at which it was last acted on
        self.waiting: dict = {}  # item id -> the last sequence our command on it appended
        self.wake = asyncio.Event()

    async def run(self, stop: asyncio.Event | None = None) -> None:
        stop = stop or asyncio.Event()
        await self.client.open_session()

        async def apply(event):
            self.work.apply(event)
            self.wake.set()

        # The view starts from a full replay; the live inbox then keeps it current.
        await Inbox(self.client, [self.group_id], apply, CursorStore(":memory:"),
                    transport="http").catch_up(self.group_id)
        async def restart(group_id):  # the stored Cursor was from a reset server's log
            self.work = GroupWork(group_id)
            self.tried.clear()
            self.waiting.clear()

        inbox = Inbox(self.client, [self.group_id], apply, CursorStore(self.cursor_path),
                      on_restart=restart, transport=self.transport)
        task = asyncio.create_task(inbox.run(stop))
        try:
            await tick_until_stopped(self.tick, self.wake, stop, self.tick_seconds, [task])
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def tick(self) -> None:
        now = utcnow()
        for item in list(self.work.items.values()):
            if self.tried.get(item.id) == self.work.applied \
                    or self.waiting.get(item.id, 0) > self.work.applied:
                continue  # nothing new since we last acted on it, or our act not seen yet
            lapsed = item.state == "offered" and not any(
                o["status"] in ("live", "accepted") and o["expiresAt"] > now
                for o in item.offers.values())
            if (item.state == "open" or lapsed) and self.work.dependencies_met(item):
                await self._act(item, "work.offer", {
                    "candidates": "auto", "mode": "sequential",
                    "expiresAt": format_time(now + timedelta(seconds=OFFER_SECONDS))})
            elif item.state == "submitted":
                await self._review(item)

    async def _review(self, item: Item) -> None:
        """Follow the server's review pipeline (§13.2): accept what it passed, fail what
        it failed, and give reviewer Evidence for the criteria it leaves to a reviewer."""
        detail = await self.client.work_item(self.group_id, item.id)
        evaluation = (detail.get("review") or {}).get("evaluation")
        if evaluation is None:
            return  # not evaluated yet: the review's own events wake us again
        if evaluation["verdict"] == "pass":
            await self._act(item, "work.accept_result", {"evidence": []})
        elif evaluation["verdict"] == "fail":
            failing = evaluation["failing"] or list(item.criteria)
            await self._act(item, "work.fail", {
                "evidence": [self._evidence(item, failing, f"fail: {failing} did not pass "
                                                           "the review", detail)],
                "reason": f"the review failed {failing}"})
        else:
            awaiting = [c for c in evaluation["criteria"]
                        if c["verdict"] == "pending" and c["decidedBy"] == "reviewer"
                        and not c["reviewerEvidence"]]
            covered = [c["id"] for c in awaiting if c["submittedEvidence"]]
            missing = [c["id"] for c in awaiting if not c["submittedEvidence"]]
            records = []
            if covered:
                records.append(self._evidence(item, covered, "pass: the submission's Evidence "
                                              "covers it (demo coordinator: coverage only, "
                                              "not content)", detail))
            if missing:
                records.append(self._evidence(item, missing, "fail: no Evidence was submitted "
                                              "for it", detail))
            if records:
                await self._act(item, "evidence.record", {"evidence": records})

    def _evidence(self, item: Item, criteria: list, result: str, detail: dict) -> dict:
        return {"id": f"ev-{uuid.uuid4().hex[:16]}", "subject": f"workItem:{item.id}",
                "criteria": criteria, "method": "demo-coordinator: Evidence coverage",
                "result": result, "producer": self.client.principal,
                "timestamp": format_time(utcnow()),
                "artifacts": list((detail.get("submission") or {}).get("artifacts", []))}

    async def _act(self, item: Item, type_: str, body: dict) -> None:
        self.tried[item.id] = self.work.applied
        try:
            answer = await self.client.command(self.group_id, type_, body, workItemId=item.id)
            log.info("%s %s", type_, item.id)
            # Act on this item again only once our own events are in the view.
            self.waiting[item.id] = max((e["sequence"] for e in answer["events"]), default=0)
        except ApiError as error:  # e.g. no eligible worker yet: try again on news
            log.info("%s %s refused: %s %s", type_, item.id, error.code, error.message)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m mission_weave.sdk.coordinator")
    parser.add_argument("--key", required=True)
    parser.add_argument("--group")
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--cursors")
    parser.add_argument("--transport", choices=("auto", "ws", "http"), default="auto")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    key = AgentKey.load(args.key)
    cursors = args.cursors or str(Path(args.key).with_suffix("")) + ".cursors.sqlite3"
    asyncio.run(_serve(args.url, key, args.group or key.group_id, cursors, args.transport))


async def _serve(url, key, group_id, cursors, transport) -> None:
    stop = stop_on_signals()
    async with Client(url, key) as client:
        await Coordinator(client, group_id, cursors, transport=transport).run(stop)


if __name__ == "__main__":
    main()
