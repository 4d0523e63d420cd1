"""Plain-data builders for the pure core: Missions, WorkItems in any §10.2 state, Views,
Commands and Contexts. No Django, no clock: every time is derived from the fixed `T0`.

A WorkItem built here is consistent for its state: a `queued` item has a live owner with a
start-by deadline, an `active` one an open Execution Lease held by `WORKER` under
`SESSION_EPOCH`, an `offered` one a live offer addressed to `WORKER`, and so on, so that a
command's own preconditions hold and only the §10.2 table decides.
"""

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from mission_weave.core import state
from mission_weave.core.commands import Candidate, Command, Context
from mission_weave.core.evolve import evolve
from mission_weave.core.state import Event, Lease, Mission, Offer, View, WorkItem
from mission_weave.protocol.timefmt import format_time
from tests.samples import contract  # re-exported for the tests

T0 = datetime(2026, 11, 29, 8, 0, 0, tzinfo=UTC)

WORKER = "w1"  # the agent that holds offers, ownership and leases in built items
WORKER_2, WORKER_3 = "w2", "w3"
AGENT = f"agent:{WORKER}"
HUMAN = "user:alice"
COORDINATOR = "agent:coord"
ALL_ROLES = frozenset({"coordinator", "worker", "reviewer", "owner", "observer"})

MISSION_ID = "msn_1"
ITEM_ID = "wi_1"
LEASE_ID = "lease_1"
SESSION_EPOCH = 3
OWNERSHIP_EPOCH = 1


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def iso(seconds: int) -> str:
    return format_time(at(seconds))


def evidence(criteria, record_id: str = "ev-1", producer: str = AGENT, **overrides) -> dict:
    record = {"id": record_id, "subject": "deliverable:summary", "criteria": list(criteria),
              "method": "self-check", "result": "pass", "producer": producer,
              "timestamp": iso(0), "artifacts": []}
    record.update(overrides)
    return record


def progress(phase: str = "drafting") -> dict:
    return {"phase": phase, "milestones": ["outline"], "nextCheckpoint": "draft",
            "blockers": [], "evidenceRefs": []}


def mission(mission_id: str = MISSION_ID, **overrides) -> Mission:
    values = dict(id=mission_id, title="Quarterly report", owner_id=HUMAN,
                  coordinator_id=COORDINATOR, created_at=T0, updated_at=T0)
    values.update(overrides)
    return Mission(**values)


def offer(agent_id: str = WORKER, expires_in: int = 3600, rank: int = 1,
          status: str = "live") -> Offer:
    return Offer(agent_id=agent_id, expires_at=at(expires_in), rank=rank,
                 selection_basis={"policyRules": ["explicit-candidates"]}, status=status)


def lease(expires_in: int = 300, closed: str | None = None, lease_id: str = LEASE_ID,
          agent_id: str = WORKER, session_epoch: int = SESSION_EPOCH,
          ownership_epoch: int = OWNERSHIP_EPOCH) -> Lease:
    """An Execution Lease started 60 s before T0; `closed` is a close reason or None."""
    return Lease(id=lease_id, agent_id=agent_id, session_epoch=session_epoch,
                 ownership_epoch=ownership_epoch, started_at=at(-60),
                 expires_at=at(expires_in), closed_at=at(-1) if closed else None,
                 close_reason=closed)


def work_item(item_state: str, *, owner_live: bool = True, contract_revision: int = 1,
              accepted_revision: int = 1, requires_approval: bool = False,
              item_id: str = ITEM_ID, mission_id: str = MISSION_ID, **overrides) -> WorkItem:
    """A WorkItem in `item_state` as the log would have left it, seen at T0.

    `owner_live=False` makes the owner of a queued/active/blocked item expired at T0 (start-by
    missed, lease run out, blocked lease run out) without any sweeper event having fenced it.
    `contract_revision` above `accepted_revision` means the contract was revised after the
    owner accepted it.
    """
    expiry = 600 if owner_live else -1
    the_contract = contract(revision=contract_revision,
                            risk={"class": "high" if requires_approval else "low",
                                  "requiresExecutionApproval": requires_approval})
    values = dict(id=item_id, mission_id=mission_id, contract=the_contract, state=item_state,
                  revision=5, contract_revision=contract_revision, created_at=at(-3600),
                  updated_at=at(-60))
    values.update(_STATE_FIELDS[item_state](expiry, accepted_revision))
    values.update(overrides)
    return WorkItem(**values)


