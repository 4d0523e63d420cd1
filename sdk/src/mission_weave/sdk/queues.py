"""Per-Group work state on the Agent's side, rebuilt by replaying the Group's events.

`GroupWork.apply(event)` folds one event (idempotent by sequence) into a small view of
every WorkItem: its contract and revision, state, owner, ownership epoch, offers and
lease. From it, `queue(agent)` gives the items the agent owns in `queued` state with
the contract's urgency, deadline and businessImpact (read on every call, so a revised
contract reorders the queue at once), and `live_offers(agent, now)` the offers it may
accept. The demo coordinator reads the same view for open items whose dependencies are
met. Pure: no I/O, time is an argument.
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypedDict

from mission_weave.protocol.json_types import JsonObject
from mission_weave.protocol.timefmt import parse_time

from .scheduler import QueuedItem

TERMINAL = frozenset({"verified", "cancelled"})


class Offer(TypedDict):
    """One agent's offer of an item, as the log says it stands."""

    expiresAt: datetime  # the protocol's name
    status: str  # live | accepted | declined | withdrawn


@dataclass
class Item:
    id: str
    mission_id: str | None
    contract: JsonObject
    contract_revision: int
    state: str = "open"
    owner: str | None = None  # agent id
    ownership_epoch: int = 0
    accepted_revision: int | None = None
    offers: dict[str, Offer] = field(default_factory=dict)  # by agentId
    lease_id: str | None = None
    lease_expires_at: datetime | None = None
    capability_token: JsonObject | None = None
    enqueued_at: datetime | None = None  # when it last entered `queued`
    last_checkpoint: JsonObject | None = None
    preemption_lease: str | None = None  # the lease a preemption was requested for
    submitted_at: datetime | None = None
    execution_approved: bool = False

    @property
    def depends_on(self) -> list[str]:
        return list(self.contract.get("dependencies", {}).get("workItems", []))

    @property
    def dependency_policy(self) -> str:
        policy: str = self.contract.get("dependencies", {}).get("policy", "all_verified")
        return policy

    @property
    def urgency(self) -> str:
        urgency: str = self.contract.get("urgency", "normal")
        return urgency

    @property
    def business_impact(self) -> str:
        impact: str = self.contract.get("businessImpact", "medium")
        return impact

    @property
    def deadline(self) -> datetime | None:
        text = self.contract.get("deadline")
        return parse_time(text) if text else None

    @property
    def criteria(self) -> list[str]:
        return [c["id"] for c in self.contract.get("acceptanceCriteria", [])]

    def offer_live(self, agent_id: str, now: datetime) -> bool:
        offer = self.offers.get(agent_id)
        return (self.state == "offered" and offer is not None and offer["status"] == "live"
                and offer["expiresAt"] > now)


