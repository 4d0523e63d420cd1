"""The authority mutation suite's world, bases and mutations (tests/hostile/
test_authority_mutations.py runs them over HTTP and over the WebSocket).

A *base* is a command that the server accepts as it is: for every command type of
mission_weave/core/commands COMMAND_TYPES and every role ROLES gives it, a principal of
Mission m1 of the hostile Cast (tests/hostile/cast.py) sending it on m1's objects, and for
some types a variant (an envelope workItemId of the Mission's own, a proposal, a client id,
the bounded-offline binding, Evidence citing an artifact). A *mutation* re-points one field
of the base that names an object (or adds an envelope workItemId where the base has none)
at (a) an id that names nothing, (b) an object of another Mission of the same Group, in the
same state as the base's, so that nothing but authority and consistency can refuse it, and
(c) an object of another Group; a few are compound, the shapes of the attacks of issue 24
(a Mission command naming the sender's own or a fresh WorkItem in the envelope and another
Mission in the body; a buffered report bound to the sender's own submitted or blocked item).

The oracle is written from PROTOCOL.md §2 ("Which Mission decides is the Mission of the
object the command acts on"; "Review rules"; the bounded-offline binding), not from the
code: a mutation is refused (a 4xx PROTOCOL code, nothing appended to any Group) unless it
names an object the sender could have named in a clean command anyway -- a fresh
client-chosen id for what the command creates (a) (c), or, for what PROTOCOL gives every
member of the role (a proposal, a message, a reviewer's Evidence, an owner's forwarding
approval, a coordinator's forwarding), another Mission's object (b). Such a `free` mutation
may pass, and then every event it appended names only the Mission it named."""

import copy
import itertools
import uuid
from dataclasses import dataclass, field
from datetime import timedelta

from apps.identity import registry
from apps.ledger.models import Event, Group
from mission_weave.core import offline_binding
from mission_weave.core.commands import COMMAND_TYPES, ROLES
from mission_weave.protocol.errors import HTTP_STATUS
from mission_weave.protocol.timefmt import format_time
from tests.hostile.cast import Cast, Stage, envelope
from tests.hostile.matrix import fake, signed_by
from tests.integration.artifact_helpers import manifest, package, signed
from tests.support import contract, evidence, now

URN = offline_binding.URN
PROTOCOL_CODES = {code: status for code, status in HTTP_STATUS.items() if 400 <= status < 500}
A, B, C = "unknown", "other_mission", "other_group"
CLASSES = (A, B, C)
REFUSE, FREE = "refuse", "free"


# -- the world --------------------------------------------------------------------------------

@dataclass
class Approvable:
    """A Mission whose one WorkItem is verified: mission.approve passes for its owner."""

    mission_id: str
    item: str


def approvable(world, coordinator, worker, owner, mission_id: str | None = None) -> Approvable:
    stage = Stage(world, coordinator, worker, owner)
    if mission_id is None:
        [created] = coordinator.ok("mission.create", {
            "title": "Approvable", "ownerId": owner.principal,
            "coordinatorId": coordinator.principal})
        mission_id = created["missionId"]
    stage.mission_id = mission_id
    return Approvable(mission_id, stage._item_in("verified"))


@dataclass
class Lease:
    """An Execution Lease as its holder knew it: what a binding names (§11.5)."""

    item: str
    lease_id: str
    ownership_epoch: int
    started_at: str
    expires_at: str


def latest_lease(group_id: str, item_id: str) -> Lease:
    started = Event.objects.filter(group_id=group_id, work_item_id=item_id,
                                   type="work.started").order_by("-sequence").first()
    return Lease(item_id, started.data["leaseId"], started.data["ownershipEpoch"],
                 format_time(started.occurred_at), started.data["expiresAt"])


