"""What every decision shares: the command, the context the shell supplies, the
events it returns, and the checks most commands make. Pure."""

import hashlib
from collections.abc import Callable, Container
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from mission_weave.protocol.errors import ProtocolError
from mission_weave.protocol.timefmt import format_time

from .. import dag, fencing, lifecycle, offline_binding
from ..json_types import JsonObject
from ..ranking import Candidate
from ..schemas import check_contract
from ..state import (
    ACTIVE,
    BLOCKED,
    MISSION_ACTIVE,
    QUEUED,
    Lease,
    Mission,
    View,
    WorkItem,
)
from .targets import Target


@dataclass(frozen=True)
class Command:
    id: str
    type: str
    actor: str  # principal: agent:<id> | user:<name> | system
    body: JsonObject
    roles: frozenset[str] = frozenset()
    work_item_id: str | None = None
    expected_revision: int | None = None
    ownership_epoch: int | None = None
    lease_id: str | None = None
    session_epoch: int | None = None
    offline: JsonObject | None = None  # the bounded-offline-execution binding (§11.5), if buffered
    # What it acts on (targets.Target), resolved once by `decide` in the locked view.
    target: Target | None = None

    @property
    def agent_id(self) -> str | None:
        return self.actor[len("agent:"):] if self.actor.startswith("agent:") else None


@dataclass(frozen=True)
class Policy:
    """The settings `decide` depends on, as plain numbers."""

    start_window_seconds: int = 600
    default_lease_seconds: int = 300
    max_lease_seconds: int = 3600
    default_blocked_lease_seconds: int = 3600
    max_blocked_lease_seconds: int = 86400
    max_urgent_candidates: int = 10
    presence_ttl_seconds: int = 120  # an older Presence report counts as unknown
    auto_offer_seconds: int = 600  # how long an offer issued by automatic dispatch lives
    offline_grace_seconds: int = 300  # §11.5: a lease's life extends this long for offline work


@dataclass(frozen=True)
class Context:
    now: datetime
    policy: Policy = Policy()
    candidates: dict[str, Candidate] = field(default_factory=dict)  # by agent id
    # Facts outside the Group's log that a §13 command is checked against (signing
    # keys, blobs, the target Group of a forwarding): apps/artifacts/facts.py.
    facts: JsonObject = field(default_factory=dict)


@dataclass(frozen=True)
class Draft:
    """An event to append: what happened, to which Mission and WorkItem."""

    type: str
    data: JsonObject
    mission_id: str | None = None
    work_item_id: str | None = None
    # Another Group whose log this event goes to (a cross-Group forwarding, §13.3); the
    # pipeline holds that Group's lock too. None: the command's own Group.
    group_id: str | None = None


# A command type's decision: the events to append, or a ProtocolError.
Handler = Callable[[View, Command, Context], list[Draft]]


def derive_id(prefix: str, command_id: str, salt: str = "") -> str:
    """A deterministic id for something a command creates: retries and replays agree."""
    digest = hashlib.sha256(f"{command_id}/{salt}".encode()).hexdigest()[:24]
    return f"{prefix}_{digest}"


def mission_of(view: View, mission_id: str) -> Mission:
    mission = view.missions.get(mission_id)
    if mission is None:
        raise ProtocolError("NOT_FOUND", f"no Mission {mission_id} in this Group")
    return mission


def parent_item(view: View, mission: Mission) -> WorkItem | None:
    """The WorkItem a child Mission was created for, if the view holds it."""
    parent_id = mission.parent_work_item_id
    return view.items.get(parent_id) if parent_id is not None else None


def active_mission(view: View, mission_id: str) -> Mission:
    return _active(mission_of(view, mission_id))


def target_mission(command: Command) -> Mission:
    """The Mission the command acts on (targets.py), which must still be active."""
    assert command.target is not None and command.target.mission is not None, \
        "decide resolved a target with a Mission"
    return _active(command.target.mission)


