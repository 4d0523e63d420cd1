"""The projected state of a Group's work, as plain frozen data: the WorkItem and Mission
states, the records a decision reads and `evolve` (evolve.py) produces, and `replace`,
which makes a changed copy of one. How the state is written as JSON documents, for the
projection rows and snapshots, is in state_documents.py.
No Django here, no clock."""

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from .json_types import JsonObject

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

# WorkItem states (§10.2). `proposal` is the "open Work Proposal" row, kept in its own table.
OPEN, OFFERED, QUEUED, ACTIVE, BLOCKED = "open", "offered", "queued", "active", "blocked"
SUBMITTED, VERIFIED, FAILED, CANCELLED = "submitted", "verified", "failed", "cancelled"
TERMINAL = frozenset({VERIFIED, CANCELLED})
UNFINISHED = frozenset({OPEN, OFFERED, QUEUED, ACTIVE, BLOCKED, SUBMITTED})

USAGE_RECORDED = "ext.missionweaveprotocol.core.resource_usage_recorded"

MISSION_ACTIVE, MISSION_APPROVED, MISSION_FAILED, MISSION_CANCELLED = (
    "active", "approved", "failed", "cancelled")


@dataclass(frozen=True)
class Offer:
    agent_id: str
    expires_at: datetime
    rank: int
    selection_basis: JsonObject
    status: str = "live"  # live | accepted | declined | withdrawn
    decline: JsonObject | None = None

    def is_live(self, now: datetime) -> bool:
        return self.status == "live" and now < self.expires_at


@dataclass(frozen=True)
class Lease:
    id: str
    agent_id: str
    session_epoch: int
    ownership_epoch: int
    started_at: datetime
    expires_at: datetime
    renewals: tuple[tuple[datetime, datetime], ...] = ()  # ((renewed_at, expires_at), ...)
    closed_at: datetime | None = None
    close_reason: str | None = None  # released | expired | revoked
    # §11.5: revoked because its Agent reconnected (a new session): what was buffered
    # offline before that may still be reconciled against it.
    revoked_by_reconnection: bool = False
    reconciled_through: datetime | None = None  # the latest bufferedAt reconciled under it

    @property
    def is_open(self) -> bool:
        return self.closed_at is None


@dataclass(frozen=True)
class WorkItem:
    id: str
    mission_id: str
    contract: JsonObject
    state: str = OPEN
    revision: int = 1
    contract_revision: int = 1
    proposal_id: str | None = None
    depends_on: tuple[str, ...] = ()
    dependency_policy: str = "all_verified"
    ownership_epoch: int = 0
    owner: str | None = None  # agent id of the live or last owner; None once fenced
    start_by: datetime | None = None
    accepted_revision: int | None = None
    execution_approved: bool = False
    offer_mode: str | None = None
    offers: tuple[Offer, ...] = ()  # of the latest work.offer
    offer_queue: tuple[str, ...] = ()  # agent ids still to be offered in turn (sequential mode)
    start_within_seconds: int | None = None  # the latest offer's start window, if it set one
    lease: Lease | None = None  # the current or most recent Execution Lease
    lease_count: int = 0
    attempts: int = 0
    blocked_until: datetime | None = None
    required_resolution: str | None = None
    child_mission_id: str | None = None
    child_failure_policy: str | None = None
    last_owner: str | None = None  # who held it last (reliability history, audit)
    retry_at: datetime | None = None  # a failed attempt may be offered again from then (§11.4)
    retry_exhausted: str | None = None  # why no retry may follow the last failure (§11.4)
    # Capability tokens of the current lease (§11.3): {id, leaseId, scopes, expiresAt, revoked}.
    capability_tokens: tuple[JsonObject, ...] = ()
    last_checkpoint: JsonObject | None = None
    submission: JsonObject | None = None
    # The review of the current submission (§13.2; mission_weave/core/evidence_review.py):
    # its steps' outcomes, reviewer Evidence and latest evaluation. Kept after the item leaves
    # `submitted`, for the final Approval; a new submission starts a new one.
    review: JsonObject | None = None
    open_ambiguities: tuple[str, ...] = ()
    usage: JsonObject = field(default_factory=dict)  # six-dimension totals charged here (§11.5)
    schedule_disclosure: JsonObject | None = None  # the owner's latest §11.2 disclosure
    # The MissionOwner's refusal to let this contract revision run: {by, reason,
    # contractRevision, at}; a grant or a revised contract clears it.
    execution_refusal: JsonObject | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None

    @property
    def live_lease(self) -> Lease | None:
        return self.lease if self.lease is not None and self.lease.is_open else None

    def live_offers(self, now: datetime) -> tuple[Offer, ...]:
        return tuple(offer for offer in self.offers if offer.is_live(now))

    @property
    def criteria_ids(self) -> tuple[str, ...]:
        return tuple(c["id"] for c in self.contract["acceptanceCriteria"])