class World:
    """The Cast, and what some bases and mutations need besides:
    - Missions whose one WorkItem is verified (mission.approve passes): `e1` of m1's people,
      `e2` of m2's, `child` a child Mission of a WorkItem of m2, `eb` of the other Group's;
    - the Organization's forwarding approvals of m1's and m2's artifacts to the third
      Group, of which m1's coordinator is a coordinator too (artifact.forward passes);
    - the leases m1's worker held on its active, submitted and blocked WorkItems."""

    def __init__(self, cast: Cast | None = None):
        self.cast = cast = cast or Cast()
        home, other = cast.home, cast.other
        m1, m2, mb = cast.m1, cast.m2, cast.mb
        self.e1 = approvable(home, m1.coordinator, m1.worker, m1.owner)
        self.e2 = approvable(home, m2.coordinator, m2.worker, m2.owner)
        self.eb = approvable(other, mb.coordinator, mb.worker, mb.owner)
        parent = m2.authorize()
        child = m2.coordinator.ok("mission.create_child", {
            "title": "Child of m2", "childFailurePolicy": "block"},
            workItemId=parent)[-1]["data"]["childMissionId"]
        self.child = approvable(home, m2.coordinator, m2.worker, m2.owner, mission_id=child)
        registry.add_member(cast.third.group, cast.coordinator.principal, ["coordinator"])
        for stage in (m1, m2):
            stage.owner.ok("artifact.approve_forwarding", {
                "hash": stage.artifact, "targetGroupId": cast.third.group.id})
        self.leases = {state: latest_lease(home.group.id, m1.items[state])
                       for state in ("active", "submitted", "blocked")}
        self.other_leases = {"m2": m2.lease(m2.items["active"])["leaseId"],
                             "mb": mb.lease(mb.items["active"])["leaseId"]}

    def heads(self) -> tuple:
        ids = [self.cast.home.group.id, self.cast.other.group.id, self.cast.third.group.id]
        return tuple(Group.objects.filter(id__in=ids).order_by("id")
                     .values_list("head_sequence", flat=True))

    def actor(self, role: str):
        """m1's principal of each role (the observer: an Agent, so it may sign a package)."""
        c = self.cast
        return {"coordinator": c.coordinator, "owner": c.owner, "worker": c.worker,
                "reviewer": c.reviewer, "observer": c.observer_agent}[role]


# -- bases ------------------------------------------------------------------------------------

@dataclass
class Pointer:
    """A field naming an object: `path` into the envelope, the `kind` of object, whether
    the base carries it (`retarget`), lacks it (`add`), or names what the command creates
    (`create`); `free` the classes PROTOCOL lets this sender name anyway."""

    path: tuple
    kind: str
    mode: str = "retarget"
    free: frozenset = frozenset()


@dataclass
class Base:
    type: str
    role: str
    variant: str
    actor: object
    document: dict  # the unsigned envelope
    mission_id: str | None  # the Mission the base acts on
    pointers: list = field(default_factory=list)
    resign: object = None  # body -> body signed again (a manifest, a Context Package)
    compounds: list = field(default_factory=list)  # Mutation, built with the base

    @property
    def name(self) -> str:
        return f"{self.type}/{self.role}" + (f"/{self.variant}" if self.variant else "")


@dataclass
class Mutation:
    label: str
    document: dict
    expect: str  # REFUSE or FREE
    missions: frozenset = frozenset()  # FREE: the Missions its events may name


ITEM = ("workItemId",)
LEASE = ("leaseId",)
MISSION = ("body", "missionId")
ADD_ITEM = Pointer(ITEM, "item:open", "add")


def _progress() -> dict:
    return {"phase": "drafting", "milestones": ["outline"]}


# Where each command type acts in Mission m1, by role: (role, variant) of every base.
# Every role ROLES gives a type has a base, but an owner's Context Package: the Cast's
# owners are humans, and a Context Package is signed by the Agent that generated it.
NOT_SENT = {("context.publish", "owner"): "a Context Package is its generating Agent's; "
                                          "the Cast's owners are humans"}
VARIANTS = {
    "mission.approve": ("", "own-item"),
    "mission.refuse_approval": ("", "own-item"),
    "mission.fail": ("", "own-item"),
    "mission.cancel": ("", "own-item"),
    "work.propose": ("", "own-item"),
    "work.authorize": ("", "proposal", "client-id"),
    "work.progress": ("", "offline"),
    "work.checkpoint": ("", "offline"),
    "work.block": ("", "offline"),
    "conversation.post": ("", "offline"),
    "evidence.record": ("", "cites"),
}
LEASE_TYPES = frozenset({"lease.renew", "work.progress", "work.checkpoint", "work.block",
                         "work.submit", "usage.record", "capability.rotate",
                         "capability.narrow"})