def _active(mission: Mission) -> Mission:
    if mission.state != MISSION_ACTIVE:
        raise ProtocolError("TRANSITION_NOT_PERMITTED",
                            f"Mission {mission.id} is {mission.state}; its work is closed",
                            {"missionState": mission.state})
    return mission


def target_item(view: View, command: Command, fenced_at: datetime | None = None) -> WorkItem:
    """The targeted WorkItem. With `fenced_at` (the lease holder's commands) fencing is
    checked before the transition, so a late result from a fenced owner is refused as
    STALE_OWNERSHIP / STALE_LEASE / LEASE_EXPIRED whatever state the item moved on to."""
    item = _found_item(view, command)
    if fenced_at is not None:
        require_lease(item, command, fenced_at)
    lifecycle.permitted(item.state, command.type)
    return item


def held_item(view: View, command: Command, context: Context) -> WorkItem:
    """The WorkItem of a lease holder's report (progress, checkpoint, block): fenced by the
    current lease or, buffered offline, reconciled against the historical one."""
    if command.offline is not None:
        return reconciled_item(view, command, context)
    return target_item(view, command, fenced_at=context.now)


def reconciled_item(view: View, command: Command, context: Context) -> WorkItem:
    """The WorkItem of a command buffered offline (§11.5), checked against the lease its
    binding names instead of the current one, and against the §10.2 table as offline_binding.py
    reads it for buffered work (a reconnection may have returned the item to `queued`)."""
    item = _found_item(view, command)
    offline_binding.check(view.missions[item.mission_id], item, command, context.now,
                  context.policy.offline_grace_seconds)
    return item


def _found_item(view: View, command: Command) -> WorkItem:
    """The WorkItem the command acts on, as `decide` resolved it (targets.py)."""
    assert command.target is not None and command.target.item is not None, \
        "decide resolved the WorkItem"
    item = command.target.item
    if command.expected_revision is not None and command.expected_revision != item.revision:
        raise ProtocolError(
            "REVISION_CONFLICT",
            f"expectedRevision {command.expected_revision} differs from the WorkItem's "
            f"revision {item.revision}", {"revision": item.revision})
    return item


def dependency_states(view: View, item: WorkItem) -> list[str]:
    """The states of the item's dependencies that are in the view (see `missing_dependencies`)."""
    return [view.items[dep].state for dep in item.depends_on if dep in view.items]


def missing_dependencies(view: View, item: WorkItem) -> list[str]:
    """The item's dependencies that the view does not hold. A dependency the caller did
    not load is unknown, never met: a decision that would pass on it must refuse instead."""
    return [dep for dep in item.depends_on if dep not in view.items]


def dependencies_met(view: View, item: WorkItem) -> bool:
    """§10.4: every dependency is in the view and together they satisfy the policy."""
    return not missing_dependencies(view, item) and dag.dependencies_met(
        item.dependency_policy, dependency_states(view, item))


def require_dependencies(view: View, item: WorkItem) -> None:
    if not dependencies_met(view, item):
        waiting = {dep: view.items[dep].state for dep in item.depends_on if dep in view.items}
        details = {"policy": item.dependency_policy, "dependencies": waiting}
        missing = missing_dependencies(view, item)
        if missing:
            details["missing"] = missing
        raise ProtocolError(
            "DEPENDENCIES_NOT_MET",
            f"WorkItem {item.id} waits on its dependencies ({item.dependency_policy})"
            + (f"; not known here: {', '.join(missing)}" if missing else ""), details)


def fence_expired_owner(item: WorkItem, now: datetime) -> list[Draft]:
    """What an offer of `item` appends first when its owner is no longer live (§10.2: "an
    expired owner is fenced first"): `lease.expired` if its lease is still open, then
    `work.ownership_expired`. [] without an owner; TRANSITION_NOT_PERMITTED while the
    owner is live. Shared by `work.offer` and automatic dispatch (dispatch.py)."""
    if item.owner is None:
        return []
    if fencing.owner_is_live(item, now):
        raise ProtocolError(
            "TRANSITION_NOT_PERMITTED",
            f"WorkItem {item.id} has a live owner (agent {item.owner}, epoch "
            f"{item.ownership_epoch}); it cannot be offered until that ownership ends",
            {"owner": item.owner, "ownershipEpoch": item.ownership_epoch})
    drafts = []
    if item.live_lease is not None:
        drafts.append(item_draft(item, "lease.expired",
                                 {"leaseId": item.live_lease.id, "reason": "timeout"}))
    reason = {QUEUED: "start_by", ACTIVE: "lease", BLOCKED: "blocked_lease"}.get(item.state,
                                                                                "fenced")
    drafts.append(item_draft(item, "work.ownership_expired", {
        "agentId": item.owner, "ownershipEpoch": item.ownership_epoch, "reason": reason}))
    return drafts


