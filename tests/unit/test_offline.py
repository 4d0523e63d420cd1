"""The pure checks of bounded offline execution (§11.5, mission_weave/core/offline_binding.py): the
grace window's arithmetic, the binding against the server's record of the lease, and the
state a reconciled command leaves, through `decide` and `evolve` with no database."""

from dataclasses import replace

import pytest

from mission_weave.core import commands, offline_binding, state, state_documents
from mission_weave.protocol.errors import ProtocolError
from tests.unit.builders import (
    ITEM_ID,
    LEASE_ID,
    OWNERSHIP_EPOCH,
    SESSION_EPOCH,
    WORKER,
    apply,
    at,
    command,
    context,
    iso,
    lease,
    progress,
    view_of,
    work_item,
)

GRACE = 300
GROUP = "grp_1"
REVOKED_AT = 30  # the reconnection, 30 s after T0; the lease started at T0-60, expires T0+300


def revoked_lease(**changes) -> state.Lease:
    return replace(lease(), closed_at=at(REVOKED_AT), close_reason="revoked",
                   revoked_by_reconnection=True, **changes)


def reconnected_item(**changes) -> state.WorkItem:
    """The item as the reconnection left it: queued, its lease revoked for that reason."""
    return work_item(state.QUEUED, **{"lease": revoked_lease(), **changes})


def binding(buffered=10, **overrides) -> dict:
    values = {"critical": True, "agentId": WORKER, "groupId": GROUP, "workItemId": ITEM_ID,
              "sessionEpoch": SESSION_EPOCH, "ownershipEpoch": OWNERSHIP_EPOCH,
              "leaseId": LEASE_ID, "disconnectedAt": iso(0), "bufferedAt": iso(buffered),
              "graceDeadline": iso(300 + GRACE), "leaseExpiresAt": iso(300),
              "usage": {"tokens": 5}}
    values.update(overrides)
    return values


def buffered(item, the_binding=None, command_type="work.progress", body=None):
    return command(command_type, progress() if body is None else body, item,
                   session_epoch=SESSION_EPOCH + 1, ownership_epoch=None, lease_id=None,
                   offline=the_binding or binding())


def decide(item, cmd, now_at=60):
    return commands.decide(view_of(item), cmd, context(at(now_at), facts={"sessions": {
        SESSION_EPOCH: "ses_old", SESSION_EPOCH + 1: "ses_new"}}))


def refusal(item, cmd, now_at=60) -> ProtocolError:
    with pytest.raises(ProtocolError) as raised:
        decide(item, cmd, now_at)
    return raised.value


# --- the window ---------------------------------------------------------------------------------

def test_the_window_runs_from_the_lease_start_to_its_expiry_plus_grace():
    assert offline_binding.window(lease(), GRACE, at(10_000)) == (at(-60), at(300 + GRACE))


def test_the_window_ends_now_at_the_latest():
    assert offline_binding.window(lease(), GRACE, at(50)) == (at(-60), at(50))


def test_the_window_ends_at_the_reconnection_that_revoked_the_lease():
    assert offline_binding.window(revoked_lease(), GRACE, at(10_000)) == (at(-60), at(REVOKED_AT))


def test_the_grace_deadline_is_the_servers_lease_expiry_plus_grace():
    assert offline_binding.grace_deadline(lease(), 60) == at(360)


# --- the binding alone --------------------------------------------------------------------------

def test_a_binding_on_a_command_that_cannot_be_buffered_is_invalid():
    with pytest.raises(ProtocolError) as raised:
        offline_binding.check_binding(binding(), "work.submit", GROUP)
    assert raised.value.code == "VALIDATION_ERROR"


@pytest.mark.parametrize("overrides", [
    {"groupId": "grp_other"}, {"critical": False}, {"usage": {"tokens": -1}},
    {"disconnectedAt": iso(20), "bufferedAt": iso(10)}, {"leaseExpiresAt": "yesterday"}])
def test_a_malformed_binding_is_invalid(overrides):
    with pytest.raises(ProtocolError) as raised:
        offline_binding.check_binding(binding(**overrides), "work.progress", GROUP)
    assert raised.value.code == "VALIDATION_ERROR"


@pytest.mark.parametrize("command_type", sorted(offline_binding.BUFFERABLE))
def test_a_well_formed_binding_passes(command_type):
    offline_binding.check_binding(binding(), command_type, GROUP)


# --- against the record -------------------------------------------------------------------------

def test_a_reconciled_progress_charges_first_then_reports():
    drafts = decide(reconnected_item(), buffered(reconnected_item()))

    assert [d.type for d in drafts] == [state.USAGE_RECORDED, "work.progress_reported"]
    record = drafts[0].data["offline"]
    assert record == drafts[1].data["offline"]
    assert record["historicalSession"] == {"sessionId": "ses_old", "sessionEpoch": SESSION_EPOCH}
    assert record["reconciliationSession"] == {"sessionId": "ses_new",
                                               "sessionEpoch": SESSION_EPOCH + 1}


def test_a_zero_delta_charges_nothing():
    cmd = buffered(reconnected_item(), binding(usage={"tokens": 0}))

    assert [d.type for d in decide(reconnected_item(), cmd)] == ["work.progress_reported"]