def base_keys() -> list:
    """(type, role, variant) of every base, without a database: the parameters."""
    keys = []
    for type_ in COMMAND_TYPES:
        for role in sorted(ROLES[type_]):
            if (type_, role) in NOT_SENT:
                continue
            for variant in VARIANTS.get(type_, ("",)):
                if variant == "offline" and role != "worker":
                    continue  # a binding is the lease holder's
                keys.append((type_, role, variant))
    return keys


def base(w: World, type_: str, role: str, variant: str) -> Base:
    """The base of `type_` from m1's principal of `role`; KeyError for a type nobody wrote
    a base for, so that a new command type fails the suite until it has one."""
    builder = BUILDERS.get(type_)
    if builder is None:
        raise KeyError(f"no base envelope for command type {type_}")
    return builder(w, type_, role, variant, w.actor(role))


def _envelope(w, actor, type_, body, **fields) -> dict:
    return envelope(actor, w.cast.home.group.id, type_, body, **fields)


def _mission_base(w, type_, role, variant, actor) -> Base:
    m1 = w.cast.m1
    approve = type_ == "mission.approve"
    mission_id = w.e1.mission_id if approve else m1.mission_id
    own_item = w.e1.item if approve else m1.items["open"]
    body = {"missionId": mission_id}
    if type_ in ("mission.refuse_approval", "mission.fail", "mission.cancel"):
        body["reason"] = "enough"
    if type_ == "work.propose":
        body["contract"] = contract()
    pointers = []
    fields = {}
    if variant == "own-item":
        fields["workItemId"] = own_item  # a WorkItem of the body's Mission: the same object
        pointers.append(Pointer(ITEM, "item:open"))
    else:
        pointers.append(ADD_ITEM)
        if type_ == "mission.refuse_approval":
            body["workItems"] = [{"workItemId": own_item, "reason": "not yet"}]
            pointers.append(Pointer(("body", "workItems", 0, "workItemId"), "item:open"))
        if type_ == "work.propose":
            pointers.append(Pointer(("body", "proposalId"), "new:proposal", "create",
                                    frozenset({A, C})))
    group_wide = frozenset({B}) if type_ == "work.propose" and variant == "" else frozenset()
    pointers.append(Pointer(MISSION, "approvable" if approve else "mission", free=group_wide))
    b = Base(type_, role, variant, actor, _envelope(w, actor, type_, body, **fields),
             mission_id, pointers)
    if variant == "":
        child = w.child.mission_id
        b.compounds = [Mutation(
            f"body.missionId -> {B} {child} (a child Mission)", _set(b.document, MISSION, child),
            FREE if group_wide else REFUSE, frozenset({child}))]
        b.compounds += _trick_compounds(w, b, approve)
    return b


def _trick_compounds(w, b: Base, approve: bool) -> list:
    """The attacks of issue 24: another Mission in the body, and in the envelope the
    sender's own WorkItem or a fresh id, which once chose whose authority applied."""
    m1 = w.cast.m1
    own = w.e1.item if approve else m1.items["open"]
    victims = [w.e2.mission_id, w.child.mission_id] if approve else \
        [w.cast.m2.mission_id, w.child.mission_id]
    found = []
    for victim in victims:
        for label, item in (("own WorkItem", own), ("fresh id", fake(f"fresh-{own}"))):
            document = _set(_set(b.document, MISSION, victim), ITEM, item)
            found.append(Mutation(f"body.missionId -> Mission {victim} of others, envelope "
                                  f"workItemId -> {label}", document, REFUSE))
    return found


def _authorize_base(w, type_, role, variant, actor) -> Base:
    m1 = w.cast.m1
    body = {"missionId": m1.mission_id, "contract": contract()}
    fields = {}
    pointers = [Pointer(MISSION, "mission")]
    if variant == "proposal":
        body["proposalId"] = m1.proposal_id
        pointers.append(Pointer(("body", "proposalId"), "proposal"))
    elif variant == "client-id":
        item_id = f"wi_{uuid.uuid4().hex}"
        body["workItemId"] = fields["workItemId"] = item_id
        pointers.append(Pointer(ITEM, "item:open"))
    else:
        pointers += [ADD_ITEM, Pointer(("body", "proposalId"), "proposal", "add"),
                     Pointer(("body", "workItemId"), "new:item", "create", frozenset({A, C}))]
    b = Base(type_, role, variant, actor, _envelope(w, actor, type_, body, **fields),
             m1.mission_id, pointers)
    if variant == "":
        b.compounds = _trick_compounds(w, b, approve=False)
    return b


