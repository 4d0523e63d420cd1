"""work.block through the HTTP API with the body PROTOCOL §2 pins, `{checkpoint: {progress,
stateArtifact?}, requiredResolution, blockedLeaseSeconds?}`: the blocked item's
checkpoint reads back as a work.checkpoint's does, the old flat shape is refused, and a
log holding work.blocked events in the old shape still verifies."""

from dataclasses import replace

import pytest

from apps.ledger.verify import verify_group
from mission_weave.core import commands
from mission_weave.core.commands import execution
from tests.support import assert_error

PROGRESS = {"phase": "waiting for figures", "milestones": ["outline", "draft"],
            "nextCheckpoint": "figures merged", "blockers": ["Q3 figures missing"],
            "estimate": {"remainingSeconds": 3600, "confidence": 0.5},
            "evidenceRefs": ["ev-1"]}


@pytest.fixture
def s(scenario):
    return scenario


def test_the_protocol_body_is_taken_and_the_checkpoint_reads_back(s):
    item_id, _ = s.running()
    state = s.deliver(item_id, data=b"the work so far")  # a state artifact is published first
    checkpoint = {"progress": PROGRESS, "stateArtifact": state}

    (blocked,) = s.w1.ok("work.block", {"checkpoint": checkpoint,
                                        "requiredResolution": "needs the Q3 figures",
                                        "blockedLeaseSeconds": 600}, **s.lease_fields(item_id))

    assert blocked["type"] == "work.blocked"
    assert blocked["data"]["checkpoint"] == checkpoint
    item = s.item(item_id)
    assert (item["state"], item["requiredResolution"]) == ("blocked", "needs the Q3 figures")
    assert item["lease"] is None
    assert item["lastCheckpoint"] == {**checkpoint, "at": item["lastCheckpoint"]["at"]}

    s.c.ok("work.unblock", {"resolution": "figures attached"}, workItemId=item_id)
    resumed = s.item(item_id)
    assert resumed["state"] == "queued"
    assert resumed["lastCheckpoint"]["stateArtifact"] == state  # the point to resume from
    assert verify_group(s.world.group.id) == []


def test_a_block_without_a_state_artifact_reads_back_like_a_checkpoint(s):
    first, _ = s.running()
    second, _ = s.running()
    s.w1.ok("work.checkpoint", {"progress": PROGRESS}, **s.lease_fields(first))
    s.w1.ok("work.block", {"checkpoint": {"progress": PROGRESS}, "requiredResolution": "input"},
            **s.lease_fields(second))

    checkpointed, blocked = s.item(first)["lastCheckpoint"], s.item(second)["lastCheckpoint"]
    assert set(blocked) == set(checkpointed) == {"progress", "stateArtifact", "at"}
    assert (blocked["progress"], blocked["stateArtifact"]) == (PROGRESS, None)


def test_the_old_flat_shape_is_refused_naming_the_field(s):
    item_id, _ = s.running()
    head = s.world.head

    error = assert_error(s.w1.send("work.block", {"checkpoint": PROGRESS,
                                                  "requiredResolution": "input"},
                                   **s.lease_fields(item_id)), 400, "VALIDATION_ERROR")

    assert error["details"] == {"path": "body.checkpoint"}
    assert "body.checkpoint.progress" in error["message"]
    assert s.world.head == head
    assert s.item(item_id)["state"] == "active"


def test_a_bad_state_artifact_is_refused_as_a_checkpoint_would_be(s):
    item_id, _ = s.running()
    head = s.world.head

    error = assert_error(s.w1.send("work.block", {
        "checkpoint": {"progress": PROGRESS, "stateArtifact": "md5:abc"},
        "requiredResolution": "input"}, **s.lease_fields(item_id)), 400, "VALIDATION_ERROR")

    assert error["details"] == {"path": "body.checkpoint.stateArtifact"}
    assert s.world.head == head


def test_a_log_with_old_shaped_work_blocked_events_still_verifies(s, monkeypatch):
    """An event stored by the server before it followed the pin: work.blocked data whose
    checkpoint is the progress fields themselves. mw_verify replays it as it was."""
    def old_work_block(view, command, context):
        drafts = execution.work_block(view, command, context)
        drafts[0].data["checkpoint"] = command.body["checkpoint"]["progress"]
        return drafts

    monkeypatch.setitem(commands.COMMANDS, "work.block",
                        replace(commands.COMMANDS["work.block"], handle=old_work_block))
    item_id, _ = s.running()
    (blocked,) = s.w1.ok("work.block", {"checkpoint": {"progress": PROGRESS},
                                        "requiredResolution": "input"}, **s.lease_fields(item_id))

    assert blocked["data"]["checkpoint"] == PROGRESS
    assert s.item(item_id)["lastCheckpoint"]["progress"] == PROGRESS
    assert verify_group(s.world.group.id) == []
