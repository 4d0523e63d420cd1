"""Bounded offline execution (§11.5), through HTTP on PostgreSQL: a command buffered while the
Group service was unreachable, rebased onto the reconnected session and carrying the binding,
is checked against the server's record of the historical lease, charged its offline usage
first and applied, in one transaction; every refusal appends nothing."""

from datetime import timedelta

import pytest

from apps.ledger import pipeline
from apps.ledger.verify import verify_group
from apps.work import sweeper
from mission_weave.core import offline_binding, state
from mission_weave.protocol.timefmt import format_time, parse_time
from tests.support import Scenario, assert_error, evidence, later, now

URN = offline_binding.URN
PROGRESS = {"phase": "drafting offline", "milestones": ["outline"]}
ZERO = {"tokens": 0}


@pytest.fixture
def s(db, clock):
    return Scenario()


class Offline:
    """A worker's item started at t0, and the commands it buffered offline under that
    lease: disconnected at t0+30, buffered at t0+60 unless a test says otherwise."""

    def __init__(self, s, worker=None, **contract_overrides):
        self.s, self.worker = s, worker or s.w1
        self.item_id, self.started = s.running(self.worker, **contract_overrides)
        self.session_epoch = self.worker.session_epoch
        self.t0 = now()

    def binding(self, buffered=60, usage=None, **overrides) -> dict:
        expires = parse_time(self.started["expiresAt"])
        binding = {"critical": True, "agentId": self.worker.name, "groupId": self.s.world.group.id,
                   "workItemId": self.item_id, "sessionEpoch": self.session_epoch,
                   "ownershipEpoch": self.started["ownershipEpoch"],
                   "leaseId": self.started["leaseId"],
                   "disconnectedAt": format_time(self.t0 + timedelta(seconds=30)),
                   "bufferedAt": format_time(self.t0 + timedelta(seconds=buffered)),
                   "graceDeadline": format_time(expires + timedelta(seconds=300)),
                   "leaseExpiresAt": self.started["expiresAt"],
                   "usage": usage if usage is not None else {"tokens": 120, "toolCalls": 2}}
        binding.update(overrides)
        return binding

    def envelope(self, type_="work.progress", body=None, binding=None, **fields) -> dict:
        fields.setdefault("workItemId", self.item_id)
        return self.worker.envelope(type_, PROGRESS if body is None else body,
                                    extensions={URN: binding or self.binding()}, **fields)

    def send(self, *args, **kwargs):
        return self.worker.post(self.envelope(*args, **kwargs))


def went_offline(s, clock, reconnect=True, **kwargs) -> Offline:
    """An Offline worker back at t0+90, reconnected (a new session revokes the lease)."""
    o = Offline(s, **kwargs)
    later(clock, 90)
    if reconnect:
        assert o.worker.open_session().status_code == 201
    return o


def assert_refused(s, send, status, code) -> dict:
    """The refusal, nothing appended by it, and the log still replays to the projections."""
    head = s.world.head
    error = assert_error(send(), status, code)
    assert s.world.head == head, "a refused buffered command appended events"
    assert verify_group(s.world.group.id) == []
    return error


# --- reconciliation --------------------------------------------------------------------------

def test_a_buffered_progress_is_charged_then_applied_in_one_command(s, clock):
    o = went_offline(s, clock)
    head = s.world.head

    response = o.send()

    assert response.status_code == 200, response.json()
    events = response.json()["events"]
    assert [e["type"] for e in events] == [state.USAGE_RECORDED, "work.progress_reported"]
    assert [e["sequence"] for e in events] == [head + 1, head + 2]
    usage, progress = (e["data"] for e in events)
    assert usage["delta"] == {"tokens": 120, "toolCalls": 2}
    assert usage["leaseId"] == o.started["leaseId"]
    record = usage["offline"]
    assert record == progress["offline"]
    assert record["historicalSession"]["sessionEpoch"] == o.session_epoch
    assert record["reconciliationSession"]["sessionEpoch"] == o.worker.session_epoch
    assert record["historicalSession"]["sessionId"] != record["reconciliationSession"]["sessionId"]
    assert None not in (record["historicalSession"]["sessionId"],
                        record["reconciliationSession"]["sessionId"])
    assert progress["progress"] == PROGRESS
    assert s.item(o.item_id)["usage"] == {"tokens": 120, "toolCalls": 2}
    assert s.c.get(f"missions/{s.mission_id}").json()["usage"] == {"tokens": 120, "toolCalls": 2}
    # the reconnection still returned the item to queued (§11.3)
    assert s.item(o.item_id)["state"] == "queued"
    assert verify_group(s.world.group.id) == []