class GroupWork:
    def __init__(self, group_id: str):
        self.group_id = group_id
        self.applied = 0  # the last sequence folded in
        self.items: dict[str, Item] = {}

    # --- folding events --------------------------------------------------------------

    def apply(self, event: JsonObject) -> bool:
        """Fold one event in; False (and nothing changes) when already applied."""
        if event["sequence"] <= self.applied:
            return False
        self.applied = event["sequence"]
        mutate = _MUTATORS.get(event["type"])
        item = self.items.get(event.get("workItemId") or "")
        if event["type"] == "work.authorized":
            data = event["data"]
            self.items[data["workItemId"]] = Item(
                id=data["workItemId"], mission_id=event.get("missionId"),
                contract=data["contract"], contract_revision=data["contract"]["revision"])
        elif mutate is not None and item is not None:
            mutate(item, event["data"], parse_time(event["occurredAt"]))
        return True

    def load_snapshot(self, sequence: int, work_items: list[JsonObject]) -> None:
        """Replace the view with a snapshot's WorkItems at `sequence` (the projection
        documents, snake_case, that apps/ledger/snapshots.py signs)."""
        self.items = {}
        for doc in work_items:
            item = Item(id=doc["id"], mission_id=doc.get("mission_id"), contract=doc["contract"],
                        contract_revision=doc["contract_revision"], state=doc["state"],
                        owner=doc.get("owner"), ownership_epoch=doc.get("ownership_epoch") or 0,
                        accepted_revision=doc.get("accepted_revision"),
                        execution_approved=bool(doc.get("execution_approved")),
                        last_checkpoint=doc.get("last_checkpoint"))
            lease = doc.get("lease")
            if lease and not lease.get("closedAt"):
                item.lease_id = lease["id"]
                item.lease_expires_at = parse_time(lease["expiresAt"])
            for offer in doc.get("offers") or []:
                item.offers[offer["agentId"]] = {"expiresAt": parse_time(offer["expiresAt"]),
                                                 "status": offer.get("status", "live")}
            if item.state == "queued":
                updated = doc.get("updated_at") or doc.get("created_at")
                item.enqueued_at = parse_time(updated) if updated else None
            self.items[item.id] = item
        self.applied = sequence

    # --- what the Worker and the coordinator read ------------------------------------

    def owned(self, agent_id: str, states: Iterable[str] = ("queued", "active")
              ) -> list[Item]:
        """The items the agent owns live in `states`: its load against maxConcurrency.
        An active item whose lease closed without leaving `active` timed out
        (`lease.expired`): it is the Coordinator's to reassign (§11.5), no longer ours,
        as the server's capacity backstop counts it too."""
        return [i for i in self.items.values() if i.owner == agent_id and i.state in states
                and not (i.state == "active" and i.lease_id is None)]

    def queue(self, agent_id: str, now: datetime) -> list[QueuedItem]:
        """The agent's queued items, as the Scheduler takes them (§11.1)."""
        return [QueuedItem(
            group_id=self.group_id, work_item_id=i.id, mission_id=i.mission_id or "",
            ownership_epoch=i.ownership_epoch, enqueued_at=i.enqueued_at or now,
            urgency=i.urgency, business_impact=i.business_impact, deadline=i.deadline,
            risk_gate_open=(not i.contract.get("risk", {}).get("requiresExecutionApproval")
                            or i.execution_approved)
            and i.accepted_revision == i.contract_revision,
            tool_budget=dict(i.contract.get("budgets", {})),
            checkpoint_ref=(i.last_checkpoint or {}).get("stateArtifact"))
            for i in self.owned(agent_id, ("queued",))]

    def live_offers(self, agent_id: str, now: datetime) -> list[Item]:
        return [i for i in self.items.values() if i.offer_live(agent_id, now)]

    def dependencies_met(self, item: Item) -> bool:
        states = [self.items[d].state if d in self.items else None for d in item.depends_on]
        if item.dependency_policy == "any_verified":
            return not states or "verified" in states
        if item.dependency_policy == "all_terminal":
            return all(s in ("verified", "failed", "cancelled") for s in states)
        return all(s == "verified" for s in states)


# --- one mutator per event type ------------------------------------------------------

Mutator = Callable[[Item, JsonObject, datetime], None]  # (item, event data, occurredAt)

def _contract_revised(item: Item, data: JsonObject, at: datetime) -> None:
    item.contract, item.contract_revision = data["contract"], data["contractRevision"]
    item.execution_approved = False


def _offered(item: Item, data: JsonObject, at: datetime) -> None:
    item.state = "offered"
    item.offers = {o["agentId"]: {"expiresAt": parse_time(o["expiresAt"]), "status": "live"}
                   for o in data["offers"]}


def _offer_status(status: str, key: str) -> Mutator:
    def mutate(item: Item, data: JsonObject, at: datetime) -> None:
        agents = data[key] if isinstance(data[key], list) else [data[key]]
        for agent in agents:
            if agent in item.offers and item.offers[agent]["status"] == "live":
                item.offers[agent]["status"] = status
    return mutate


