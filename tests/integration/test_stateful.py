"""Random command sequences through the HTTP API for one Group, checked after every
step: the log replays to the live projections and the hash chain holds, a WorkItem
never has two open leases, ownership epochs never go back, and a rejected command
appends nothing. Every answer is a 200 or a 4xx with a PROTOCOL code, never a 5xx
(an INTERNAL_ERROR answer is reported; an uncaught exception the test client re-raises).

Each Hypothesis example builds its own Group (fresh slug, fresh agents), so examples
are independent under `transactional_db`. Time is frozen with time-machine for the
whole example and moved forward by a rule; `teardown` always stops it.

The lifecycle is deep (authorize -> offer -> accept -> start -> submit -> accept_result)
and Hypothesis picks rules uniformly, so rules run only while some WorkItem is in a
state they can act on, mostly target such a WorkItem (sometimes any, for the
rejections), and the rarer, destructive commands share one rule each."""

import uuid
from datetime import UTC, datetime, timedelta

import time_machine
from hypothesis import HealthCheck
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

from apps.ledger.models import Event
from apps.ledger.verify import verify_group
from apps.work.models import WorkItem
from mission_weave.protocol.errors import HTTP_STATUS
from mission_weave.protocol.timefmt import format_time
from tests.integration.artifact_helpers import digest, manifest, signed, upload
from tests.support import World, contract, evidence

PROTOCOL_CODES = {code: status for code, status in HTTP_STATUS.items() if status < 500}
DECLINE_REASONS = ["capacity", "deadline", "capability", "authorization", "dependency", "budget"]
POLICIES = ["all_verified", "any_verified", "all_terminal"]
PROGRESS = {"phase": "drafting", "milestones": ["outline"], "blockers": []}
UNFINISHED = ("open", "offered", "queued", "active", "blocked", "submitted")
DRIVABLE = (*UNFINISHED, "failed")
# Events that close the Execution Lease named in their data.leaseId.
CLOSES_LEASE = {"lease.revoked", "lease.expired", "work.checkpointed", "work.blocked",
                "work.submitted"}
# Keep the total travel well inside MW_SESSION_TTL_SECONDS (agents' sessions stay valid).
MAX_TRAVEL_SECONDS = 12 * 3600


def _now() -> datetime:
    return datetime.now(UTC)


def when(*states):
    """Run the rule only while some WorkItem is in one of `states`."""
    return precondition(lambda self: any(s in states for s in self.states.values()))