@pytest.mark.parametrize("overrides, code", [
    ({"agentId": "w2"}, "VALIDATION_ERROR"),
    ({"workItemId": "wi_2"}, "VALIDATION_ERROR"),
    ({"sessionEpoch": SESSION_EPOCH + 1}, "VALIDATION_ERROR"),
    ({"leaseId": "lease_2"}, "STALE_LEASE"),
    ({"ownershipEpoch": OWNERSHIP_EPOCH + 1}, "OWNER_CHANGED"),
    ({"bufferedAt": iso(-61)}, "OUTSIDE_GRACE_WINDOW"),  # before the lease started
    ({"bufferedAt": iso(REVOKED_AT + 1)}, "OUTSIDE_GRACE_WINDOW"),  # after the reconnection
    ({"graceDeadline": iso(300 + GRACE + 1)}, "OUTSIDE_GRACE_WINDOW"),
    ({"graceDeadline": iso(5)}, "OUTSIDE_GRACE_WINDOW"),  # buffered after its own deadline
])
def test_a_binding_the_record_contradicts_is_refused(overrides, code):
    item = reconnected_item()

    assert refusal(item, buffered(item, binding(**overrides))).code == code


def test_buffered_in_the_future_is_outside_the_window():
    item = work_item(state.ACTIVE)  # still the same session: no reconnection yet

    assert refusal(item, buffered(item, binding(buffered=61))).code == "OUTSIDE_GRACE_WINDOW"


def test_buffered_past_the_expiry_plus_grace_is_outside_the_window():
    item = work_item(state.ACTIVE, lease=lease(expires_in=-400))  # expired at T0-400

    assert refusal(item, buffered(item, binding(buffered=-50, graceDeadline=iso(-100)))).code \
        == "OUTSIDE_GRACE_WINDOW"


def test_a_changed_owner_is_owner_changed():
    item = reconnected_item(owner="w2")

    assert refusal(item, buffered(item)).code == "OWNER_CHANGED"


@pytest.mark.parametrize("reason", ["released", "expired", "revoked"])
def test_a_lease_closed_before_the_buffer_time_for_another_reason_is_stale(reason):
    item = work_item(state.QUEUED, lease=replace(lease(), closed_at=at(5), close_reason=reason))

    error = refusal(item, buffered(item, binding(buffered=10)))

    assert (error.code, error.details["closeReason"]) == ("STALE_LEASE", reason)


def test_a_lease_closed_after_the_buffer_time_still_reconciles():
    item = work_item(state.ACTIVE, lease=replace(lease(), closed_at=at(20), close_reason="expired"))

    assert decide(item, buffered(item, binding(buffered=10)))[-1].type == "work.progress_reported"


@pytest.mark.parametrize("item_state", [state.CANCELLED, state.FAILED, state.VERIFIED])
def test_an_item_ended_meanwhile_is_refused_naming_its_state(item_state):
    item = replace(reconnected_item(), state=item_state)

    error = refusal(item, buffered(item))

    assert (error.code, error.details["state"]) == ("TRANSITION_NOT_PERMITTED", item_state)


def test_a_buffered_command_older_than_one_reconciled_is_refused():
    item = reconnected_item(lease=revoked_lease(reconciled_through=at(20)))

    assert refusal(item, buffered(item, binding(buffered=10))).code == "STALE_LEASE"
    assert decide(item, buffered(item, binding(buffered=20)))  # the same instant is not older


# --- what reconciliation leaves -----------------------------------------------------------------

def test_a_reconciled_checkpoint_releases_the_lease_when_it_was_buffered():
    item = reconnected_item()
    cmd = buffered(item, binding(buffered=10), "work.checkpoint", {"progress": progress()})

    after = apply(view_of(item), decide(item, cmd)).items[ITEM_ID]

    assert after.state == state.QUEUED and after.owner == WORKER
    assert after.last_checkpoint["progress"] == progress()
    assert (after.lease.close_reason, after.lease.closed_at) == ("released", at(10))
    assert after.lease.reconciled_through == at(10)
    assert after.usage == {"tokens": 5}
    # nothing more may be reconciled under it after that
    later = buffered(after, binding(buffered=15))
    assert refusal(after, later).code == "STALE_LEASE"


def test_the_lease_document_keeps_its_old_shape_until_offline_work_is_reconciled():
    assert set(state_documents.lease_to_doc(lease())) == {
        "id", "agentId", "sessionEpoch", "ownershipEpoch", "startedAt", "expiresAt",
        "renewals", "closedAt", "closeReason"}
    reconciled = revoked_lease(reconciled_through=at(10))
    assert state_documents.lease_from_doc(state_documents.lease_to_doc(reconciled)) == reconciled


def test_only_a_reconnection_marks_a_revocation_reconcilable():
    item = work_item(state.ACTIVE)
    revoked = commands.revoke_for_session(view_of(item), WORKER, at(REVOKED_AT),
                                          commands.Policy())

    after = apply(view_of(item), revoked, at(REVOKED_AT)).items[ITEM_ID]

    assert after.lease.revoked_by_reconnection is True