def _create_base(w, type_, role, variant, actor) -> Base:
    m1 = w.cast.m1
    body = {"title": "Mine", "ownerId": m1.owner.principal,
            "coordinatorId": m1.coordinator.principal}
    return Base(type_, role, variant, actor, _envelope(w, actor, type_, body), None,
                [ADD_ITEM, Pointer(MISSION, "new:mission", "create", frozenset({A, C}))])


# type -> (state of m1's WorkItem it acts on, body builder (w, actor) -> body)
def _evidence_of(actor, result="pass: checked", artifacts=()) -> list:
    return [evidence(["ac1", "ac2"], producer=actor.principal, result=result,
                     artifacts=list(artifacts))]


ITEM_COMMANDS = {
    "mission.create_child": ("open", lambda w, a: {"title": "Child",
                                                   "childFailurePolicy": "block"}),
    "work.revise_contract": ("open", lambda w, a: {"contract": contract(goal="Changed")}),
    "work.offer": ("open", lambda w, a: {
        "candidates": [w.cast.m1.worker.name], "mode": "sequential",
        "expiresAt": format_time(now() + timedelta(hours=1))}),
    "work.decline_offer": ("offered", lambda w, a: {"reason": "capacity"}),
    "work.accept_offer": ("offered", lambda w, a: {"contractRevision": 1}),
    "approval.grant_execution": ("approval", lambda w, a: {"comment": "go"}),
    "approval.refuse_execution": ("approval", lambda w, a: {"reason": "too risky"}),
    "work.start": ("queued", lambda w, a: {}),
    "schedule.disclose": ("queued", lambda w, a: {
        "estimatedStart": {"from": _later(), "to": _later()}, "estimatedCompletion": _later(),
        "confidence": 0.5, "capacityStatus": "available", "calculatedAt": _later()}),
    "lease.renew": ("active", lambda w, a: {}),
    "work.progress": ("active", lambda w, a: _progress()),
    "work.checkpoint": ("active", lambda w, a: {"progress": _progress(),
                                                "stateArtifact": w.cast.m1.artifact}),
    "work.block": ("active", lambda w, a: {"checkpoint": {
        "progress": _progress(), "stateArtifact": w.cast.m1.artifact},
        "requiredResolution": "access"}),
    "work.submit": ("active", lambda w, a: {
        "contractRevision": 1, "artifacts": [w.cast.m1.artifact],
        "evidence": _evidence_of(a, artifacts=[w.cast.m1.artifact])}),
    "usage.record": ("active", lambda w, a: {"tokens": 1}),
    "capability.rotate": ("active", lambda w, a: {}),
    "capability.narrow": ("active", lambda w, a: {"scopes": {"tools": []}}),
    "work.request_preemption": ("active", lambda w, a: {"reason": "needed elsewhere"}),
    "work.unblock": ("blocked", lambda w, a: {"resolution": "done"}),
    "work.accept_result": ("submitted", lambda w, a: {
        "evidence": _evidence_of(a, artifacts=[w.cast.m1.artifact])}),
    "evidence.record": ("submitted", lambda w, a: {"evidence": [evidence(
        ["ac1"], producer=a.principal, result="pass: reviewed")]}),
    "work.cancel": ("open", lambda w, a: {"reason": "not needed"}),
    "conversation.post": ("open", lambda w, a: {"kind": "message", "text": "hello"}),
}
# Evidence whose artifacts a mutation re-points: path of the first one.
EVIDENCE_ARTIFACT = ("body", "evidence", 0, "artifacts", 0)


def _later() -> str:
    return format_time(now() + timedelta(hours=1))


