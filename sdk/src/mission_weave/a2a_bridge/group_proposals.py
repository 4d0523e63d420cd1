"""The fate of the bridge's Work Proposals, folded from the Group's events (PROTOCOL §3).

A proposal is followed from just before it is sent (`follow`) until its A2A task ends
(`forget`). Each event that decides something about it becomes one `Outcome` in that
proposal's queue, in log order:

- `work.authorized` naming the proposal          -> authorized, with the WorkItem's id;
- `work.verified` of that WorkItem               -> verified, with the artifacts of its
                                                    latest `work.submitted`;
- `work.failed` / `work.cancelled` of it         -> failed / cancelled, with the reason;
- `mission.failed` / `mission.cancelled` of the  -> failed / cancelled, for a proposal
  configured Mission                                the Coordinator had not authorized
                                                    (an authorized one gets its WorkItem's
                                                    own event).

Nothing else of the Group reaches a proposal: the bridge follows one Group and one Mission.
Each state is told once per proposal, however often the log is read again. When the log
below the cursor was archived (CURSOR_TOO_OLD), the signed snapshot the inbox resumes from
tells the same from the projected state (`load_snapshot`).
"""

import asyncio
from dataclasses import dataclass, field

from mission_weave.protocol.json_types import JsonObject

AUTHORIZED, VERIFIED, FAILED, CANCELLED = "authorized", "verified", "failed", "cancelled"
ENDED = frozenset({VERIFIED, FAILED, CANCELLED})


@dataclass(frozen=True)
class Outcome:
    state: str  # one of AUTHORIZED, VERIFIED, FAILED, CANCELLED
    work_item_id: str | None = None
    reason: str = ""
    artifacts: tuple[str, ...] = ()  # sha256 names of the verified submission's artifacts
    event: JsonObject = field(default_factory=dict, compare=False)


class Proposals:
    def __init__(self, mission_id: str):
        self.mission_id = mission_id
        self.outcomes: dict[str, asyncio.Queue[Outcome]] = {}  # proposal id -> its news
        self.told: dict[str, set[str]] = {}  # proposal id -> the states told
        self.proposal_of: dict[str, str] = {}  # WorkItem id -> the proposal it came from
        self.submitted: dict[str, tuple[str, ...]] = {}  # WorkItem id -> latest artifacts

    def follow(self, proposal_id: str, authorized: bool = False) -> asyncio.Queue[Outcome]:
        """Start following a proposal; call before proposing, so no event is missed.
        `authorized`: its authorization was told already (before a restart)."""
        self.told[proposal_id] = {AUTHORIZED} if authorized else set()
        return self.outcomes.setdefault(proposal_id, asyncio.Queue())

    def forget(self, proposal_id: str) -> None:
        self.outcomes.pop(proposal_id, None)
        self.told.pop(proposal_id, None)
        for item_id in [i for i, p in self.proposal_of.items() if p == proposal_id]:
            del self.proposal_of[item_id]
            self.submitted.pop(item_id, None)

    async def apply(self, event: JsonObject) -> None:
        """Fold one event of the Group (the inbox's handler)."""
        kind, data = event["type"], event.get("data") or {}
        item_id = event.get("workItemId")
        if kind == "work.authorized" and data.get("proposalId") in self.outcomes:
            self.proposal_of[data["workItemId"]] = data["proposalId"]
            self._tell(data["proposalId"], Outcome(AUTHORIZED, data["workItemId"], event=event))
        elif item_id not in self.proposal_of:
            if kind in ("mission.failed", "mission.cancelled") \
                    and event.get("missionId") == self.mission_id:
                self._end_unauthorized(kind, data, event)
        elif kind == "work.submitted":
            self.submitted[item_id] = tuple(data.get("artifacts") or ())
        elif kind == "work.verified":
            self._tell(self.proposal_of[item_id], Outcome(
                VERIFIED, item_id, artifacts=self.submitted.get(item_id, ()), event=event))
        elif kind in ("work.failed", "work.cancelled"):
            state = FAILED if kind == "work.failed" else CANCELLED
            self._tell(self.proposal_of[item_id],
                       Outcome(state, item_id, reason_of(data), event=event))

    def _end_unauthorized(self, kind: str, data: JsonObject, event: JsonObject) -> None:
        authorized = set(self.proposal_of.values())
        state = FAILED if kind == "mission.failed" else CANCELLED
        for proposal_id in [p for p in self.outcomes if p not in authorized]:
            self._tell(proposal_id, Outcome(
                state, reason=f"Mission {self.mission_id} {state}: {reason_of(data)}",
                event=event))

    async def load_snapshot(self, group_id: str, document: JsonObject) -> None:
        """What a snapshot's state (snake_case projections) says of each proposal followed:
        the WorkItem it became and that item's state, or the end of the Mission."""
        state = document["state"]
        items = {doc["proposal_id"]: doc for doc in state.get("workItems", [])
                 if doc.get("proposal_id") in self.outcomes}
        mission: JsonObject = next((doc for doc in state.get("missions", [])
                        if doc["id"] == self.mission_id), {})
        archived = "(the events are archived; known from the Group's snapshot)"
        for proposal_id in list(self.outcomes):
            item = items.get(proposal_id)
            if item is None:
                if mission.get("state") in (FAILED, CANCELLED):
                    self._tell(proposal_id, Outcome(
                        mission["state"], reason=f"Mission {self.mission_id} "
                        f"{mission['state']} {archived}"))
                continue
            item_id = item["id"]
            self.proposal_of[item_id] = proposal_id
            self.submitted[item_id] = tuple((item.get("submission") or {}).get("artifacts")
                                            or ())
            self._tell(proposal_id, Outcome(AUTHORIZED, item_id))
            if item["state"] in ENDED:
                self._tell(proposal_id, Outcome(item["state"], item_id, archived,
                                                self.submitted[item_id]))

    def _tell(self, proposal_id: str, outcome: Outcome) -> None:
        told = self.told.setdefault(proposal_id, set())
        if outcome.state not in told and not told & ENDED:
            told.add(outcome.state)
            self.outcomes[proposal_id].put_nowait(outcome)


def reason_of(data: JsonObject) -> str:
    """What an ending event says of why: its `reason`, else its Evidence's results."""
    if data.get("reason"):
        return str(data["reason"])
    results = [str(e.get("result")) for e in data.get("evidence") or () if e.get("result")]
    return "; ".join(results) or "no reason given"