def test_a_zero_usage_delta_appends_no_usage_event(s, clock):
    o = went_offline(s, clock)

    events = o.worker.ok("work.progress", PROGRESS, workItemId=o.item_id,
                         extensions={URN: o.binding(usage=ZERO)})

    assert [e["type"] for e in events] == ["work.progress_reported"]
    assert verify_group(s.world.group.id) == []


def test_a_buffered_command_is_accepted_while_the_session_still_holds_the_lease(s, clock):
    o = went_offline(s, clock, reconnect=False)

    events = o.worker.ok("work.progress", PROGRESS, workItemId=o.item_id,
                         extensions={URN: o.binding()})

    assert [e["type"] for e in events] == [state.USAGE_RECORDED, "work.progress_reported"]
    assert s.item(o.item_id)["state"] == "active"
    assert verify_group(s.world.group.id) == []


def test_a_buffered_checkpoint_is_where_the_owner_starts_again(s, clock):
    o = went_offline(s, clock)
    body = {"progress": {"phase": "figures done", "milestones": ["outline", "figures"]}}

    o.worker.ok("work.checkpoint", body, workItemId=o.item_id,
                extensions={URN: o.binding(usage=ZERO)})

    item = s.item(o.item_id)
    assert item["state"] == "queued" and item["owner"] == o.worker.name
    assert item["lease"] is None
    restarted = s.start(o.item_id, o.worker)
    assert restarted["leaseId"] != o.started["leaseId"]
    assert restarted["resumed"] is True
    assert verify_group(s.world.group.id) == []


def test_a_buffered_block_blocks_the_item(s, clock):
    o = went_offline(s, clock)
    body = {"checkpoint": {"progress": {"phase": "needs the figures"}},
            "requiredResolution": "the figures"}

    o.worker.ok("work.block", body, workItemId=o.item_id, extensions={URN: o.binding()})

    assert s.item(o.item_id)["state"] == "blocked"
    assert verify_group(s.world.group.id) == []


def test_a_buffered_message_goes_to_the_bound_conversation(s, clock):
    o = went_offline(s, clock)

    events = o.worker.ok("conversation.post", {"kind": "message", "text": "done offline"},
                         workItemId=o.item_id, extensions={URN: o.binding(usage=ZERO)})

    assert events[0]["type"] == "conversation.message_posted"
    assert events[0]["data"]["offline"]["leaseId"] == o.started["leaseId"]
    assert verify_group(s.world.group.id) == []


def test_resending_a_rebased_command_is_a_duplicate(s, clock):
    o = went_offline(s, clock)
    envelope = o.envelope()
    first = o.worker.post(envelope).json()
    head = s.world.head

    again = o.worker.post(envelope)

    assert again.status_code == 200 and again.json()["duplicate"] is True
    assert again.json()["events"] == first["events"]
    assert s.world.head == head


def test_buffered_commands_go_in_buffered_order(s, clock):
    o = went_offline(s, clock)
    o.worker.ok("work.progress", PROGRESS, workItemId=o.item_id,
                extensions={URN: o.binding(buffered=60)})
    # the same instant again is not out of order
    o.worker.ok("work.progress", PROGRESS, workItemId=o.item_id,
                extensions={URN: o.binding(buffered=60)})

    error = assert_refused(s, lambda: o.send(binding=o.binding(buffered=40)), 409,
                           "STALE_LEASE")

    assert "reconciledThrough" in error["details"]


