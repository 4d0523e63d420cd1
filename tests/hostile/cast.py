"""The hostile tests' world: a Group with two Missions whose WorkItems stand in every state
the lifecycle reaches, a member of each role, an artifact, a Context Package and a snapshot;
beside it another Group built the same way, and a third whose members are outsiders to both.

Built through the HTTP API as the Scenario helpers of tests/support.py do, so every row is
what the pipeline wrote. `Cast.home` is the Group under attack; `m1` its Mission whose
owner, coordinator and delegate are the matrix's principals, `m2` another Mission of the same
Group run by other people, `other` a Group none of the principals belongs to."""

import uuid
from dataclasses import dataclass, field
from datetime import timedelta

from apps.identity.models import Membership
from apps.ledger import snapshots
from apps.webhooks import registry
from mission_weave.protocol.timefmt import format_time
from tests.integration.artifact_helpers import digest, manifest, package, signed, upload
from tests.support import Actor, World, contract, evidence, now

# Far enough ahead that no deadline, offer, start-by or lease runs out during a long run.
DAY = 86400
LEASE_SECONDS = 3600  # MW_MAX_LEASE_SECONDS: the longest lease a command may ask for

# Workers hold many WorkItems at once here (refills add more); the Card's maximum.
BUSY_CARD = {"version": "1", "capabilities": [{"id": "summarize", "version": "1"}],
             "maxConcurrency": 1000}

# The WorkItem states each Mission holds one of (`Stage.items`).
STATES = ("open", "offered", "queued", "approval", "active", "blocked", "submitted",
          "verified", "cancelled")


def envelope(actor: Actor, group_id: str, type_: str, body: dict, **fields) -> dict:
    """An unsigned command from `actor` to any Group (its membership epoch there, else 1),
    for a test to change before it signs (matrix.signed_by)."""
    document = {"id": f"cmd-{uuid.uuid4().hex}", "type": type_, "groupId": group_id,
                "actor": actor.principal, "issuedAt": format_time(now()),
                "membershipEpoch": actor_epoch(actor, group_id), "body": body}
    if actor.key is not None:
        document["sessionEpoch"] = actor.session_epoch
    document.update({k: v for k, v in fields.items() if v is not None})
    return document


def actor_epoch(actor: Actor, group_id: str) -> int:
    row = Membership.objects.filter(group_id=group_id, principal=actor.principal,
                                    active=True).first()
    return row.epoch if row is not None else 1


@dataclass
class Stage:
    """One Mission and its people: a WorkItem per state, an artifact, a Context Package."""

    world: World
    coordinator: Actor  # the Mission's coordinatorId
    worker: Actor  # holds the offers, ownership and leases of its WorkItems
    owner: Actor  # the Mission's ownerId (a human)
    delegates: tuple = ()
    mission_id: str = ""
    created_sequence: int = 0  # the mission.created event's: what a Context Package cites
    items: dict = field(default_factory=dict)  # state -> WorkItem id
    artifact: str = ""  # hash of an artifact published for the active WorkItem
    artifact_data: bytes = b""
    unpublished_blob: str = ""  # bytes the worker uploaded and published nowhere
    unpublished_data: bytes = b""
    package_id: str = ""
    proposal_id: str = ""
    capability_token: str = ""  # the bearer string of the active lease's token
    webhook: str = ""  # a webhook of the Stage's Group

    def build(self) -> "Stage":
        c = self.coordinator
        [created] = c.ok("mission.create", {
            "title": "Hostile", "ownerId": self.owner.principal, "coordinatorId": c.principal,
            "delegates": [d.principal for d in self.delegates]})
        self.mission_id, self.created_sequence = created["missionId"], created["sequence"]
        for state in STATES:
            self.items[state] = self._item_in(state)
        self.proposal_id = self.worker.ok("work.propose", {
            "missionId": self.mission_id, "contract": contract()})[0]["data"]["proposalId"]
        self.package_id = f"pkg-{uuid.uuid4().hex[:8]}"
        self.worker.ok("context.publish", package(
            self.worker, self.mission_id, self.package_id, artifacts=[self.artifact],
            events=(self.created_sequence, self.created_sequence)))
        self.unpublished_data = f"unpublished {uuid.uuid4().hex}".encode()
        self.unpublished_blob = upload(self.worker, self.unpublished_data)
        return self

    # -- the lifecycle, one command at a time ------------------------------------------------

    def authorize(self, **overrides) -> str:
        return self.coordinator.ok("work.authorize", {
            "missionId": self.mission_id, "contract": contract(**overrides)})[0]["workItemId"]

    def offer(self, item_id: str) -> None:
        self.coordinator.ok("work.offer", {
            "candidates": [self.worker.name], "mode": "sequential",
            "expiresAt": format_time(now() + timedelta(seconds=DAY)),
            "startWithinSeconds": DAY}, workItemId=item_id)

    def accept(self, item_id: str) -> None:
        self.worker.ok("work.accept_offer", {"contractRevision": 1}, workItemId=item_id)

    def start(self, item_id: str) -> dict:
        events = self.worker.ok("work.start", {"leaseSeconds": LEASE_SECONDS},
                                workItemId=item_id, ownershipEpoch=self.epoch(item_id))
        self.capability_token = self.worker.last.get("capabilityToken", {}).get("token", "")
        return events[0]["data"]

    def item(self, item_id: str) -> dict:
        return self.coordinator.get(f"work-items/{item_id}").json()

    def epoch(self, item_id: str) -> int:
        return self.item(item_id)["ownershipEpoch"]

    def lease(self, item_id: str) -> dict:
        """The fencing fields of the item's current lease: what its holder sends."""
        item = self.item(item_id)
        return {"workItemId": item_id, "ownershipEpoch": item["ownershipEpoch"],
                "leaseId": item["lease"]["id"] if item["lease"] else None}

    def publish(self, item_id: str, data: bytes) -> str:
        upload(self.worker, data)
        document = signed(manifest(self.worker, self.mission_id, item_id, data), self.worker)
        self.worker.ok("artifact.publish", document, **self.lease(item_id))
        return digest(data)

    def _item_in(self, state: str) -> str:
        risky = {"risk": {"class": "high", "requiresExecutionApproval": True}}
        item_id = self.authorize(**(risky if state == "approval" else {}))
        if state == "open":
            return item_id
        if state == "cancelled":
            self.coordinator.ok("work.cancel", {"reason": "not needed"}, workItemId=item_id)
            return item_id
        self.offer(item_id)
        if state == "offered":
            return item_id
        self.accept(item_id)
        if state in ("queued", "approval"):
            return item_id
        self.start(item_id)
        if state == "active":
            self.artifact_data = f"artifact {uuid.uuid4().hex}".encode()
            self.artifact = self.publish(item_id, self.artifact_data)
            return item_id
        if state == "blocked":
            self.worker.ok("work.block", {"checkpoint": {"progress": {"phase": "waiting"}},
                                          "requiredResolution": "the Q3 figures",
                                          "blockedLeaseSeconds": DAY}, **self.lease(item_id))
            return item_id
        name = self.publish(item_id, f"deliverable {uuid.uuid4().hex}".encode())
        self.worker.ok("work.submit", {"contractRevision": 1, "artifacts": [name], "evidence": [
            evidence(["ac1", "ac2"], artifacts=[name])]}, **self.lease(item_id))
        if state == "verified":
            self.coordinator.ok("work.accept_result", {"evidence": [evidence(
                ["ac1", "ac2"], method="coordinator-review", result="pass: checked")]},
                workItemId=item_id)
        return item_id


