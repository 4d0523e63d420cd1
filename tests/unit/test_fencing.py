"""Ownership and lease fencing (§11.3, §11.5). Time is an argument: every `now` is fixed."""

import pytest

from mission_weave.core import commands, fencing, state
from mission_weave.protocol.errors import ProtocolError
from mission_weave.protocol.timefmt import parse_time
from tests.unit import builders
from tests.unit.builders import LEASE_ID, OWNERSHIP_EPOCH, SESSION_EPOCH, WORKER, at, lease


def active_item(**lease_fields):
    return builders.work_item(state.ACTIVE, lease=lease(**lease_fields))


def lease_error(item, *, agent_id=WORKER, lease_id=LEASE_ID, ownership_epoch=OWNERSHIP_EPOCH,
                session_epoch=SESSION_EPOCH, now=builders.T0) -> ProtocolError:
    with pytest.raises(ProtocolError) as raised:
        fencing.check_lease(item, agent_id, lease_id, ownership_epoch, session_epoch, now)
    return raised.value


# --- check_lease ---------------------------------------------------------------------------

def test_the_current_lease_passes():
    item = active_item()

    assert fencing.check_lease(item, WORKER, LEASE_ID, OWNERSHIP_EPOCH, SESSION_EPOCH,
                               builders.T0) is None


def test_an_older_lease_id_with_the_same_ownership_epoch_is_stale_lease():
    # The worker checkpointed under lease_1 and started again under lease_2 in the same
    # ownership epoch; a delayed command carrying lease_1 must be refused (§11.3).
    item = active_item(lease_id="lease_2")

    error = lease_error(item, lease_id="lease_1", ownership_epoch=OWNERSHIP_EPOCH)

    assert error.code == "STALE_LEASE"
    assert "lease_1" in error.message


def test_an_older_ownership_epoch_is_stale_ownership():
    item = builders.work_item(state.ACTIVE, ownership_epoch=2, lease=lease(ownership_epoch=2))

    error = lease_error(item, ownership_epoch=1)

    assert error.code == "STALE_OWNERSHIP"
    assert error.details == {"ownershipEpoch": 2}


def test_a_missing_ownership_epoch_is_stale_ownership():
    assert lease_error(active_item(), ownership_epoch=None).code == "STALE_OWNERSHIP"


def test_an_expired_lease_is_lease_expired():
    item = active_item(expires_in=300)

    error = lease_error(item, now=at(300))

    assert error.code == "LEASE_EXPIRED"
    assert parse_time(error.details["expiredAt"]) == at(300)


def test_a_lease_is_valid_until_the_instant_it_expires():
    item = active_item(expires_in=300)

    assert fencing.check_lease(item, WORKER, LEASE_ID, OWNERSHIP_EPOCH, SESSION_EPOCH,
                               at(299)) is None


def test_a_lease_closed_by_the_sweeper_as_expired_is_lease_expired():
    item = active_item(closed="expired")

    error = lease_error(item)

    assert error.code == "LEASE_EXPIRED"
    assert error.details == {"closeReason": "expired"}


@pytest.mark.parametrize("reason", ["released", "revoked"])
def test_a_released_or_revoked_lease_is_stale_lease(reason):
    item = active_item(closed=reason)

    error = lease_error(item)

    assert error.code == "STALE_LEASE"
    assert error.details == {"closeReason": reason}


def test_a_lease_bound_to_another_session_epoch_is_stale_lease():
    item = active_item(session_epoch=SESSION_EPOCH)

    error = lease_error(item, session_epoch=SESSION_EPOCH + 1)

    assert error.code == "STALE_LEASE"
    assert "session epoch 3" in error.message


def test_a_lease_held_by_another_agent_is_stale_lease():
    item = active_item(agent_id="w2")

    assert lease_error(item, agent_id=WORKER).code == "STALE_LEASE"


def test_no_lease_at_all_is_stale_lease():
    item = builders.work_item(state.QUEUED)

    assert lease_error(item).code == "STALE_LEASE"


def test_a_lease_command_through_decide_is_fenced_before_it_acts():
    item = active_item(lease_id="lease_2")
    view = builders.view_of(item)
    late = builders.command("work.submit", {"contractRevision": 1,
                                            "evidence": [builders.evidence(["ac1", "ac2"])]},
                            item, lease_id="lease_1")

    with pytest.raises(ProtocolError) as raised:
        commands.decide(view, late, builders.context())

    assert raised.value.code == "STALE_LEASE"


