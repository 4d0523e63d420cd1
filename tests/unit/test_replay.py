"""Random command sequences through decide + evolve on an in-memory View, with the
invariants of §10.2/§11.3 checked after every step (hypothesis)."""

import hashlib
import json
from datetime import timedelta

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from mission_weave.core import commands, lifecycle, state, state_documents
from mission_weave.core.evolve import evolve
from mission_weave.core.state import Event
from mission_weave.protocol.canonical import public_key_b64url, sign
from mission_weave.protocol.errors import ProtocolError
from mission_weave.protocol.timefmt import format_time
from tests.unit import builders
from tests.unit.builders import COORDINATOR, HUMAN, MISSION_ID, T0, contract, evidence, progress

WORKERS = ("w1", "w2", "w3")
KEYS = {w: Ed25519PrivateKey.generate() for w in WORKERS}  # each worker's signing key
GROUP = "grp_replay"
ITEMS = ("wi_a", "wi_b", "wi_c")  # wi_b depends on wi_a; wi_c needs execution approval
ROLES = {COORDINATOR: {"coordinator"}, HUMAN: {"owner"},
         **{f"agent:{w}": {"worker"} for w in WORKERS}}


class World:
    """The Group as the shell would hold it: the View, the time and the agents' sessions."""

    def __init__(self):
        self.view = state.View()
        self.now = T0
        self.sessions = dict.fromkeys(WORKERS, 1)
        self.counter = 0
        self.log = []  # every Event appended, in order

    def command(self, command_type, body, actor, item=None, **fields) -> commands.Command:
        self.counter += 1
        values = dict(id=f"cmd-{self.counter}", type=command_type, actor=actor, body=body,
                      roles=frozenset(ROLES[actor]))
        if item is not None:
            values.update(work_item_id=item.id, ownership_epoch=item.ownership_epoch,
                          lease_id=item.lease.id if item.lease else None)
        if actor.startswith("agent:w"):
            values["session_epoch"] = self.sessions[actor[len("agent:"):]]
        values.update(fields)
        return commands.Command(**values)

    def append(self, drafts) -> None:
        for draft in drafts:
            event = Event(draft.type, draft.data, self.now, draft.mission_id, draft.work_item_id)
            self.log.append(event)
            evolve(self.view, event)

    def decide(self, command) -> None:
        self.append(commands.decide(self.view, command, commands.Context(
            now=self.now, candidates=builders.CANDIDATES, facts=self.facts(command))))

    def facts(self, command) -> dict:
        """What the shell would look up: the roles mission.create names, and for an
        artifact.publish the producer's key and the uploaded blob."""
        if command.type == "artifact.publish":
            return {"groupId": GROUP, "producerKey": public_key_b64url(KEYS[command.agent_id]),
                    "producerCardVersions": ["1"], "blob": {"size": 42, "corrupted": False}}
        return {"roles": ROLES}


def setup_world() -> World:
    world = World()
    world.decide(world.command("mission.create", {
        "missionId": MISSION_ID, "title": "Quarterly report", "ownerId": HUMAN,
        "coordinatorId": COORDINATOR}, COORDINATOR))
    for item_id, extra in (
            ("wi_a", {}),
            ("wi_b", {"dependencies": {"workItems": ["wi_a"], "policy": "all_verified"}}),
            ("wi_c", {"risk": {"class": "high", "requiresExecutionApproval": True}})):
        world.decide(world.command("work.authorize", {
            "workItemId": item_id, "missionId": MISSION_ID, "contract": contract(**extra)},
            COORDINATOR))
    return world


# --- one builder per action: (world, item, worker, variant) -> Command or drafts ----------
# `variant` is "right" (the agent the item expects: its owner, else its first live offer),
# "other" (the drawn worker, whoever it is) or "stale" (the right agent, delayed: the
# previous ownership epoch and a lease id of the past).

def _agent_for(world, item, worker, variant) -> str:
    offered = [o.agent_id for o in item.live_offers(world.now)]
    expected = item.owner or (offered[0] if offered else worker)
    return worker if variant == "other" else expected