def new_webhook(group_id: str) -> str:
    webhook, _ = registry.create(group_id, "https://hooks.example.com/mw", [], "json",
                                 "user:operator", now())
    return webhook.id


class Cast:
    """Group `home` (Missions m1, m2), Group `other` (Mission mb), Group `third` whose
    members are the outsiders. The principals of the matrix are `principals`."""

    def __init__(self):
        tag = uuid.uuid4().hex[:8]
        self.home = World(f"home{tag}")
        self.other = World(f"other{tag}")
        self.third = World(f"third{tag}")
        home, other, third = self.home, self.other, self.third
        # The matrix's principals, members of `home` (or of `third` only).
        self.owner = home.human(f"owner-{tag}", roles=("owner",))
        self.coordinator = home.agent(f"coord-{tag}", roles=("coordinator",))
        self.delegate = home.human(f"delegate-{tag}", roles=("coordinator",))
        self.worker = home.agent(f"worker-{tag}", roles=("worker",), card=BUSY_CARD)
        self.reviewer = home.agent(f"reviewer-{tag}", roles=("reviewer",))
        self.observer = home.human(f"observer-{tag}", roles=("observer",))
        self.observer_agent = home.agent(f"watcher-{tag}", roles=("observer",))
        self.outsider = third.agent(f"outsider-{tag}", roles=("coordinator", "worker"))
        self.outsider_human = third.human(f"stranger-{tag}", roles=("owner", "coordinator"))
        # The people of m2 and of the other Group, whom the matrix never plays.
        self.owner2 = home.human(f"owner2-{tag}", roles=("owner",))
        self.coordinator2 = home.agent(f"coord2-{tag}", roles=("coordinator",))
        self.worker2 = home.agent(f"worker2-{tag}", roles=("worker",), card=BUSY_CARD)
        self.b_owner = other.human(f"bowner-{tag}", roles=("owner",))
        self.b_coordinator = other.agent(f"bcoord-{tag}", roles=("coordinator",))
        self.b_worker = other.agent(f"bworker-{tag}", roles=("worker",), card=BUSY_CARD)
        self.m1 = Stage(home, self.coordinator, self.worker, self.owner,
                        delegates=(self.delegate,)).build()
        self.m2 = Stage(home, self.coordinator2, self.worker2, self.owner2).build()
        self.mb = Stage(other, self.b_coordinator, self.b_worker, self.b_owner).build()
        self.m1.webhook = self.m2.webhook = new_webhook(home.group.id)
        self.mb.webhook = new_webhook(other.group.id)
        self.snapshot_id = snapshots.take(home.group.id).id
        self.b_snapshot_id = snapshots.take(other.group.id).id

    @property
    def principals(self) -> dict:
        """name -> Actor (None: anonymous), the rows of the authorization matrix."""
        return {"owner": self.owner, "coordinator": self.coordinator,
                "delegate": self.delegate, "worker": self.worker, "reviewer": self.reviewer,
                "observer": self.observer, "observer_agent": self.observer_agent,
                "outsider": self.outsider, "outsider_human": self.outsider_human,
                "anonymous": None}

    def member_of_home(self, actor: Actor | None) -> bool:
        return actor is not None and actor not in (self.outsider, self.outsider_human)