def _offer_accepted(item: Item, data: JsonObject, at: datetime) -> None:
    item.state, item.owner = "queued", data["agentId"]
    item.ownership_epoch = data["ownershipEpoch"]
    item.accepted_revision = data.get("contractRevision", item.contract_revision)
    item.enqueued_at = at
    if data["agentId"] in item.offers:
        item.offers[data["agentId"]]["status"] = "accepted"


def _contract_accepted(item: Item, data: JsonObject, at: datetime) -> None:
    item.accepted_revision = data["contractRevision"]


def _started(item: Item, data: JsonObject, at: datetime) -> None:
    item.state, item.lease_id = "active", data["leaseId"]
    item.lease_expires_at = parse_time(data["expiresAt"])
    item.capability_token = data.get("capabilityToken")


def _renewed(item: Item, data: JsonObject, at: datetime) -> None:
    item.lease_expires_at = parse_time(data["expiresAt"])
    item.capability_token = data.get("capabilityToken") or item.capability_token


def _lease_closed(item: Item, data: JsonObject, at: datetime) -> None:
    item.lease_id = None
    if data.get("returnTo") == "queued":
        item.state, item.enqueued_at = "queued", at


def _checkpointed(item: Item, data: JsonObject, at: datetime) -> None:
    item.state, item.lease_id, item.enqueued_at = "queued", None, at
    item.last_checkpoint = {"progress": data.get("progress"),
                            "stateArtifact": data.get("stateArtifact")}


def _blocked(item: Item, data: JsonObject, at: datetime) -> None:
    item.state, item.lease_id = "blocked", None
    # The checkpoint is a work.checkpoint body, {progress, stateArtifact?} (PROTOCOL §2);
    # an event logged by an older server holds the progress fields themselves.
    checkpoint = data.get("checkpoint")
    if isinstance(checkpoint, dict):
        flat = "progress" not in checkpoint
        item.last_checkpoint = {
            "progress": checkpoint if flat else checkpoint.get("progress"),
            "stateArtifact": None if flat else checkpoint.get("stateArtifact")}


def _unblocked(item: Item, data: JsonObject, at: datetime) -> None:
    item.state = data["next"]
    if data["next"] == "open":
        item.owner = None
    else:
        item.enqueued_at = at


def _ownership_expired(item: Item, data: JsonObject, at: datetime) -> None:
    item.owner = None


def _submitted(item: Item, data: JsonObject, at: datetime) -> None:
    item.state, item.lease_id, item.submitted_at = "submitted", None, at


def _ended(state: str) -> Mutator:
    def mutate(item: Item, data: JsonObject, at: datetime) -> None:
        item.state, item.lease_id = state, None
        if state != "verified":
            item.owner = None
    return mutate


def _approved(item: Item, data: JsonObject, at: datetime) -> None:
    item.execution_approved = True


def _preemption(item: Item, data: JsonObject, at: datetime) -> None:
    item.preemption_lease = data.get("leaseId")


_MUTATORS: dict[str, Mutator] = {
    "work.contract_revised": _contract_revised,
    "work.offered": _offered,
    "work.offer_declined": _offer_status("declined", "agentId"),
    "work.offer_withdrawn": _offer_status("withdrawn", "agentIds"),
    "work.offer_accepted": _offer_accepted,
    "work.contract_accepted": _contract_accepted,
    "approval.execution_granted": _approved,
    "work.started": _started,
    "lease.renewed": _renewed,
    "lease.revoked": _lease_closed,
    "lease.expired": _lease_closed,
    "work.checkpointed": _checkpointed,
    "work.blocked": _blocked,
    "work.unblocked": _unblocked,
    "work.ownership_expired": _ownership_expired,
    "work.submitted": _submitted,
    "work.verified": _ended("verified"),
    "work.failed": _ended("failed"),
    "work.cancelled": _ended("cancelled"),
    "work.preemption_requested": _preemption,
}
