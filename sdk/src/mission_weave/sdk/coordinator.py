"""A tiny demo coordinator, so that the demo Mission moves on its own:

    python -m mission_weave.sdk.coordinator --key .mw/agents/coordinator.json --group grp_demo

It follows the Group (inbox.py, queues.py) and, after every batch of events:
- offers (`candidates: "auto"`, sequential) each `open` WorkItem whose dependencies are
  met, and re-offers an `offered` one whose offers all lapsed or were declined;
- follows the server's review of each `submitted` WorkItem (§13.2): records reviewer
  Evidence (`evidence.record`) for the criteria no deterministic check decides, saying
  whether the submission's Evidence covers them, then accepts (`work.accept_result`, with
  its own Evidence of how it decided) what the evaluation passed and fails (`work.fail`)
  what it failed. Reviewer Evidence is recorded once per submission: the review's
  evaluation is re-appended only after the Evidence arrives, so until then it still
  shows none, and the coordinator goes by the review's own `reviewerEvidence` and by
  what it recorded itself.
It judges coverage, not content: a real reviewer Agent or a human would.

It acts only on the Missions it coordinates (§10.2, PROTOCOL §2 "who"): a Mission whose
`coordinatorId` is this agent, or whose `delegates` name it, as `mission.created` says; a
child Mission (`mission.child_created`) has its parent's coordinator and delegates. Other
coordinators' Missions in the same Group are left alone (`Missions.coordinated_by`).
"""

import argparse
import asyncio
import logging
import uuid
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

from mission_weave.protocol.json_types import JsonObject
from mission_weave.protocol.timefmt import format_time

from .client import ApiError, Client, utcnow
from .inbox import CursorStore, Inbox
from .keys import AgentKey
from .queues import GroupWork, Item
from .ticks import stop_on_signals, tick_until_stopped

log = logging.getLogger("mission_weave.sdk.coordinator")

OFFER_SECONDS = 600


class Missions:
    """Who coordinates each Mission of the Group, folded from its events (and a
    snapshot's Mission documents). Pure."""

    def __init__(self) -> None:
        self.applied = 0
        # mission id -> (coordinatorId, *delegates); the coordinator may be unknown (None)
        self.coordinators: dict[str, tuple[str | None, ...]] = {}

    def apply(self, event: JsonObject) -> None:
        if event["sequence"] <= self.applied:
            return
        self.applied = event["sequence"]
        data = event.get("data") or {}
        if event["type"] == "mission.created":
            self._add(data.get("missionId") or event.get("missionId"),
                      data.get("coordinatorId"), data.get("delegates"))
        elif event["type"] == "mission.child_created":
            # The child has its parent's coordinator and delegates; the event says so (a
            # server that did not write them into the event: the parent's, as folded).
            parent = self.coordinators.get(event.get("missionId") or "", (None,))
            coordinator = data.get("coordinatorId") or parent[0]
            delegates = data["delegates"] if "delegates" in data else list(parent[1:])
            self._add(data.get("childMissionId"), coordinator, delegates)

    def _add(self, mission_id: str | None, coordinator: str | None,
             delegates: Sequence[str | None] | None) -> None:
        if mission_id:
            self.coordinators[mission_id] = (coordinator, *(d for d in delegates or ()
                                                            if d != coordinator))

    def load_snapshot(self, sequence: int, missions: list[JsonObject]) -> None:
        """From a snapshot's Mission documents (snake_case projections)."""
        self.coordinators = {}
        for doc in missions:
            self._add(doc["id"], doc.get("coordinator_id"), doc.get("delegates"))
        self.applied = sequence

    def coordinated_by(self, mission_id: str | None, principal: str) -> bool:
        """Whether `principal` is the Mission's coordinator or one of its delegates (an
        unknown Mission: no)."""
        return principal in self.coordinators.get(mission_id or "", ())