def test_nothing_is_buffered_after_a_buffered_checkpoint(s, clock):
    o = went_offline(s, clock)
    o.worker.ok("work.checkpoint", {"progress": PROGRESS}, workItemId=o.item_id,
                extensions={URN: o.binding(buffered=50)})

    error = assert_refused(s, lambda: o.send(binding=o.binding(buffered=70)), 409,
                           "STALE_LEASE")

    assert error["details"]["closeReason"] == "released"


def test_a_late_submission_after_reconciliation_never_completes_the_item(s, clock):
    o = went_offline(s, clock)
    o.worker.ok("work.checkpoint", {"progress": PROGRESS}, workItemId=o.item_id,
                extensions={URN: o.binding()})
    late = {"contractRevision": 1, "evidence": [evidence(["c1"])]}

    assert_refused(s, lambda: o.worker.send("work.submit", late, workItemId=o.item_id,
                                            leaseId=o.started["leaseId"],
                                            ownershipEpoch=o.started["ownershipEpoch"]),
                   409, "STALE_LEASE")

    assert s.item(o.item_id)["state"] == "queued"


# --- refusals of the envelope and the binding ------------------------------------------------

@pytest.mark.parametrize("command_type, body", [
    ("work.submit", {"contractRevision": 1, "evidence": []}),
    ("work.start", {}),
    ("usage.record", {"tokens": 1}),
    ("lease.renew", {}),
])
def test_only_reports_of_running_work_may_be_buffered(s, clock, command_type, body):
    o = went_offline(s, clock)

    error = assert_refused(s, lambda: o.send(command_type, body), 400, "VALIDATION_ERROR")

    assert "cannot be buffered offline" in error["message"]


def test_a_buffered_command_sent_with_its_old_session_is_stale(s, clock):
    o = went_offline(s, clock)
    envelope = o.envelope(sessionEpoch=o.session_epoch)

    assert_refused(s, lambda: o.worker.post(envelope), 401, "STALE_SESSION")


@pytest.mark.parametrize("member, value", [
    ("agentId", "someone-else"), ("groupId", "grp_other"), ("workItemId", "wi_other"),
    ("critical", False), ("usage", {"tokens": -1}),
])
def test_a_binding_naming_another_principal_group_or_item_is_invalid(s, clock, member, value):
    o = went_offline(s, clock)

    error = assert_refused(s, lambda: o.send(binding=o.binding(**{member: value})), 400,
                           "VALIDATION_ERROR")

    assert error["details"]["path"].startswith(f"extensions.{URN}")


def test_a_binding_disagreeing_with_the_envelope_is_invalid(s, clock):
    o = went_offline(s, clock)

    assert_refused(s, lambda: o.send(leaseId="lease_other"), 400, "VALIDATION_ERROR")


def test_a_binding_whose_session_epoch_was_not_the_leases_is_invalid(s, clock):
    o = went_offline(s, clock)

    error = assert_refused(s, lambda: o.send(binding=o.binding(sessionEpoch=o.session_epoch + 1)),
                           400, "VALIDATION_ERROR")

    assert error["details"]["path"].endswith(".sessionEpoch")


def test_a_lease_the_item_never_had_is_stale(s, clock):
    o = went_offline(s, clock)

    assert_refused(s, lambda: o.send(binding=o.binding(leaseId="lease_made_up")), 409,
                   "STALE_LEASE")


def test_an_older_lease_than_the_latest_is_stale(s, clock):
    o = went_offline(s, clock)
    s.start(o.item_id, o.worker)  # started again before reconciling: the old lease is gone

    assert_refused(s, o.send, 409, "STALE_LEASE")