class GroupMachine(RuleBasedStateMachine):
    """One Group: coordinator, workers w1..w3, a human MissionOwner, a root Mission."""

    items = Bundle("items")

    def __init__(self):
        super().__init__()
        slug = f"st{uuid.uuid4().hex[:10]}"
        self.world = World(slug)
        self.group_id = self.world.group.id
        self.c = self.world.agent(f"c-{slug}", roles=("coordinator",))
        self.workers = [self.world.agent(f"w{n}-{slug}") for n in (1, 2, 3)]
        self.by_name = {w.name: w for w in self.workers}
        self.owner = self.world.human(f"owner-{slug}")
        self.problems = []  # what a step saw that the invariants report
        self.states = {}  # item -> state, as the API showed it after the latest command
        self.last = None  # (actor, envelope, status, answer) of the latest command
        self.epochs = {}  # item -> highest ownership epoch seen in the live table
        self.accepted_epochs = {}  # item -> epoch of its latest work.offer_accepted
        self.open_leases = {}  # item -> lease ids opened and not yet closed, per the log
        self.lease_ids = {}  # item -> every lease id issued (for stale commands)
        self.seen = 0  # the log is folded into the trackers above up to this sequence
        self.root = self.send(self.c, "mission.create", {
            "title": "Stateful", "ownerId": self.owner.principal,
            "coordinatorId": self.c.principal}).json()["events"][0]["missionId"]
        self.missions = [self.root]  # the root and every child Mission created
        self.travelled = 0
        self.traveller = time_machine.travel(_now(), tick=False)
        self.clock = self.traveller.start()

    def teardown(self):
        self.traveller.stop()

    # --- talking to the API --------------------------------------------------------------

    def send(self, actor, type_, body=None, **fields):
        """Submit one command; check the answer's shape and what it did to the head."""
        before = self.world.head
        envelope = actor.envelope(type_, body or {}, **fields)
        response = actor.post(envelope)
        after = self.world.head
        answer = response.json()
        self.last = (actor, envelope, response.status_code, answer)
        where = f"{type_} -> {response.status_code} {answer}"
        if response.status_code == 200:
            sequences = [e["sequence"] for e in answer["events"]]
            if answer["duplicate"] is not False:
                self.problems.append(f"a new command answered duplicate: {where}")
            if sequences != list(range(before + 1, after + 1)):
                self.problems.append(f"head {before}->{after} but events {sequences}: {where}")
        else:
            error = answer.get("error") if isinstance(answer, dict) else None
            code = error.get("code") if isinstance(error, dict) else None
            if PROTOCOL_CODES.get(code) != response.status_code:
                self.problems.append(f"not a PROTOCOL rejection: {where}")
            if after != before:
                self.problems.append(f"a rejected command moved the head {before}->{after}: "
                                     f"{where}")
        self.refresh()
        return response

    def refresh(self):
        response = self.c.get("work-items")
        assert response.status_code == 200, response.json()
        self.states = {row["id"]: row["state"] for row in response.json()["workItems"]}

    def item(self, item_id) -> dict:
        response = self.c.get(f"work-items/{item_id}")
        assert response.status_code == 200, response.json()
        return response.json()

    def target(self, data, item_id, *states) -> str:
        """Mostly a WorkItem the live API shows in one of `states`; sometimes the Bundle's
        pick, whatever its state (the rejections are part of the test)."""
        # In creation order (ids are random; their sort order would make replays differ).
        matching = [i for i, state in self.states.items() if state in states]
        if not matching or data.draw(st.integers(0, 5), label="anyState") == 0:
            return item_id
        return data.draw(st.sampled_from(matching), label="target")

    def addressed(self, data, item):
        """Mostly a worker holding a live offer of the item; sometimes any worker."""
        live = sorted(o["agentId"] for o in item["offers"]
                      if o["status"] == "live" and o["expiresAt"] > format_time(_now()))
        if live and data.draw(st.integers(0, 4), label="addressed") > 0:
            return self.by_name[data.draw(st.sampled_from(live), label="offeree")]
        return data.draw(st.sampled_from(self.workers), label="worker")

    def holder(self, data, item):
        """Mostly the owner (the lease holder while active); sometimes any worker."""
        if item["owner"] in self.by_name and data.draw(st.integers(0, 4), label="holder") > 0:
            return self.by_name[item["owner"]]
        return data.draw(st.sampled_from(self.workers), label="worker")

    def lease_fields(self, data, item_id, item) -> dict:
        """Mostly the current lease and epoch; sometimes a stale or missing lease id or an
        older epoch (fencing must refuse those)."""
        lease = item["lease"]["id"] if item["lease"] else None
        which = data.draw(st.sampled_from(["live"] * 4 + ["stale", "none"]), label="leaseId")
        if which == "stale" and self.lease_ids.get(item_id):
            lease = data.draw(st.sampled_from(self.lease_ids[item_id]), label="staleLease")
        elif which == "none":
            lease = None
        return {"workItemId": item_id, "ownershipEpoch": self.epoch(data, item), "leaseId": lease}

    def deliverable(self, worker, item) -> list:
        """`worker` uploads a deliverable of the item and publishes its manifest (refused
        unless it holds the lease): the hashes its submission can cite (§13.1)."""
        data = f"the deliverable of {item['id']}, {uuid.uuid4().hex}".encode()
        upload(worker, data)
        lease = item["lease"]["id"] if item["lease"] else None
        response = self.send(worker, "artifact.publish",
                             signed(manifest(worker, item["missionId"], item["id"], data), worker),
                             workItemId=item["id"], ownershipEpoch=item["ownershipEpoch"],
                             leaseId=lease)
        return [digest(data)] if response.status_code == 200 else []

    def epoch(self, data, item) -> int:
        return max(item["ownershipEpoch"] - data.draw(st.sampled_from([0, 0, 0, 1]),
                                                      label="olderEpoch"), 0)

    def revision(self, data, item) -> int:
        return max(item["contractRevision"] - data.draw(st.sampled_from([0, 0, 0, 1]),
                                                        label="olderRevision"), 1)

    def new_contract(self, data, mission_id) -> dict:
        """A valid contract; sometimes depending on WorkItems of the same Mission (which
        may close a cycle on revision), sometimes needing execution approval."""
        siblings = self.c.get(f"missions/{mission_id}").json()["workItems"]
        deps = []
        if siblings and data.draw(st.integers(0, 3), label="hasDeps") == 0:
            deps = data.draw(st.lists(st.sampled_from(siblings), min_size=1, max_size=2,
                                      unique=True), label="dependsOn")
        criteria = data.draw(st.integers(1, 3), label="criteria")
        approval = data.draw(st.integers(0, 4), label="approval") == 0
        return contract(
            goal=data.draw(st.sampled_from(["Summarize", "Translate", "Review"]), label="goal"),
            acceptanceCriteria=[{"id": f"ac{n}", "description": f"criterion {n}"}
                                for n in range(1, criteria + 1)],
            dependencies={"workItems": deps,
                          "policy": data.draw(st.sampled_from(POLICIES), label="policy")},
            risk={"class": "high" if approval else "low", "requiresExecutionApproval": approval})

    # --- the happy path ---------------------------------------------------------------------

    @when(*DRIVABLE)
    @rule(data=st.data())
    def drive(self, data):
        """Move the unfinished WorkItems (each with probability 3/4) up to three steps along
        the happy path, with the right fields: offer -> accept -> [approve] -> start ->
        submit -> accept_result; an open ambiguity is resolved, a blocked item unblocked,
        an owner whose time ran out is fenced by a new offer. The other rules perturb."""
        steps = data.draw(st.integers(1, 3), label="steps")
        for item_id in [i for i, state in self.states.items() if state in DRIVABLE]:
            if data.draw(st.integers(0, 3), label="skip") == 0:
                continue
            for _ in range(steps):
                item = self.item(item_id)
                if item["state"] not in DRIVABLE:
                    break
                actor, type_, body, fields = self.next_step(item)
                if self.send(actor, type_, body, **fields).status_code != 200:
                    break

    def next_step(self, item) -> tuple:
        """(actor, type, body, fields...) of the natural next command for `item`."""
        item_id, state, now = item["id"], item["state"], format_time(_now())
        live = [o["agentId"] for o in item["offers"]
                if o["status"] == "live" and o["expiresAt"] > now]
        owner = self.by_name.get(item["owner"])
        lease = item["lease"]
        offer = (self.c, "work.offer", {
            "candidates": list(self.by_name), "mode": "urgent",
            "expiresAt": format_time(_now() + timedelta(seconds=900))}, {"workItemId": item_id})
        if item["openAmbiguities"] and state in ("open", "offered", "queued"):
            # §10.1: the Coordinator resolves it with a corrected contract, not with prose.
            return (self.c, "work.revise_contract", {"contract": {
                **item["contract"], "goal": f"{item['contract']['goal']} (Q3)",
                "revision": item["contractRevision"] + 1}}, {"workItemId": item_id})
        if state == "offered" and live:
            return (self.by_name[live[0]], "work.accept_offer",
                    {"contractRevision": item["contractRevision"]}, {"workItemId": item_id})
        if state == "queued" and owner and item["startBy"] and item["startBy"] > now:
            fields = {"workItemId": item_id}
            if item["acceptedContractRevision"] != item["contractRevision"]:
                return (owner, "work.accept_offer",
                        {"contractRevision": item["contractRevision"]}, fields)
            if (item["contract"]["risk"]["requiresExecutionApproval"]
                    and not item["executionApproved"]):
                return (self.owner, "approval.grant_execution", {}, fields)
            return (owner, "work.start", {}, {**fields, "ownershipEpoch": item["ownershipEpoch"]})
        if state == "active" and owner and lease and lease["expiresAt"] > now:
            criteria = [c["id"] for c in item["contract"]["acceptanceCriteria"]]
            return (owner, "work.submit", {
                "contractRevision": item["contractRevision"],
                "artifacts": self.deliverable(owner, item),
                "evidence": [evidence(criteria, producer=owner.principal)]},
                {"workItemId": item_id, "ownershipEpoch": item["ownershipEpoch"],
                 "leaseId": lease["id"]})
        if state == "submitted":  # no review runs here: the Coordinator answers for it
            criteria = [c["id"] for c in item["contract"]["acceptanceCriteria"]]
            return (self.c, "work.accept_result", {
                "evidence": [evidence(criteria, producer=self.c.principal)]},
                {"workItemId": item_id})
        if state == "blocked":
            return (self.c, "work.unblock", {"resolution": "resolved"}, {"workItemId": item_id})
        return offer

    # --- authorizing and revising ----------------------------------------------------------

    @initialize(target=items)
    def first_items(self):
        """Two WorkItems, one offered urgently to every worker: the lifecycle rules have
        something to act on from the first step."""
        ids = [self.send(self.c, "work.authorize", {"missionId": self.root,
                                                     "contract": contract()}).json()
               ["events"][0]["workItemId"] for _ in range(2)]
        self.send(self.c, "work.offer", {
            "candidates": list(self.by_name), "mode": "urgent",
            "expiresAt": format_time(_now() + timedelta(seconds=900))}, workItemId=ids[0])
        return multiple(*ids)

    @rule(target=items, data=st.data())
    def authorize(self, data):
        mission_id = data.draw(st.sampled_from(self.missions), label="mission")
        response = self.send(self.c, "work.authorize", {
            "missionId": mission_id, "contract": self.new_contract(data, mission_id)})
        if response.status_code != 200:
            return multiple()
        return response.json()["events"][0]["workItemId"]

    @when("open", "offered", "queued", "blocked", "failed")
    @rule(item_id=items, data=st.data())
    def revise_contract(self, item_id, data):
        item_id = self.target(data, item_id, "open", "offered", "queued", "blocked", "failed")
        mission_id = self.item(item_id)["missionId"]
        self.send(self.c, "work.revise_contract",
                  {"contract": self.new_contract(data, mission_id)}, workItemId=item_id)

    # --- offers ----------------------------------------------------------------------------

    @when("open", "offered", "failed", "queued", "blocked", "active")
    @rule(item_id=items, data=st.data())
    def offer(self, item_id, data):
        item_id = self.target(data, item_id, "open", "offered", "failed", "queued", "blocked",
                              "active")
        names = data.draw(st.lists(st.sampled_from(list(self.by_name)), min_size=1, max_size=3,
                                   unique=True), label="candidates")
        if data.draw(st.integers(0, 9), label="addCoordinator") == 0:
            names.append(self.c.name)  # not a worker: VALIDATION_ERROR
        seconds = data.draw(st.sampled_from([30, 300, 900, 3000]), label="offerSeconds")
        body = {"candidates": names,
                "mode": data.draw(st.sampled_from(["sequential", "urgent"]), label="mode"),
                "expiresAt": format_time(_now() + timedelta(seconds=seconds))}
        if data.draw(st.booleans(), label="startWithin"):
            body["startWithinSeconds"] = data.draw(st.sampled_from([60, 600, 3000]), label="sw")
        self.send(self.c, "work.offer", body, workItemId=item_id)

    @when("offered", "queued")
    @rule(item_id=items, data=st.data())
    def accept(self, item_id, data):
        item_id = self.target(data, item_id, "offered", "queued")
        item = self.item(item_id)
        self.send(self.addressed(data, item), "work.accept_offer",
                  {"contractRevision": self.revision(data, item)}, workItemId=item_id)

    @when("offered")
    @rule(item_id=items, data=st.data())
    def decline(self, item_id, data):
        item_id = self.target(data, item_id, "offered")
        worker = self.addressed(data, self.item(item_id))
        self.send(worker, "work.decline_offer",
                  {"reason": data.draw(st.sampled_from(DECLINE_REASONS), label="reason")},
                  workItemId=item_id)

    # --- execution -------------------------------------------------------------------------

    @when("queued")
    @rule(item_id=items, data=st.data())
    def start(self, item_id, data):
        """work.start; an item that needs execution approval mostly gets it first."""
        item_id = self.target(data, item_id, "queued")
        item = self.item(item_id)
        if (item["contract"]["risk"]["requiresExecutionApproval"] and
                data.draw(st.integers(0, 3), label="grant") > 0):
            self.send(self.owner, "approval.grant_execution", {"comment": "go"},
                      workItemId=item_id)
        body = {}
        if data.draw(st.booleans(), label="leaseSeconds"):
            body["leaseSeconds"] = data.draw(st.sampled_from([30, 300, 1200]), label="ls")
        self.send(self.holder(data, item), "work.start", body, workItemId=item_id,
                  ownershipEpoch=self.epoch(data, item))

    @when("active")
    @rule(item_id=items, data=st.data())
    def renew_or_progress(self, item_id, data):
        item_id = self.target(data, item_id, "active")
        item = self.item(item_id)
        if data.draw(st.booleans(), label="renew"):
            type_, body = "lease.renew", {"leaseSeconds": data.draw(st.sampled_from([60, 600]),
                                                                    label="ls")}
        else:
            type_, body = "work.progress", PROGRESS
        self.send(self.holder(data, item), type_, body, **self.lease_fields(data, item_id, item))

    @when("active")
    @rule(item_id=items, data=st.data())
    def checkpoint(self, item_id, data):
        item_id = self.target(data, item_id, "active")
        item = self.item(item_id)
        self.send(self.holder(data, item), "work.checkpoint", {"progress": PROGRESS},
                  **self.lease_fields(data, item_id, item))

    @when("active")
    @rule(item_id=items, data=st.data())
    def block(self, item_id, data):
        item_id = self.target(data, item_id, "active")
        item = self.item(item_id)
        body = {"checkpoint": {"progress": PROGRESS}, "requiredResolution": "needs credentials"}
        if data.draw(st.booleans(), label="blockedLease"):
            body["blockedLeaseSeconds"] = data.draw(st.sampled_from([60, 3600]), label="bls")
        self.send(self.holder(data, item), "work.block", body,
                  **self.lease_fields(data, item_id, item))

    @when("blocked")
    @rule(item_id=items, data=st.data())
    def unblock(self, item_id, data):
        item_id = self.target(data, item_id, "blocked")
        self.send(self.c, "work.unblock", {"resolution": "credentials granted"},
                  workItemId=item_id)

    @when("active")
    @rule(item_id=items, data=st.data())
    def submit(self, item_id, data):
        """Evidence for every acceptance criterion, or for all but one."""
        item_id = self.target(data, item_id, "active")
        item = self.item(item_id)
        worker = self.holder(data, item)
        criteria = [c["id"] for c in item["contract"]["acceptanceCriteria"]]
        if data.draw(st.integers(0, 3), label="partialEvidence") == 0:
            criteria = criteria[:-1]
        records = [evidence(criteria, producer=worker.principal)] if criteria else []
        artifacts = self.deliverable(worker, item)
        self.send(worker, "work.submit",
                  {"contractRevision": self.revision(data, item), "artifacts": artifacts,
                   "evidence": records}, **self.lease_fields(data, item_id, item))

    @when("submitted")
    @rule(item_id=items, data=st.data())
    def accept_result(self, item_id, data):
        item_id = self.target(data, item_id, "submitted")
        criteria = [c["id"] for c in self.item(item_id)["contract"]["acceptanceCriteria"]]
        self.send(self.c, "work.accept_result", {"evidence": [
            evidence(criteria, producer=self.c.principal)]}, workItemId=item_id)

    @when(*UNFINISHED)
    @rule(item_id=items, data=st.data())
    def take_away(self, item_id, data):
        """work.fail (coordinator or lease holder), work.cancel, or mission.create_child."""
        item_id = self.target(data, item_id, *UNFINISHED)
        item = self.item(item_id)
        how = data.draw(st.sampled_from(["fail", "worker_fail", "cancel", "child"]), label="how")
        if how == "fail":
            self.send(self.c, "work.fail",
                      {"evidence": [evidence(["ac1"], producer=self.c.principal, result="fail")],
                       "reason": "reassigning"}, workItemId=item_id)
        elif how == "worker_fail":
            worker = self.holder(data, item)
            self.send(worker, "work.fail",
                      {"evidence": [evidence(["ac1"], producer=worker.principal, result="fail")],
                       "reason": "tool crashed"}, **self.lease_fields(data, item_id, item))
        elif how == "cancel":
            self.send(self.c, "work.cancel", {"reason": "no longer needed"}, workItemId=item_id)
        else:
            policy = data.draw(st.sampled_from(["block", "fail"]), label="childFailurePolicy")
            response = self.send(self.c, "mission.create_child",
                                 {"title": "Sub-mission", "childFailurePolicy": policy},
                                 workItemId=item_id)
            if response.status_code == 200:
                self.missions += [e["data"]["childMissionId"] for e in response.json()["events"]
                                  if e["type"] == "mission.child_created"]

    # --- the WorkItem Conversation ---------------------------------------------------------

    @when("open", "offered", "queued")
    @rule(item_id=items, data=st.data())
    def converse(self, item_id, data):
        """A worker raises an essential ambiguity, or the coordinator answers one in prose
        (a `resolution` message, which leaves it open: only a revision clears it)."""
        item_id = self.target(data, item_id, "open", "offered", "queued")
        open_ = self.item(item_id)["openAmbiguities"]
        if not open_ or data.draw(st.booleans(), label="raise"):
            worker = data.draw(st.sampled_from(self.workers), label="worker")
            self.send(worker, "conversation.post",
                      {"kind": "ambiguity", "text": "Which quarter is meant?"}, workItemId=item_id)
        else:
            resolves = data.draw(st.sampled_from([*open_, "msg_unknown"]), label="resolves")
            self.send(self.c, "conversation.post",
                      {"kind": "resolution", "text": "Q3", "resolves": resolves},
                      workItemId=item_id)

    # --- child Missions --------------------------------------------------------------------

    @precondition(lambda self: len(self.missions) > 1)
    @rule(data=st.data())
    def end_child(self, data):
        """The owner approves a child Mission (its parent WorkItem is verified) or the
        coordinator fails it (the parent blocks or fails, by its policy)."""
        mission_id = data.draw(st.sampled_from(self.missions[1:]), label="child")
        if data.draw(st.integers(0, 2), label="approve") > 0:
            self.send(self.owner, "mission.approve", {"missionId": mission_id, "comment": "ok"})
        else:
            self.send(self.c, "mission.fail", {"missionId": mission_id, "reason": "dead end"})

    # --- time, sessions, retries -----------------------------------------------------------

    @rule(seconds=st.sampled_from([1, 45, 200, 400, 700, 1500, 4000]))
    def advance_time(self, seconds):
        """Offers, start-by deadlines, leases and blocked leases run out."""
        if self.travelled + seconds <= MAX_TRAVEL_SECONDS:
            self.travelled += seconds
            self.clock.shift(timedelta(seconds=seconds))

    @rule(data=st.data())
    def disrupt(self, data):
        """A worker opens a replacement session (its leases are revoked by a `system`
        append), or the latest command is sent again with the same id."""
        if self.last is None or data.draw(st.booleans(), label="reopen"):
            worker = data.draw(st.sampled_from(self.workers), label="worker")
            assert worker.open_session().status_code == 201
            self.refresh()
            return
        actor, envelope, status, answer = self.last
        before = self.world.head
        response = actor.post(envelope)
        body = response.json()
        where = f"resent {envelope['type']} -> {response.status_code} {body}"
        if self.world.head != before:
            self.problems.append(f"a resent command moved the head: {where}")
        if response.status_code == 401 and body["error"]["code"] in ("CLOCK_SKEW",
                                                                     "STALE_SESSION"):
            return  # the envelope itself went stale (time moved, session replaced)
        expected = dict(answer, duplicate=True) if status == 200 else answer
        if (response.status_code, body) != (status, expected):
            self.problems.append(f"a resent command got a different answer: {where}")

    # --- invariants ------------------------------------------------------------------------

    @invariant()
    def steps_were_clean(self):
        assert self.problems == []

    @invariant()
    def log_replays_to_the_projections(self):
        assert verify_group(self.group_id) == []

    @invariant()
    def one_open_lease_and_monotonic_epochs(self):
        for event in Event.objects.filter(group_id=self.group_id,
                                          sequence__gt=self.seen).order_by("sequence"):
            self.seen = event.sequence
            item_id, data = event.work_item_id, event.data
            open_ = self.open_leases.setdefault(item_id, set())
            if event.type == "work.started":
                open_.add(data["leaseId"])
                self.lease_ids.setdefault(item_id, []).append(data["leaseId"])
            elif event.type in CLOSES_LEASE:
                assert data["leaseId"] in open_, f"#{event.sequence} {event.type}: lease not open"
                open_.discard(data["leaseId"])
            elif event.type == "lease.renewed":
                assert data["leaseId"] in open_, f"#{event.sequence} renews a lease not open"
            elif event.type == "work.offer_accepted":
                previous = self.accepted_epochs.get(item_id, 0)
                assert data["ownershipEpoch"] > previous, (item_id, previous, data)
                self.accepted_epochs[item_id] = data["ownershipEpoch"]
            assert len(open_) <= 1, f"WorkItem {item_id} has open leases {open_}"
        for row in WorkItem.objects.filter(group_id=self.group_id):
            open_ = self.open_leases.get(row.work_item_id, set())
            assert row.lease_id == (min(open_) if open_ else None), (row.work_item_id,
                                                                     row.lease_id, open_)
            assert not open_ or row.state == "active", (row.work_item_id, row.state, open_)
            previous = self.epochs.get(row.work_item_id, 0)
            assert row.ownership_epoch >= previous, (row.work_item_id, previous,
                                                     row.ownership_epoch)
            self.epochs[row.work_item_id] = row.ownership_epoch


def test_random_command_sequences(transactional_db, settings):
    run_state_machine_as_test(GroupMachine, settings=hsettings(
        max_examples=25, stateful_step_count=30, deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]))