@dataclass(frozen=True)
class Mission:
    id: str
    title: str
    owner_id: str
    coordinator_id: str
    state: str = MISSION_ACTIVE
    delegates: tuple[str, ...] = ()  # principals who may act as its Coordinator (§10.2)
    revision: int = 1
    budgets: JsonObject = field(default_factory=dict)
    parent_work_item_id: str | None = None
    parent_mission_id: str | None = None
    child_failure_policy: str | None = None
    auto_dispatch: bool = False  # a decline or expired offer moves to the next candidate
    work_items: tuple[str, ...] = ()
    usage: JsonObject = field(default_factory=dict)  # six-dimension totals of its WorkItems (§11.5)
    # The MissionOwner's latest refusal of the final Approval: {by, reason, workItems, at},
    # waiting on the Coordinator until new or revised work answers it.
    approval_refusal: JsonObject | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None


@dataclass(frozen=True)
class Proposal:
    id: str
    mission_id: str
    contract: JsonObject
    proposer: str
    status: str = "open"  # open | authorized
    work_item_id: str | None = None
    created_at: datetime | None = None


@dataclass(frozen=True)
class Event:
    """An event as `evolve` sees it: what it says, about what, and when."""

    type: str
    data: JsonObject
    occurred_at: datetime
    mission_id: str | None = None
    work_item_id: str | None = None

    # For the mutators of the event types that are about a Mission or a WorkItem (their
    # decisions always say which): the id, known to be there.
    @property
    def known_mission_id(self) -> str:
        assert self.mission_id is not None, f"{self.type} names no Mission"
        return self.mission_id

    @property
    def known_item_id(self) -> str:
        assert self.work_item_id is not None, f"{self.type} names no WorkItem"
        return self.work_item_id


@dataclass
class View:
    """The part of a Group's state a command needs (or, on replay, all of it)."""

    missions: dict[str, Mission] = field(default_factory=dict)
    items: dict[str, WorkItem] = field(default_factory=dict)
    proposals: dict[str, Proposal] = field(default_factory=dict)
    # §13: the Group's artifacts and Context Package versions (mission_weave/core/records.py)
    artifacts: dict[str, JsonObject] = field(default_factory=dict)  # by content hash
    packages: dict[tuple[str, str], JsonObject] = field(default_factory=dict)  # (id, version)

    def copy(self) -> "View":
        return View(dict(self.missions), dict(self.items), dict(self.proposals),
                    dict(self.artifacts), dict(self.packages))


_Record = TypeVar("_Record", bound="DataclassInstance")


def replace(obj: _Record, **changes: Any) -> _Record:
    """dataclasses.replace for the frozen, plain dataclasses here (no __post_init__, no
    InitVar, no slots), without its walk through every field and __init__: a WorkItem
    has some forty, and evolve replaces a few per event on every append."""
    if not changes.keys() <= obj.__dataclass_fields__.keys():
        raise TypeError(f"{type(obj).__name__} has no field {set(changes) - set(vars(obj))}")
    new = object.__new__(type(obj))
    vars(new).update(vars(obj), **changes)
    return new
