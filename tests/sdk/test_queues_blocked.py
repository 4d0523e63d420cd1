"""The SDK's replay of work.blocked (no server): its checkpoint is a work.checkpoint body,
`{progress, stateArtifact?}` (PROTOCOL §2), so a block's state artifact is the point the
item resumes from once unblocked; a work.blocked event an older server logged, whose
checkpoint is the progress fields themselves, still replays."""

from tests.sdk.test_queues import NOW, Log, accepted, authorized, replay

STATE = "sha256:" + "5e" * 32


def blocked_log(checkpoint) -> Log:
    log = Log()
    authorized(log, "a")
    accepted(log, "a")
    log.add("work.started", "a", leaseId="lease-1", expiresAt="2026-11-29T08:05:00Z",
            ownershipEpoch=1, agentId="w1", sessionEpoch=1, attempt=1)
    log.add("work.blocked", "a", leaseId="lease-1", checkpoint=checkpoint,
            requiredResolution="figures", blockedUntil="2026-11-29T09:00:00Z")
    return log


def test_a_blocks_state_artifact_is_where_the_unblocked_item_resumes():
    log = blocked_log({"progress": {"phase": "waiting"}, "stateArtifact": STATE})
    work = replay(log)
    assert work.items["a"].state == "blocked"
    assert work.items["a"].last_checkpoint == {"progress": {"phase": "waiting"},
                                               "stateArtifact": STATE}

    log.add("work.unblocked", "a", resolution="figures attached", next="queued",
            startBy="2026-11-29T08:15:00Z")
    (queued,) = replay(log).queue("w1", NOW)
    assert queued.checkpoint_ref == STATE


def test_an_old_shaped_work_blocked_event_still_replays():
    work = replay(blocked_log({"phase": "waiting"}))

    assert work.items["a"].state == "blocked"
    assert work.items["a"].last_checkpoint == {"progress": {"phase": "waiting"},
                                               "stateArtifact": None}