def _worker_cmd(command_type, body_of):
    def build(world, item, worker, variant):
        agent = _agent_for(world, item, worker, variant)
        stale = {"ownership_epoch": item.ownership_epoch - 1, "lease_id": "lease_old"}
        return world.command(command_type, body_of(world, item), f"agent:{agent}", item,
                             **(stale if variant == "stale" else {}))
    return build


def _coordinator_cmd(command_type, body_of):
    def build(world, item, worker, variant):
        return world.command(command_type, body_of(world, item), COORDINATOR, item)
    return build


def _offer_body(mode):
    def body(world, item):
        return {"candidates": list(WORKERS), "mode": mode,
                "expiresAt": format_time(world.now + timedelta(seconds=900))}
    return body


def _revision(world, item):
    return {"contractRevision": item.contract_revision}


def _submit_body(world, item):
    published = [h for h, r in world.view.artifacts.items()
                 if r["manifest"]["workItemId"] == item.id]
    return {"contractRevision": item.contract_revision, "artifacts": published[-1:],
            "evidence": [evidence(item.criteria_ids)]}


def _publish(world, item, worker, variant):
    """The lease holder publishes its deliverable's signed manifest (§13.1)."""
    agent = _agent_for(world, item, worker, variant)
    data_hash = "sha256:" + hashlib.sha256(f"{item.id}/{world.counter}".encode()).hexdigest()
    manifest = sign({
        "hash": data_hash, "mediaType": "text/markdown", "schema": None, "size": 42,
        "producer": agent,
        "agentCardVersion": "1", "missionId": item.mission_id, "groupId": GROUP,
        "workItemId": item.id, "sources": [],
        "versions": {"tool": "t", "model": "m", "capability": "c"},
        "createdAt": format_time(world.now),
        "classification": "internal", "uri": f"mw://{data_hash}"}, KEYS[agent], f"{agent}#1")
    return world.command("artifact.publish", manifest, f"agent:{agent}", item)


def _resolve_body(world, item):
    return {"kind": "resolution", "resolves": (item.open_ambiguities or ("none",))[0],
            "text": "resolved"}


def _grant(world, item, worker, variant):
    return world.command("approval.grant_execution", {}, HUMAN, item)


def _child_mission_command(command_type):
    def build(world, item, worker, variant):
        child = item.child_mission_id or "msn_none"
        actor = HUMAN if command_type == "mission.approve" else COORDINATOR
        return world.command(command_type, {"missionId": child}, actor)
    return build


def _new_session(world, item, worker, variant):
    """Opening a replacement session revokes the agent's leases (§11.3)."""
    world.sessions[worker] += 1
    return commands.revoke_for_session(world.view, worker, world.now, commands.Policy())


def _sweep(world, item, worker, variant):
    """What the sweeper appends as `system` (PROTOCOL §2): an expired lease, an owner that
    missed its start-by deadline or outlived its blocked lease."""
    drafts = []
    if item.state == state.ACTIVE and item.live_lease and world.now >= item.lease.expires_at:
        drafts.append(commands.Draft("lease.expired", {"leaseId": item.lease.id,
                                                       "reason": "timeout"},
                                     item.mission_id, item.id))
    deadline = {state.QUEUED: item.start_by, state.BLOCKED: item.blocked_until}.get(item.state)
    if item.owner and deadline is not None and world.now >= deadline:
        drafts.append(commands.Draft("work.ownership_expired", {
            "agentId": item.owner, "ownershipEpoch": item.ownership_epoch, "reason": "sweep"},
            item.mission_id, item.id))
    return drafts