def test_a_changed_owner_refuses_the_buffer(s, clock):
    o = went_offline(s, clock)
    later(clock, 700)  # past startBy: the owner is fenced when the item is offered again
    s.offer(o.item_id, s.w2)
    s.accept(o.item_id, s.w2)

    assert_refused(s, o.send, 409, "OWNER_CHANGED")


def test_a_stale_ownership_epoch_is_owner_changed(s, clock):
    o = went_offline(s, clock)

    assert_refused(s, lambda: o.send(binding=o.binding(ownershipEpoch=o.started[
        "ownershipEpoch"] + 1)), 409, "OWNER_CHANGED")


# --- the grace window --------------------------------------------------------------------------

def test_buffered_before_the_lease_started_is_outside_the_window(s, clock):
    o = went_offline(s, clock)
    binding = o.binding(buffered=-5, disconnectedAt=format_time(o.t0 - timedelta(seconds=10)))

    assert_refused(s, lambda: o.send(binding=binding), 409, "OUTSIDE_GRACE_WINDOW")


def test_buffered_after_the_reconnection_is_outside_the_window(s, clock):
    o = went_offline(s, clock)
    later(clock, 30)

    assert_refused(s, lambda: o.send(binding=o.binding(buffered=100)), 409,
                   "OUTSIDE_GRACE_WINDOW")


def test_buffered_in_the_future_is_outside_the_window(s, clock):
    o = went_offline(s, clock, reconnect=False)

    assert_refused(s, lambda: o.send(binding=o.binding(buffered=120)), 409,
                   "OUTSIDE_GRACE_WINDOW")


def test_buffered_after_the_lease_expiry_plus_grace_is_outside_the_window(s, clock, settings):
    settings.MW_OFFLINE_GRACE_SECONDS = 60
    o = Offline(s)
    later(clock, 400)  # lease (300 s) expired at t0+300; grace ends at t0+360
    assert o.worker.open_session().status_code == 201
    expires = parse_time(o.started["expiresAt"])
    deadline = format_time(expires + timedelta(seconds=60))

    assert_refused(s, lambda: o.send(binding=o.binding(buffered=370, graceDeadline=deadline)),
                   409, "OUTSIDE_GRACE_WINDOW")
    # within the grace it is reconciled
    o.worker.ok("work.progress", PROGRESS, workItemId=o.item_id,
                extensions={URN: o.binding(buffered=350, graceDeadline=deadline)})


def test_the_grace_period_is_capped_by_its_maximum(s, clock, settings):
    settings.MW_OFFLINE_GRACE_SECONDS = 10_000
    settings.MW_MAX_OFFLINE_GRACE_SECONDS = 100
    o = Offline(s)
    later(clock, 1000)
    assert o.worker.open_session().status_code == 201
    expires = parse_time(o.started["expiresAt"])

    error = assert_refused(s, lambda: o.send(binding=o.binding(
        buffered=500, graceDeadline=format_time(expires + timedelta(seconds=100)))), 409,
        "OUTSIDE_GRACE_WINDOW")

    assert parse_time(error["details"]["graceDeadline"]) == expires + timedelta(seconds=100)


def test_a_grace_deadline_later_than_the_servers_is_outside_the_window(s, clock):
    o = went_offline(s, clock)
    late = format_time(parse_time(o.started["expiresAt"]) + timedelta(seconds=301))

    assert_refused(s, lambda: o.send(binding=o.binding(graceDeadline=late)), 409,
                   "OUTSIDE_GRACE_WINDOW")


# --- a lease closed before, an item ended meanwhile ------------------------------------------

def test_a_lease_released_before_the_buffer_time_is_stale(s, clock):
    o = Offline(s)
    later(clock, 30)
    o.worker.ok("work.checkpoint", {"progress": PROGRESS}, **s.lease_fields(o.item_id))
    later(clock, 60)

    error = assert_refused(s, o.send, 409, "STALE_LEASE")

    assert error["details"]["closeReason"] == "released"