class Coordinator:
    def __init__(self, client: Client, group_id: str, cursor_path: str | Path, *,
                 transport: str = "auto", tick_seconds: float = 2.0):
        self.client, self.group_id = client, group_id
        self.cursor_path, self.transport, self.tick_seconds = cursor_path, transport, tick_seconds
        self.work = GroupWork(group_id)
        self.missions = Missions()
        self.tried: dict[str, int] = {}  # item id -> the sequence at which it was last acted on
        self.waiting: dict[str, int] = {}  # item id -> the last sequence our command on it appended
        # item id -> the submissionRevision we gave Evidence for
        self.reviewed: dict[str, int | None] = {}
        self.wake = asyncio.Event()

    def apply(self, event: JsonObject) -> None:
        """Fold one event of the Group into the view."""
        self.work.apply(event)
        self.missions.apply(event)

    def coordinates(self, item: Item) -> bool:
        """Whether this agent may act as the Coordinator of the item's Mission."""
        return self.missions.coordinated_by(item.mission_id, self.client.principal)

    async def run(self, stop: asyncio.Event | None = None) -> None:
        stop = stop or asyncio.Event()
        await self.client.open_session()

        async def apply(event: JsonObject) -> None:
            self.apply(event)
            self.wake.set()

        # A snapshot: the log below it is archived.
        async def snapshot(group_id: str, document: JsonObject) -> None:
            if document["sequence"] > self.work.applied:
                self.work.load_snapshot(document["sequence"],
                                        document["state"].get("workItems", []))
                self.missions.load_snapshot(document["sequence"],
                                            document["state"].get("missions", []))

        # The view starts from a full replay; the live inbox then keeps it current.
        await Inbox(self.client, [self.group_id], apply, CursorStore(":memory:"), snapshot,
                    transport="http").catch_up(self.group_id)
        async def restart(group_id: str) -> None:  # the stored Cursor was from a reset server's log
            self.work = GroupWork(group_id)
            self.missions = Missions()
            self.tried.clear()
            self.waiting.clear()
            self.reviewed.clear()

        inbox = Inbox(self.client, [self.group_id], apply, CursorStore(self.cursor_path),
                      snapshot, on_restart=restart, transport=self.transport)
        task = asyncio.create_task(inbox.run(stop))
        try:
            await tick_until_stopped(self.tick, self.wake, stop, self.tick_seconds, [task])
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def tick(self) -> None:
        now = utcnow()
        for item in list(self.work.items.values()):
            if not self.coordinates(item):
                continue  # another coordinator's Mission
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
            # The acceptance carries our own record of how we decided (§13.2).
            await self._act(item, "work.accept_result", {"evidence": [self._evidence(
                item, list(item.criteria), "pass: the server's review passed every criterion "
                "(demo coordinator: accepted on that evaluation)", detail,
                method="demo-coordinator: review evaluation")]})
        elif evaluation["verdict"] == "fail":
            failing = evaluation["failing"] or list(item.criteria)
            await self._act(item, "work.fail", {
                "evidence": [self._evidence(item, failing, f"fail: {failing} did not pass "
                                                           "the review", detail)],
                "reason": f"the review failed {failing}"})
        else:
            await self._record_evidence(item, detail, evaluation)

    async def _record_evidence(self, item: Item, detail: JsonObject,
                               evaluation: JsonObject) -> None:
        """Reviewer Evidence for the criteria left to a reviewer, once per submission.
        The evaluation is appended again only after our Evidence arrives, so until then
        it still lists none: what counts is the review's own `reviewerEvidence` (every
        record so far) and what we recorded for this submission ourselves."""
        review = detail.get("review") or {}
        submission = review.get("submissionRevision")
        if submission is not None and self.reviewed.get(item.id) == submission:
            return  # already given for this submission; the evaluation will follow
        cited = {c for record in review.get("reviewerEvidence", [])
                 for c in record.get("criteria", [])}
        awaiting = [c for c in evaluation["criteria"]
                    if c["verdict"] == "pending" and c["decidedBy"] == "reviewer"
                    and not c["reviewerEvidence"] and c["id"] not in cited]
        covered = [c["id"] for c in awaiting if c["submittedEvidence"]]
        missing = [c["id"] for c in awaiting if not c["submittedEvidence"]]
        records: list[JsonObject] = []
        if covered:
            records.append(self._evidence(item, covered, "pass: the submission's Evidence "
                                          "covers it (demo coordinator: coverage only, "
                                          "not content)", detail))
        if missing:
            records.append(self._evidence(item, missing, "fail: no Evidence was submitted "
                                          "for it", detail))
        if records and await self._act(item, "evidence.record", {"evidence": records}):
            self.reviewed[item.id] = submission

    def _evidence(self, item: Item, criteria: list[str], result: str, detail: JsonObject,
                  method: str = "demo-coordinator: Evidence coverage") -> JsonObject:
        return {"id": f"ev-{uuid.uuid4().hex[:16]}", "subject": f"workItem:{item.id}",
                "criteria": criteria, "method": method,
                "result": result, "producer": self.client.principal,
                "timestamp": format_time(utcnow()),
                "artifacts": list((detail.get("submission") or {}).get("artifacts", []))}

    async def _act(self, item: Item, type_: str, body: JsonObject) -> bool:
        self.tried[item.id] = self.work.applied
        try:
            answer = await self.client.command(self.group_id, type_, body, workItemId=item.id)
        except ApiError as error:  # e.g. no eligible worker yet: try again on news
            log.info("%s %s refused: %s %s", type_, item.id, error.code, error.message)
            return False
        log.info("%s %s", type_, item.id)
        # Act on this item again only once our own events are in the view.
        self.waiting[item.id] = max((e["sequence"] for e in answer["events"]), default=0)
        return True


def main(argv: Sequence[str] | None = None) -> None:
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
    group_id = args.group or key.group_id
    if not group_id:
        parser.error(f"no Group to coordinate: pass --group (the key file {args.key} names none)")
    asyncio.run(_serve(args.url, key, group_id, cursors, args.transport))


async def _serve(url: str, key: AgentKey, group_id: str, cursors: str, transport: str) -> None:
    stop = stop_on_signals()
    async with Client(url, key) as client:
        await Coordinator(client, group_id, cursors, transport=transport).run(stop)


if __name__ == "__main__":
    main()