ACTIONS = {
    "offer_sequential": _coordinator_cmd("work.offer", _offer_body("sequential")),
    "offer_urgent": _coordinator_cmd("work.offer", _offer_body("urgent")),
    "accept": _worker_cmd("work.accept_offer", _revision),
    "decline": _worker_cmd("work.decline_offer", lambda w, i: {"reason": "capacity"}),
    "grant": _grant,
    "start": _worker_cmd("work.start", lambda w, i: {}),
    "renew": _worker_cmd("lease.renew", lambda w, i: {"leaseSeconds": 200}),
    "progress": _worker_cmd("work.progress", lambda w, i: progress()),
    "checkpoint": _worker_cmd("work.checkpoint", lambda w, i: {"progress": progress()}),
    "block": _worker_cmd("work.block", lambda w, i: {
        "checkpoint": {"progress": progress()}, "requiredResolution": "input",
        "blockedLeaseSeconds": 500}),
    "publish": _publish,
    "submit": _worker_cmd("work.submit", _submit_body),
    "worker_fail": _worker_cmd("work.fail", lambda w, i: {"evidence": [evidence(["ac1"])]}),
    "ambiguity": _worker_cmd("conversation.post", lambda w, i: {"kind": "ambiguity",
                                                               "text": "which quarter?"}),
    "resolve": _coordinator_cmd("conversation.post", _resolve_body),
    "unblock": _coordinator_cmd("work.unblock", lambda w, i: {"resolution": "done"}),
    # No review runs here: the Coordinator accepts with Evidence for every criterion.
    "accept_result": _coordinator_cmd("work.accept_result", lambda w, i: {"evidence": [
        evidence(list(i.criteria_ids), producer=COORDINATOR)]}),
    "fail": _coordinator_cmd("work.fail", lambda w, i: {"evidence": [
        evidence(["ac1"], producer=COORDINATOR)]}),
    "cancel": _coordinator_cmd("work.cancel", lambda w, i: {}),
    "revise": _coordinator_cmd("work.revise_contract", lambda w, i: {
        "contract": {**i.contract, "goal": f"revised {i.contract_revision}",
                     "revision": i.contract_revision + 1}}),
    "preempt": _coordinator_cmd("work.request_preemption", lambda w, i: {}),
    "create_child_block": _coordinator_cmd("mission.create_child", lambda w, i: {
        "title": "sub-work", "childFailurePolicy": "block"}),
    "create_child_fail": _coordinator_cmd("mission.create_child", lambda w, i: {
        "title": "sub-work", "childFailurePolicy": "fail"}),
    "approve_child": _child_mission_command("mission.approve"),
    "fail_child": _child_mission_command("mission.fail"),
    "new_session": _new_session,
    "sweep": _sweep,
}

# Most steps are guided: an action that makes sense for the item's state (it may still be
# refused: expired offers and leases, stale variants, unmet dependencies, ...). The rest
# are any action at all, which the §10.2 table must refuse or handle.
GUIDED = {
    state.OPEN: ["offer_sequential", "offer_urgent", "offer_urgent", "revise"],
    state.OFFERED: ["accept", "accept", "decline", "ambiguity", "offer_urgent", "revise"],
    state.QUEUED: ["start", "start", "grant", "accept", "sweep", "offer_sequential"],
    state.ACTIVE: ["renew", "progress", "checkpoint", "block", "publish", "submit", "submit",
                   "worker_fail", "preempt", "sweep", "offer_urgent"],
    state.BLOCKED: ["unblock", "unblock", "sweep", "offer_sequential", "approve_child",
                    "fail_child"],
    state.SUBMITTED: ["accept_result", "accept_result", "fail", "cancel"],
    state.VERIFIED: ["ambiguity"],
    state.FAILED: ["offer_sequential", "revise"],
    state.CANCELLED: ["ambiguity"],
}
ANY = sorted(ACTIONS)
assert set(GUIDED) == set(lifecycle.STATES) - {lifecycle.NONE, lifecycle.PROPOSAL}
assert {a for actions in GUIDED.values() for a in actions} <= set(ACTIONS)

STEPS = st.lists(st.tuples(st.integers(0, 999), st.sampled_from([True, True, True, False]),
                           st.sampled_from(ITEMS), st.sampled_from(WORKERS),
                           st.sampled_from([0, 10, 60, 200, 700]),
                           st.sampled_from(["right", "right", "right", "other", "stale"])),
                 min_size=20, max_size=60)