def test_a_lease_expired_before_the_buffer_time_is_stale(s, clock):
    o = Offline(s)
    later(clock, 310)
    sweeper.sweep()  # lease.expired at t0+310
    later(clock, 20)
    assert o.worker.open_session().status_code == 201

    error = assert_refused(s, lambda: o.send(binding=o.binding(buffered=320)), 409,
                           "STALE_LEASE")

    assert error["details"]["closeReason"] == "expired"


def test_a_buffered_command_dated_before_the_expiry_sweep_is_reconciled(s, clock):
    o = Offline(s)
    later(clock, 310)
    sweeper.sweep()

    o.worker.ok("work.progress", PROGRESS, workItemId=o.item_id,
                extensions={URN: o.binding(buffered=305)})
    assert verify_group(s.world.group.id) == []


@pytest.mark.parametrize("end, state_name", [
    ("work.cancel", "cancelled"), ("work.fail", "failed")])
def test_an_item_ended_meanwhile_refuses_the_buffer_naming_why(s, clock, end, state_name):
    o = went_offline(s, clock)
    body = {"reason": "no longer needed"} if end == "work.cancel" else {
        "evidence": [evidence(["c1"], result="fail")]}
    s.c.ok(end, body, workItemId=o.item_id)

    error = assert_refused(s, o.send, 409, "TRANSITION_NOT_PERMITTED")

    assert error["details"]["state"] == state_name and state_name in error["message"]


def test_a_mission_cancelled_meanwhile_refuses_the_buffer(s, clock):
    o = went_offline(s, clock)
    s.c.ok("mission.cancel", {"missionId": s.mission_id, "reason": "stop"})

    error = assert_refused(s, o.send, 409, "TRANSITION_NOT_PERMITTED")

    assert error["details"]["state"] == "cancelled"


def test_a_lease_taken_back_for_a_child_mission_refuses_the_buffer(s, clock):
    o = Offline(s)
    later(clock, 30)
    s.c.ok("mission.create_child", {"title": "Figures", "childFailurePolicy": "block"},
           workItemId=o.item_id)
    later(clock, 60)

    assert_refused(s, o.send, 409, "OWNER_CHANGED")


# --- budgets and atomicity ---------------------------------------------------------------------

def test_a_grandparent_missions_overflow_refuses_the_charge_and_the_command(s, clock):
    s.mission_id = s.c.ok("mission.create", {
        "title": "Root", "ownerId": s.owner.principal, "coordinatorId": s.c.principal,
        "budgets": {"tokens": 100}})[0]["missionId"]
    root = s.mission_id
    sibling, _ = s.running(s.w2)
    s.w2.ok("usage.record", {"tokens": 80}, **s.lease_fields(sibling))
    parent = s.authorize()
    s.in_child_mission(parent)
    o = went_offline(s, clock)  # the child Mission's item: its own budgets allow 50 tokens

    error = assert_refused(s, lambda: o.send(binding=o.binding(usage={"tokens": 50})), 409,
                           "BUDGET_EXCEEDED")

    assert (error["details"]["level"], error["details"]["id"]) == ("mission", root)
    assert s.item(o.item_id)["usage"] == {} and s.item(parent)["usage"] == {}
    assert s.c.get(f"missions/{root}").json()["usage"] == {"tokens": 80}


def test_a_crash_between_the_charge_and_the_command_leaves_neither(s, clock, monkeypatch):
    o = went_offline(s, clock)
    head = s.world.head
    evolve, evolved = pipeline.evolve, []

    def crash_after_the_charge(view, event):
        if event.type == "work.progress_reported":
            raise RuntimeError("crashed between the charge and the command")
        evolved.append(event.type)
        return evolve(view, event)

    monkeypatch.setattr(pipeline, "evolve", crash_after_the_charge)
    assert_error(o.send(), 500, "INTERNAL_ERROR")
    monkeypatch.undo()

    assert evolved == [state.USAGE_RECORDED]  # the charge was appended, then the crash
    assert s.world.head == head
    assert s.item(o.item_id)["usage"] == {}
    assert verify_group(s.world.group.id) == []
    # and the same command applies whole once the crash is gone
    assert [e["type"] for e in o.worker.ok("work.progress", PROGRESS, workItemId=o.item_id,
                                           extensions={URN: o.binding()})] == \
        [state.USAGE_RECORDED, "work.progress_reported"]