def _item_base(w, type_, role, variant, actor) -> Base:
    m1 = w.cast.m1
    if type_ == "work.fail":
        state = "active"
        body = {"evidence": _evidence_of(actor, "fail: broken", [m1.artifact])}
    else:
        state, make = ITEM_COMMANDS[type_]
        body = make(w, actor)
    if variant == "offline":
        return _offline_base(w, type_, role, actor, body)
    item_id = m1.items[state]
    fields = {"workItemId": item_id}
    pointers = [Pointer(ITEM, f"item:{state}", free=_group_wide(type_, role))]
    holder = role == "worker" and (type_ in LEASE_TYPES or type_ == "work.fail")
    if holder:
        lease = m1.lease(item_id)
        fields.update(ownershipEpoch=lease["ownershipEpoch"], leaseId=lease["leaseId"])
        pointers.append(Pointer(LEASE, "lease"))
    elif type_ in ("work.start", "schedule.disclose"):
        fields["ownershipEpoch"] = m1.epoch(item_id)
    if type_ == "work.submit":
        pointers += [Pointer(("body", "artifacts", 0), "artifact"),
                     Pointer(EVIDENCE_ARTIFACT, "artifact")]
    if type_ in ("work.accept_result", "work.fail"):
        pointers.append(Pointer(EVIDENCE_ARTIFACT, "artifact"))
    if type_ == "work.checkpoint":
        pointers.append(Pointer(("body", "stateArtifact"), "artifact"))
    if type_ == "work.block":
        pointers.append(Pointer(("body", "checkpoint", "stateArtifact"), "artifact"))
    if type_ == "mission.create_child":
        pointers.append(Pointer(("body", "childMissionId"), "new:mission", "create",
                                frozenset({A, C})))
    if type_ == "evidence.record":
        if variant == "cites":
            body["evidence"][0]["artifacts"] = [m1.artifact]
            pointers = [Pointer(EVIDENCE_ARTIFACT, "artifact")]
        else:
            pointers.append(Pointer(("body", "workItemId"), f"item:{state}", "add"))
    return Base(type_, role, variant, actor, _envelope(w, actor, type_, body, **fields),
                m1.mission_id, pointers)


def _group_wide(type_: str, role: str) -> frozenset:
    """What PROTOCOL gives every member of the role on any Mission of the Group: a message
    on any WorkItem's Conversation, a reviewer's Evidence on any submission."""
    if type_ == "conversation.post" or (type_ == "evidence.record" and role == "reviewer"):
        return frozenset({B})
    return frozenset()


def binding_for(w: World, lease: Lease, actor) -> dict:
    return {"critical": True, "agentId": actor.name, "groupId": w.cast.home.group.id,
            "workItemId": lease.item, "sessionEpoch": actor.session_epoch,
            "ownershipEpoch": lease.ownership_epoch, "leaseId": lease.lease_id,
            "disconnectedAt": lease.started_at, "bufferedAt": lease.started_at,
            "graceDeadline": lease.expires_at, "leaseExpiresAt": lease.expires_at,
            "usage": {"tokens": 0}}


BINDING = ("extensions", URN)


def _offline_base(w, type_, role, actor, body) -> Base:
    """A report buffered while the worker was offline, under its live lease of m1's active
    WorkItem, sent now (§11.5)."""
    lease = w.leases["active"]
    document = _envelope(w, actor, type_, body, workItemId=lease.item,
                         extensions={URN: binding_for(w, lease, actor)})
    b = Base(type_, role, "offline", actor, document, w.cast.m1.mission_id, [
        Pointer(ITEM, "item:active"), Pointer((*BINDING, "workItemId"), "item:active"),
        Pointer((*BINDING, "leaseId"), "lease"), Pointer((*BINDING, "groupId"), "group")])
    for state in ("submitted", "blocked"):
        own = w.leases[state]
        moved = _set(_set(document, ITEM, own.item), BINDING, binding_for(w, own, actor))
        b.compounds.append(Mutation(f"envelope and binding -> the sender's own {state} "
                                    f"WorkItem, under its lease there", moved, REFUSE))
    m2 = w.cast.m2
    theirs = Lease(m2.items["active"], w.other_leases["m2"], m2.epoch(m2.items["active"]),
                   lease.started_at, lease.expires_at)
    moved = _set(_set(document, ITEM, theirs.item), BINDING, binding_for(w, theirs, actor))
    b.compounds.append(Mutation("envelope and binding -> another Mission's active WorkItem "
                                "and its lease", moved, REFUSE))
    return b