def pick(choice: int, guided: bool, item) -> str:
    actions = GUIDED[item.state] if guided else ANY
    return actions[choice % len(actions)]


# --- invariants ----------------------------------------------------------------------------------

def check_invariants(view, leases_seen: dict, epochs: dict) -> None:
    for item in view.items.values():
        assert item.state in lifecycle.STATES
        if item.lease is not None:
            leases_seen.setdefault(item.id, {})[item.lease.id] = item.lease
        open_leases = [lease for lease in leases_seen.get(item.id, {}).values() if lease.is_open]
        assert len(open_leases) <= 1, f"{item.id} has open leases {open_leases}"
        assert item.live_lease is None or item.state == state.ACTIVE
        if item.state == state.ACTIVE:
            assert item.lease is not None
            assert item.lease.is_open or item.lease.close_reason == "expired"
        if item.live_lease is not None:  # an open lease belongs to the current ownership
            assert (item.live_lease.agent_id, item.live_lease.ownership_epoch) == (
                item.owner, item.ownership_epoch)
        if item.state in (state.OPEN, state.OFFERED, state.FAILED, state.CANCELLED):
            assert item.owner is None, f"{item.id} is {item.state} but owned by {item.owner}"
        child = view.missions.get(item.child_mission_id)
        if child is not None and child.state == state.MISSION_ACTIVE:
            # "Ownership is fenced while the linked child Mission runs" (§10.2).
            assert item.state == state.BLOCKED, f"{item.id} is {item.state} while {child.id} runs"
        assert item.ownership_epoch >= epochs.get(item.id, 0)
        epochs[item.id] = item.ownership_epoch
        doc = json.loads(json.dumps(state_documents.to_doc(item)))
        assert state_documents.item_from_doc(doc) == item
    for mission in view.missions.values():
        doc = json.loads(json.dumps(state_documents.to_doc(mission)))
        assert state_documents.mission_from_doc(doc) == mission


@settings(max_examples=100, deadline=None)
@given(STEPS)
def test_random_command_sequences_keep_the_invariants(steps):
    world = setup_world()
    leases_seen, epochs = {}, {}
    check_invariants(world.view, leases_seen, epochs)
    for choice, guided, item_id, worker, advance, variant in steps:
        world.now += timedelta(seconds=advance)
        before = world.view.copy()
        item = world.view.items[item_id]
        outcome = ACTIONS[pick(choice, guided, item)](world, item, worker, variant)
        try:
            drafts = (outcome if isinstance(outcome, list) else
                      commands.decide(world.view, outcome, commands.Context(
                          now=world.now, candidates=builders.CANDIDATES,
                          facts=world.facts(outcome))))
        except ProtocolError:
            assert world.view.items == before.items  # a rejection changes nothing
            assert world.view.missions == before.missions
            continue
        world.append(drafts)
        check_invariants(world.view, leases_seen, epochs)
    # Replay equals projection: the log alone rebuilds the same state (what mw_verify checks).
    replayed = state.View()
    for event in world.log:
        evolve(replayed, event)
    assert replayed.items == world.view.items
    assert replayed.missions == world.view.missions


def test_a_scripted_run_reaches_verified_through_the_same_machinery():
    """The happy path, so the random test is known to be able to get deep."""
    world = setup_world()
    script = ["offer_sequential", "accept", "start", "renew", "checkpoint", "start", "publish",
              "submit", "accept_result"]
    for action in script:
        world.now += timedelta(seconds=30)
        world.decide(ACTIONS[action](world, world.view.items["wi_a"], "w1", "right"))

    item = world.view.items["wi_a"]
    assert item.state == state.VERIFIED
    assert item.ownership_epoch == 1
    assert item.lease_count == 2
    assert item.attempts == 1  # the start after the checkpoint resumes the attempt (§11.4)