def test_a_crash_after_both_events_are_written_commits_neither(s, clock, monkeypatch):
    o = went_offline(s, clock)
    head = s.world.head
    execute_batch = pipeline.db.execute_batch

    def crash_after_writing(writes):
        execute_batch(writes)
        raise RuntimeError("crashed before the commit")

    monkeypatch.setattr(pipeline.db, "execute_batch", crash_after_writing)
    assert_error(o.send(), 500, "INTERNAL_ERROR")
    monkeypatch.undo()

    assert s.world.head == head
    assert s.item(o.item_id)["usage"] == {}
    assert verify_group(s.world.group.id) == []


# --- the §10.2 table holds for buffered work ------------------------------------------------

def submitted(o: "Offline") -> None:
    """The worker, online all along, submits its item under the lease the buffer names."""
    s = o.s
    artifact = s.deliver(o.item_id, o.worker)
    own = evidence(["ac1", "ac2"], producer=o.worker.principal)
    o.worker.ok("work.submit", {"contractRevision": 1, "artifacts": [artifact], "evidence": [own]},
                workItemId=o.item_id, leaseId=o.started["leaseId"],
                ownershipEpoch=o.started["ownershipEpoch"])


def blocked(o: "Offline") -> None:
    o.worker.ok("work.block", {"checkpoint": {"progress": PROGRESS},
                               "requiredResolution": "the figures"},
                workItemId=o.item_id, leaseId=o.started["leaseId"],
                ownershipEpoch=o.started["ownershipEpoch"])


def checkpointed(o: "Offline") -> None:
    o.worker.ok("work.checkpoint", {"progress": PROGRESS}, workItemId=o.item_id,
                leaseId=o.started["leaseId"], ownershipEpoch=o.started["ownershipEpoch"])


@pytest.mark.parametrize("moved_on, state_name", [
    (submitted, "submitted"), (blocked, "blocked"), (checkpointed, "queued")])
@pytest.mark.parametrize("command_type, body", [
    ("work.checkpoint", {"progress": PROGRESS}), ("work.progress", PROGRESS),
    ("work.block", {"checkpoint": {"progress": PROGRESS}, "requiredResolution": "x"}),
    ("conversation.post", {"kind": "message", "text": "from the buffer"})])
def test_a_buffered_command_never_takes_back_an_item_that_moved_on(
        s, clock, moved_on, state_name, command_type, body):
    """The binding's bufferedAt is the worker's own claim: dated before its own submission,
    block or checkpoint, a buffered checkpoint would move a submitted item out of review or
    a blocked one back to queued. Only an active item, or one the worker's reconnection
    returned to queued, takes buffered work; the usage it carries is not charged."""
    o = went_offline(s, clock, reconnect=False)
    moved_on(o)
    usage_before = s.item(o.item_id).get("usage")

    error = assert_refused(s, lambda: o.send(command_type, body), 409,
                           "TRANSITION_NOT_PERMITTED")

    assert error["details"]["state"] == state_name
    item = s.item(o.item_id)
    assert item["state"] == state_name and item.get("usage") == usage_before


def test_an_item_the_reconnection_returned_to_queued_takes_buffered_work(s, clock):
    o = went_offline(s, clock)  # the new session revoked the lease: the item is queued
    assert s.item(o.item_id)["state"] == "queued"

    events = o.worker.ok("work.progress", PROGRESS, workItemId=o.item_id,
                         extensions={URN: o.binding()})

    assert events[-1]["type"] == "work.progress_reported"