def _publish_base(w, type_, role, variant, actor) -> Base:
    """The m1 worker's manifest of bytes it uploaded, citing m1's artifact: sent by the
    worker under its lease, or relayed by the Mission's coordinator."""
    m1 = w.cast.m1
    item_id = m1.items["active"]
    body = signed(manifest(m1.worker, m1.mission_id, item_id, m1.unpublished_data,
                           sources=[m1.artifact]), m1.worker)
    fields = {"workItemId": item_id}
    pointers = [Pointer(ITEM, "item:active"), Pointer(MISSION, "mission"),
                Pointer(("body", "workItemId"), "item:active"),
                Pointer(("body", "sources", 0), "artifact"),
                Pointer(("body", "groupId"), "group")]
    if role == "worker":
        lease = m1.lease(item_id)
        fields.update(ownershipEpoch=lease["ownershipEpoch"], leaseId=lease["leaseId"])
        pointers.append(Pointer(LEASE, "lease"))
    return Base(type_, role, variant, actor, _envelope(w, actor, type_, body, **fields),
                m1.mission_id, pointers, resign=lambda body: _resigned(body, m1.worker))


def _package_base(w, type_, role, variant, actor) -> Base:
    m1 = w.cast.m1
    body = package(actor, m1.mission_id, f"pkg-{uuid.uuid4().hex[:12]}",
                   artifacts=[m1.artifact], events=(m1.created_sequence, m1.created_sequence))
    scope = ("body", "scope")
    return Base(type_, role, variant, actor, _envelope(w, actor, type_, body),
                m1.mission_id, [ADD_ITEM, Pointer((*scope, "missionId"), "mission"),
                                Pointer((*scope, "workItemId"), "item:open", "add"),
                                Pointer(("body", "artifacts", 0), "artifact"),
                                Pointer(("body", "id"), "new:package", "create",
                                        frozenset({A, C}))],
                resign=lambda body: _resigned(body, actor))


def _forwarding_base(w, type_, role, variant, actor) -> Base:
    """An owner approves m1's artifact for the other Group; a coordinator of m1 forwards it
    to the third Group, for which it is approved. Both are the Group's (targets.ARTIFACT):
    any owner, any coordinator (member there too) may name another Mission's artifact."""
    c = w.cast
    target = c.other.group.id if type_ == "artifact.approve_forwarding" else c.third.group.id
    body = {"hash": c.m1.artifact, "targetGroupId": target}
    return Base(type_, role, variant, actor, _envelope(w, actor, type_, body), None,
                [ADD_ITEM, Pointer(("body", "hash"), "artifact", free=frozenset({B}))])


def _resigned(body: dict, signer) -> dict:
    return signed({k: v for k, v in body.items() if k != "signature"}, signer)


BUILDERS = {
    "mission.create": _create_base,
    "mission.approve": _mission_base, "mission.refuse_approval": _mission_base,
    "mission.fail": _mission_base, "mission.cancel": _mission_base,
    "work.propose": _mission_base, "work.authorize": _authorize_base,
    "work.fail": _item_base,
    **dict.fromkeys(ITEM_COMMANDS, _item_base),
    "artifact.publish": _publish_base, "context.publish": _package_base,
    "artifact.approve_forwarding": _forwarding_base, "artifact.forward": _forwarding_base,
}


# -- mutations --------------------------------------------------------------------------------

def value(w: World, kind: str, klass: str, current):
    """What a pointer of `kind` is re-pointed at, for class `klass`; None: no such object."""
    c = w.cast
    m2, mb = c.m2, c.mb
    if klass == A:
        if current is None:  # an id of the kind's shape, fresh
            prefix = {"new:mission": "msn", "new:proposal": "prp"}.get(kind, "wi")
            return f"{prefix}_{uuid.uuid4().hex}"
        return fake(str(current))
    if kind.startswith("item:"):
        state = kind.split(":", 1)[1]
        return (m2 if klass == B else mb).items[state]
    return {
        ("mission", B): m2.mission_id, ("mission", C): mb.mission_id,
        ("approvable", B): w.e2.mission_id, ("approvable", C): w.eb.mission_id,
        ("artifact", B): m2.artifact, ("artifact", C): mb.artifact,
        ("proposal", B): m2.proposal_id, ("proposal", C): mb.proposal_id,
        ("lease", B): w.other_leases["m2"], ("lease", C): w.other_leases["mb"],
        ("group", C): c.other.group.id,
        ("new:mission", B): m2.mission_id, ("new:mission", C): mb.mission_id,
        ("new:item", B): m2.items["open"], ("new:item", C): mb.items["open"],
        ("new:proposal", B): m2.proposal_id, ("new:proposal", C): mb.proposal_id,
        ("new:package", B): m2.package_id, ("new:package", C): mb.package_id,
    }.get((kind, klass))