def _owned(accepted_revision: int, **fields) -> dict:
    return dict(owner=WORKER, ownership_epoch=OWNERSHIP_EPOCH,
                accepted_revision=accepted_revision, offer_mode="sequential",
                offers=(offer(status="accepted"),), **fields)


_STATE_FIELDS = {
    state.OPEN: lambda expiry, accepted: {},
    state.OFFERED: lambda expiry, accepted: dict(offer_mode="sequential", offers=(offer(),)),
    state.QUEUED: lambda expiry, accepted: _owned(accepted, start_by=at(expiry)),
    state.ACTIVE: lambda expiry, accepted: _owned(accepted, lease=lease(expires_in=expiry),
                                                  lease_count=1, attempts=1),
    state.BLOCKED: lambda expiry, accepted: _owned(
        accepted, lease=lease(closed="released"), lease_count=1, attempts=1,
        blocked_until=at(expiry), required_resolution="needs the Q3 figures"),
    state.SUBMITTED: lambda expiry, accepted: _owned(
        accepted, lease=lease(closed="released"), lease_count=1, attempts=1,
        submission={"contractRevision": accepted, "artifacts": [],
                    "evidence": [evidence(["ac1", "ac2"])], "at": iso(-1)}),
    state.VERIFIED: lambda expiry, accepted: _owned(
        accepted, lease=lease(closed="released"), lease_count=1, attempts=1),
    state.FAILED: lambda expiry, accepted: dict(
        ownership_epoch=OWNERSHIP_EPOCH, lease=lease(closed="revoked"), lease_count=1,
        attempts=1),
    state.CANCELLED: lambda expiry, accepted: dict(ownership_epoch=OWNERSHIP_EPOCH),
}
ITEM_STATES = tuple(_STATE_FIELDS)


DELIVERABLE = "sha256:" + "d" * 64  # the artifact a built item's submission delivers


def with_deliverable(view: View, item_id: str = ITEM_ID) -> View:
    """`view` with DELIVERABLE published for the item (§13.1: a submission cites
    artifacts published in this Group for this WorkItem)."""
    item = view.items[item_id]
    view.artifacts[DELIVERABLE] = {
        "hash": DELIVERABLE, "origin": "published", "by": AGENT, "at": iso(0),
        "manifest": {"hash": DELIVERABLE, "mediaType": "text/markdown", "schema": None,
                     "workItemId": item.id, "missionId": item.mission_id, "producer": WORKER}}
    return view


def view_of(*items: WorkItem, missions=()) -> View:
    """A View holding `items` and their Mission (built unless given in `missions`)."""
    view = View()
    for given in missions:
        view.missions[given.id] = given
    for item in items:
        view.items[item.id] = item
        owner = view.missions.get(item.mission_id) or mission(item.mission_id)
        view.missions[owner.id] = replace(owner, work_items=(*owner.work_items, item.id))
    return view


def command(command_type: str, body: dict, item: WorkItem | None = None, *,
            actor: str = AGENT, roles=ALL_ROLES, command_id: str = "cmd-1",
            **fields) -> Command:
    """A Command against `item` carrying the item's current epoch, lease id and the
    lease's session epoch, unless `fields` says otherwise."""
    values = dict(id=command_id, type=command_type, actor=actor, body=body,
                  roles=frozenset(roles), session_epoch=SESSION_EPOCH)
    if item is not None:
        values.update(work_item_id=item.id, ownership_epoch=item.ownership_epoch,
                      lease_id=item.lease.id if item.lease else None)
    values.update(fields)
    return Command(**values)


def candidate(agent_id: str, roles=frozenset({"worker"})) -> Candidate:
    return Candidate(agent_id=agent_id, roles=frozenset(roles),
                     card={"version": "1", "capabilities": [{"id": "summarize", "version": "1"}],
                           "maxConcurrency": 2})


CANDIDATES = {name: candidate(name) for name in (WORKER, WORKER_2, WORKER_3)}


def context(now: datetime = T0, **fields) -> Context:
    return Context(now=now, candidates=fields.pop("candidates", CANDIDATES), **fields)


def apply(view: View, drafts, now: datetime = T0) -> View:
    """Evolve a copy of `view` by the drafts, as the append pipeline would."""
    result = view.copy()
    for draft in drafts:
        evolve(result, Event(draft.type, draft.data, now, draft.mission_id,
                             draft.work_item_id))
    return result
