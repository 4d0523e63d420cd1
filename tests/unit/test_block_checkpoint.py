"""work.block's `checkpoint` has the shape of a work.checkpoint body (PROTOCOL §2):
`{progress: {...}, stateArtifact?}`, checked as one, carried whole on work.blocked and
recorded as the item's last checkpoint, like a checkpoint's. The flat shape this server
once took is refused, but work.blocked events already logged in it still replay."""

import pytest

from mission_weave.core import commands, state
from mission_weave.core.evolve import evolve
from mission_weave.core.state import Event
from mission_weave.protocol.errors import ProtocolError
from tests.unit import builders
from tests.unit.builders import T0, iso, progress

STATE_HASH = "sha256:" + "ab" * 32


def active():
    """An active item, and a state artifact STATE_HASH published for it."""
    item = builders.work_item(state.ACTIVE)
    view = builders.view_of(item)
    view.artifacts[STATE_HASH] = {**builders.with_deliverable(builders.view_of(item)).artifacts[
        builders.DELIVERABLE], "hash": STATE_HASH}
    return item, view


def block(item, checkpoint, **extra):
    return builders.command("work.block", {"checkpoint": checkpoint,
                                           "requiredResolution": "needs the Q3 figures", **extra},
                            item, roles={"worker"})


def decided(view, command):
    drafts = commands.decide(view, command, builders.context())
    return drafts, builders.apply(view, drafts)


def refused(view, command) -> ProtocolError:
    with pytest.raises(ProtocolError) as raised:
        commands.decide(view, command, builders.context())
    return raised.value


def test_the_pinned_shape_is_taken_and_its_state_artifact_is_the_point_to_resume_from():
    item, view = active()
    checkpoint = {"progress": progress("waiting"), "stateArtifact": STATE_HASH}

    (drafted,), after = decided(view, block(item, checkpoint, blockedLeaseSeconds=600))

    assert drafted.type == "work.blocked"
    assert drafted.data["checkpoint"] == checkpoint
    blocked = after.items[item.id]
    assert blocked.state == state.BLOCKED
    assert blocked.last_checkpoint == {"progress": progress("waiting"),
                                       "stateArtifact": STATE_HASH, "at": iso(0)}


def test_a_block_records_its_checkpoint_as_a_work_checkpoint_does():
    item, view = active()
    _, checkpointed = decided(view, builders.command(
        "work.checkpoint", {"progress": progress()}, item, roles={"worker"}))
    (drafted,), blocked = decided(view, block(item, {"progress": progress()}))

    assert drafted.data["checkpoint"] == {"progress": progress(), "stateArtifact": None}
    assert blocked.items[item.id].last_checkpoint == checkpointed.items[item.id].last_checkpoint


def test_the_old_flat_shape_is_refused_naming_the_field():
    item, view = active()

    error = refused(view, block(item, progress()))

    assert error.code == "VALIDATION_ERROR"
    assert error.details == {"path": "body.checkpoint"}
    assert "body.checkpoint" in error.message
    assert "body.checkpoint.progress" in error.message  # and it says where the fields go


@pytest.mark.parametrize("checkpoint,path", [
    ({"progress": {}}, "body.checkpoint.progress"),
    ({"progress": {"phase": "x", "mood": "tired"}}, "body.checkpoint.progress"),
    ({"progress": progress(), "stateArtifact": "not-a-hash"}, "body.checkpoint.stateArtifact"),
    ({"progress": progress(), "notes": "x"}, "body.checkpoint"),
    ({"stateArtifact": STATE_HASH}, "body.checkpoint"),
    ("drafting", "body.checkpoint"),
])
def test_the_checkpoint_is_checked_exactly_as_a_work_checkpoint_body(checkpoint, path):
    item, view = active()

    error = refused(view, block(item, checkpoint))

    assert (error.code, error.details) == ("VALIDATION_ERROR", {"path": path})
    with pytest.raises(ProtocolError) as as_checkpoint:
        commands.decide(view, builders.command("work.checkpoint", checkpoint, item,
                                               roles={"worker"}), builders.context())
    assert as_checkpoint.value.details == {"path": path.replace("body.checkpoint", "body", 1)}


def test_a_work_blocked_event_logged_in_the_old_shape_still_replays():
    item, view = active()
    old = {"leaseId": item.lease.id, "checkpoint": progress("waiting"),
           "requiredResolution": "figures", "blockedUntil": iso(600)}

    evolve(view, Event("work.blocked", old, T0, item.mission_id, item.id))

    blocked = view.items[item.id]
    assert blocked.state == state.BLOCKED
    # What the projection held when the event was first applied, so that mw_verify's
    # replay still equals the live rows and the stored snapshots.
    assert blocked.last_checkpoint == {"progress": progress("waiting"), "at": iso(0)}