def mutations(w: World, b: Base) -> list:
    found = []
    for pointer in b.pointers:
        current = _get(b.document, pointer.path)
        for klass in CLASSES:
            new = value(w, pointer.kind, klass, current)
            if new is None:
                continue
            document = _set(b.document, pointer.path, new)
            if b.resign is not None and pointer.path[0] == "body":
                document["body"] = b.resign(document["body"])
            verb = {"add": "added", "create": "names"}.get(pointer.mode, "->")
            label = f"{_text(pointer.path)} {verb} {klass} {new}"
            if klass in pointer.free:
                missions = _free_missions(w, b, pointer, klass, new)
                found.append(Mutation(label, document, FREE, missions))
            else:
                found.append(Mutation(label, document, REFUSE))
    return found + b.compounds


def _free_missions(w, b: Base, pointer: Pointer, klass: str, new) -> frozenset:
    """The Missions a `free` mutation's events may name: for a fresh id of what the command
    creates, the base's Mission and what it creates; else the Mission of the object named."""
    if pointer.mode == "create":
        return frozenset(m for m in (b.mission_id, new if "mission" in pointer.kind else None)
                         if m)
    if pointer.kind == "artifact":
        return frozenset()  # a Group-level command: its events name no Mission
    return frozenset({w.cast.m2.mission_id})


def _text(path: tuple) -> str:
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part == URN:
            text += ".<offline binding>"
        else:
            text += ("." if text else "") + part
    return text


def _get(document, path: tuple):
    node = document
    for part in path:
        if isinstance(part, int):
            if not isinstance(node, list) or len(node) <= part:
                return None
        elif not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _set(document: dict, path: tuple, new) -> dict:
    """A deep copy of `document` with `path` set to `new` (dicts made on the way)."""
    document = copy.deepcopy(document)
    node = document
    for part, following in itertools.pairwise(path):
        if isinstance(part, int):
            node = node[part]
            continue
        if part not in node or node[part] is None:
            node[part] = [] if isinstance(following, int) else {}
        node = node[part]
    last = path[-1]
    if isinstance(last, int):
        while len(node) <= last:
            node.append(None)
    node[last] = new
    return document


def fresh(document: dict) -> dict:
    """The envelope with a new command id and issuedAt: each case is a new command."""
    return {**document, "id": f"mut-{uuid.uuid4().hex}", "issuedAt": format_time(now())}


def sign(actor, document: dict) -> dict:
    return signed_by(actor, document)


# -- the oracle -------------------------------------------------------------------------------

def judge(expect: str, missions: frozenset, status: int, answer: dict, moved: bool) -> str:
    """'' when the answer keeps the oracle, else what is wrong."""
    if status >= 500:
        return f"{status}: {str(answer)[:300]}"
    if status == 200:
        if expect == REFUSE:
            return f"passed: {_events(answer)}"
        named = {e.get("missionId") for e in answer.get("events", [])} - {None}
        if not named <= missions:
            return f"passed acting on Missions {sorted(named)}, not {sorted(missions)}"
        return ""
    code = answer.get("error", {}).get("code") if isinstance(answer, dict) else None
    if PROTOCOL_CODES.get(code) != status:
        return f"{status} is not a PROTOCOL refusal: {str(answer)[:300]}"
    if moved:
        return f"refused {code}, but a Group's head moved"
    return ""


def _events(answer: dict) -> str:
    return ", ".join(f"{e['type']}@{e.get('missionId')}/{e.get('workItemId')}"
                     for e in answer.get("events", []))


def code_of(status: int, answer) -> str:
    if status == 200:
        return "200"
    try:
        return answer["error"]["code"]
    except (KeyError, TypeError):
        return str(status)