def test_a_lease_command_without_a_lease_id_is_a_validation_error():
    item = active_item()
    view = builders.view_of(item)
    command = builders.command("lease.renew", {}, item, lease_id=None)

    with pytest.raises(ProtocolError) as raised:
        commands.decide(view, command, builders.context())

    assert raised.value.code == "VALIDATION_ERROR"


# --- owner liveness ----------------------------------------------------------------------------

def test_queued_owner_is_live_until_start_by():
    item = builders.work_item(state.QUEUED, start_by=at(600))

    assert fencing.owner_is_live(item, at(599)) is True
    assert fencing.owner_is_live(item, at(600)) is False


def test_active_owner_is_live_until_the_lease_expires():
    item = active_item(expires_in=300)

    assert fencing.owner_is_live(item, at(299)) is True
    assert fencing.owner_is_live(item, at(300)) is False


def test_active_owner_with_a_closed_lease_is_not_live():
    item = active_item(expires_in=300, closed="expired")

    assert fencing.owner_is_live(item, builders.T0) is False


def test_blocked_owner_is_live_until_blocked_until():
    item = builders.work_item(state.BLOCKED, blocked_until=at(3600))

    assert fencing.owner_is_live(item, at(3599)) is True
    assert fencing.owner_is_live(item, at(3600)) is False


def test_a_fenced_owner_is_not_live():
    item = builders.work_item(state.QUEUED, owner=None)

    assert fencing.owner_is_live(item, builders.T0) is False


@pytest.mark.parametrize("item_state", [state.OPEN, state.OFFERED, state.SUBMITTED,
                                        state.VERIFIED, state.FAILED, state.CANCELLED])
def test_outside_queued_active_blocked_no_owner_is_live(item_state):
    item = builders.work_item(item_state, owner=WORKER, start_by=at(600),
                              blocked_until=at(600))

    assert fencing.owner_is_live(item, builders.T0) is False


# --- check_ownership ---------------------------------------------------------------------------

def ownership_error(item, agent_id=WORKER, ownership_epoch=OWNERSHIP_EPOCH, now=builders.T0):
    with pytest.raises(ProtocolError) as raised:
        fencing.check_ownership(item, agent_id, ownership_epoch, now)
    return raised.value


def test_the_live_owner_at_the_current_epoch_passes():
    item = builders.work_item(state.QUEUED)

    assert fencing.check_ownership(item, WORKER, OWNERSHIP_EPOCH, builders.T0) is None


def test_another_agent_is_stale_ownership():
    assert ownership_error(builders.work_item(state.QUEUED), agent_id="w2").code == \
        "STALE_OWNERSHIP"


def test_an_older_epoch_is_stale_ownership():
    item = builders.work_item(state.QUEUED, ownership_epoch=3)

    error = ownership_error(item, ownership_epoch=2)

    assert error.code == "STALE_OWNERSHIP"
    assert error.details == {"ownershipEpoch": 3}


def test_a_missed_start_by_is_stale_ownership():
    item = builders.work_item(state.QUEUED, start_by=at(600))

    error = ownership_error(item, now=at(600))

    assert error.code == "STALE_OWNERSHIP"
    assert "expired" in error.message


def test_start_after_the_start_by_deadline_is_refused():
    item = builders.work_item(state.QUEUED, start_by=at(600))
    view = builders.view_of(item)
    start = builders.command("work.start", {}, item)

    with pytest.raises(ProtocolError) as raised:
        commands.decide(view, start, builders.context(now=at(601)))

    assert raised.value.code == "STALE_OWNERSHIP"


def test_a_late_result_from_a_reassigned_owner_is_refused():
    # w1 lost the item at epoch 1; w2 owns it at epoch 2 under its own lease.
    item = builders.work_item(state.ACTIVE, owner="w2", ownership_epoch=2,
                              lease=lease(lease_id="lease_w2", agent_id="w2",
                                          ownership_epoch=2))
    view = builders.view_of(item)
    late = builders.command("work.submit", {"contractRevision": 1,
                                            "evidence": [builders.evidence(["ac1", "ac2"])]},
                            item, ownership_epoch=1, lease_id=LEASE_ID)

    with pytest.raises(ProtocolError) as raised:
        commands.decide(view, late, builders.context())

    assert raised.value.code == "STALE_OWNERSHIP"