def require_lease(item: WorkItem, command: Command, now: datetime) -> None:
    if not command.lease_id:
        raise ProtocolError("VALIDATION_ERROR", f"{command.type} must name the current leaseId")
    fencing.check_lease(item, command.agent_id, command.lease_id, command.ownership_epoch,
                        command.session_epoch, now)


def bounded_seconds(value: int | None, default: int, maximum: int, name: str) -> int:
    seconds = default if value is None else value
    if seconds > maximum:
        raise ProtocolError("VALIDATION_ERROR", f"body.{name} may be at most {maximum} seconds",
                            {"path": f"body.{name}", "maximum": maximum})
    return seconds


def after(now: datetime, seconds: int) -> str:
    return format_time(now + timedelta(seconds=seconds))


def lease_of(item: WorkItem) -> Lease:
    """The item's lease, where the command's checks have made sure it has one (fencing, a
    live owner, a reconciled binding)."""
    assert item.lease is not None, f"WorkItem {item.id} has no lease"
    return item.lease


def item_draft(item: WorkItem, type_: str, data: JsonObject) -> Draft:
    return Draft(type_, data, item.mission_id, item.id)


def release(item: WorkItem, context: Context, reason: str) -> list[Draft]:
    """Revoke the live lease and withdraw the live offers of an item that is being taken
    away from its workers (failure, cancellation, child Mission, fencing)."""
    drafts = []
    if item.live_lease is not None:
        drafts.append(item_draft(item, "lease.revoked",
                                 {"leaseId": item.live_lease.id, "reason": reason}))
    live = [o.agent_id for o in item.live_offers(context.now)]
    if live:
        drafts.append(item_draft(item, "work.offer_withdrawn",
                                 {"agentIds": live, "reason": reason}))
    return drafts


def check_new_contract(view: View, mission: Mission, contract: JsonObject, item_id: str,
                        revision: int, edges: JsonObject) -> JsonObject:
    contract = check_contract(contract)
    if contract.get("revision", revision) != revision:
        raise ProtocolError("INVALID_CONTRACT",
                            f"Work Contract: body.contract.revision must be {revision}",
                            {"path": "body.contract.revision", "expected": revision})
    dependencies = contract["dependencies"]["workItems"]
    for index, dep in enumerate(dependencies):
        other = view.items.get(dep)
        if dep != item_id and (other is None or other.mission_id != mission.id):
            path = f"body.contract.dependencies.workItems[{index}]"
            raise ProtocolError("INVALID_CONTRACT",
                                f"Work Contract: {path}: no WorkItem {dep} in Mission {mission.id}",
                                {"path": path})
    cycle = dag.cycle_through(item_id, dependencies, edges)
    if cycle:
        raise ProtocolError("DEPENDENCY_CYCLE",
                            f"the dependency would close a cycle: {' -> '.join(cycle)}",
                            {"cycle": cycle})
    return {**contract, "revision": revision}


def edges_of(view: View, mission: Mission) -> dict[str, tuple[str, ...]]:
    return {i: view.items[i].depends_on for i in mission.work_items if i in view.items}


def new_id(view_ids: Container[str], command: Command, given: str | None, prefix: str,
           what: str) -> str:
    new_id = given or derive_id(prefix, command.id)
    if new_id in view_ids:
        raise ProtocolError("VALIDATION_ERROR", f"a {what} with id {new_id} already exists",
                            {"id": new_id})
    return new_id
