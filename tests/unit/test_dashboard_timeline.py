"""The WorkItem timeline and Conversation views (apps/dashboard/timeline.py,
apps/dashboard/conversation.py) on hand-written audit trails: grouping by Ownership
Epoch, lease renewals and ends, refused commands placed in the epoch they named, the
summaries, and ambiguities open exactly as the projection says."""

import itertools

from apps.dashboard.conversation import conversation
from apps.dashboard.timeline import summary, timeline

PROGRESS = {"phase": "draft", "milestones": ["outline", "sources"],
            "nextCheckpoint": "figures", "blockers": ["Q3 figures"],
            "estimate": {"remainingSeconds": 600, "confidence": 0.5}, "evidenceRefs": ["ev-1"]}


def trail(*steps) -> list:
    """Event documents from (minute, type, data[, actor]) steps, numbered from 1."""
    numbers = itertools.count(1)
    return [{"sequence": next(numbers), "type": step[1], "data": step[2],
             "actor": step[3] if len(step) > 3 else "agent:w1",
             "occurredAt": f"2026-11-29T12:{step[0]:02d}:00Z"} for step in steps]


def refusal(minute: int, code: str, type_="work.checkpoint", **envelope) -> dict:
    return {"commandId": f"cmd-{minute}", "type": type_, "actor": "agent:w1",
            "at": f"2026-11-29T12:{minute:02d}:30Z", "status": 409,
            "error": {"code": code, "message": f"{code.lower()} here", "details": {}},
            "command": {"type": type_, **envelope}}


def started(minute, lease, epoch=1, resumed=False):
    return (minute, "work.started", {"leaseId": lease, "ownershipEpoch": epoch,
                                     "expiresAt": f"2026-11-29T12:{minute + 5:02d}:00Z",
                                     "attempt": 1, "resumed": resumed})


def accepted(minute, agent="w1", epoch=1):
    data = {"agentId": agent, "ownershipEpoch": epoch, "withdrawn": [], "contractRevision": 1,
            "startBy": f"2026-11-29T12:{minute + 10:02d}:00Z"}
    return (minute, "work.offer_accepted", data, f"agent:{agent}")


def offered(minute, agent):
    return (minute, "work.offered", {"offers": [{"agentId": agent, "rank": 1, "selectionBasis": {},
                                                 "expiresAt": "2026-11-29T13:00:00Z"}],
                                     "mode": "sequential", "pendingCandidates": []}, "agent:c")


LIFE = trail(
    (0, "work.authorized", {"contract": {"revision": 1}}, "agent:c"),
    offered(1, "w3"),
    (2, "work.offer_declined", {"agentId": "w3", "reason": "capacity", "detail": None}, "agent:w3"),
    offered(3, "w1"),
    accepted(4),
    started(5, "L1"),
    (7, "lease.renewed", {"leaseId": "L1", "ownershipEpoch": 1,
                          "expiresAt": "2026-11-29T12:12:00Z"}),
    (8, "lease.renewed", {"leaseId": "L1", "ownershipEpoch": 1,
                          "expiresAt": "2026-11-29T12:14:00Z"}),
    (9, "work.checkpointed", {"leaseId": "L1", "progress": PROGRESS, "stateArtifact": None,
                              "startBy": "2026-11-29T12:19:00Z"}),
    started(10, "L2", resumed=True),
    (11, "work.blocked", {"leaseId": "L2", "checkpoint": {"progress": PROGRESS,
                                                          "stateArtifact": None},
                          "requiredResolution": "API key for X",
                          "blockedUntil": "2026-11-29T12:41:00Z"}),
    (41, "work.ownership_expired", {"agentId": "w1", "ownershipEpoch": 1,
                                    "reason": "blocked_lease"}, "system"),
    offered(42, "w2"),
    accepted(43, "w2", epoch=2),
    started(44, "L3", epoch=2),
)


def test_events_group_by_ownership_epoch_with_the_ownerless_spells_between():
    groups = timeline(LIFE, [])

    assert [(g["epoch"], g["owner"]) for g in groups] == [
        (None, None), (1, "agent:w1"), (None, None), (2, "agent:w2")]
    before, first, between, second = groups
    assert [e["kind"] for e in before["entries"]] == [
        "work.authorized", "work.offered", "work.offer_declined", "work.offered"]
    assert first["entries"][0]["kind"] == "work.offer_accepted"
    assert first["entries"][-1]["kind"] == "work.ownership_expired"
    assert (first["accepted_at"], first["start_by"]) == ("2026-11-29T12:04:00Z",
                                                         "2026-11-29T12:14:00Z")
    assert first["ended"] == "ownership expired: the blocked lease ran out"
    assert [e["sequence"] for e in between["entries"]] == [13]
    assert second["ended"] is None
    assert [lease["lease_id"] for lease in second["leases"]] == ["L3"]


def test_each_lease_shows_its_renewals_latest_expiry_and_how_it_ended():
    first = timeline(LIFE, [])[1]

    one, two = first["leases"]
    assert one["renewals"] == [{"at": "2026-11-29T12:07:00Z", "expires_at": "2026-11-29T12:12:00Z"},
                               {"at": "2026-11-29T12:08:00Z", "expires_at": "2026-11-29T12:14:00Z"}]
    assert (one["started_at"], one["expires_at"]) == ("2026-11-29T12:05:00Z",
                                                      "2026-11-29T12:14:00Z")
    assert (one["end"], one["ended_at"]) == ("checkpointed", "2026-11-29T12:09:00Z")
    assert (two["end"], two["ended_at"], two["renewals"]) == ("blocked", "2026-11-29T12:11:00Z",
                                                              [])


def test_an_expired_or_revoked_lease_ends_so_and_a_still_open_one_is_open():
    events = trail(accepted(0), started(1, "L1"),
                   (6, "lease.expired", {"leaseId": "L1", "reason": "timeout"}, "system"),
                   (7, "work.ownership_expired", {"agentId": "w1", "ownershipEpoch": 1,
                                                  "reason": "lease"}, "agent:c"),
                   accepted(8, "w2", 2), started(9, "L2", 2),
                   (10, "lease.revoked", {"leaseId": "L2", "reason": "failed"}, "agent:c"),
                   (10, "work.failed", {"by": "agent:c", "reason": "wrong sources",
                                        "permanent": False, "retryAt": None,
                                        "exhaustedBy": "attempts", "evidence": []}, "agent:c"),
                   accepted(20, "w1", 3), started(21, "L3", 3))

    groups = timeline(events, [])

    assert [g["epoch"] for g in groups] == [1, 2, 3]
    assert [(g["leases"][0]["end"], g["leases"][0]["end_reason"]) for g in groups] == [
        ("expired", "timeout"), ("revoked", "failed"), ("open", None)]
    assert [g["ended"] for g in groups] == ["ownership expired: the lease timed out",
                                            "failed: wrong sources", None]


def test_a_late_command_of_a_fenced_owner_shows_in_the_epoch_it_named_marked_fenced():
    late = refusal(50, "STALE_OWNERSHIP", ownershipEpoch=1, leaseId="L2")
    by_lease = refusal(51, "STALE_LEASE", type_="lease.renew", leaseId="L1")
    other = refusal(52, "TRANSITION_NOT_PERMITTED", type_="work.unblock")

    groups = timeline(LIFE, [other, by_lease, late])

    first, second = groups[1], groups[3]
    fenced = [e for e in first["entries"] if e["kind"] == "refused"]
    assert [(e["refusal"]["code"], e["fenced"]) for e in fenced] == [
        ("STALE_OWNERSHIP", True), ("STALE_LEASE", True)]
    assert first["entries"][-2:] == fenced  # after the epoch's own events: they came later
    assert fenced[0]["summary"] == ("work.checkpoint refused: STALE_OWNERSHIP — "
                                    "stale_ownership here (kept for audit)")
    assert fenced[0]["sequence"] is None and fenced[0]["at"] == "2026-11-29T12:50:30Z"
    assert second["entries"][-1]["refusal"]["code"] == "TRANSITION_NOT_PERMITTED"
    assert second["entries"][-1]["fenced"] is False


def test_a_refusal_naming_no_epoch_sits_where_its_time_falls():
    early = refusal(2, "OFFER_NOT_LIVE", type_="work.accept_offer")

    before = timeline(LIFE, [early])[0]

    assert [e["sequence"] for e in before["entries"]] == [1, 2, 3, None, 4]


def test_checkpoints_progress_reports_and_blocks_carry_their_structured_progress():
    old_block = trail(accepted(0), started(1, "L1"),
                      (2, "work.progress_reported", {"leaseId": "L1", "progress": PROGRESS}),
                      (3, "work.blocked", {"leaseId": "L1", "checkpoint": {"phase": "waiting"},
                                           "requiredResolution": "input",
                                           "blockedUntil": "2026-11-29T13:03:00Z"}))

    entries = {e["kind"]: e for e in timeline(LIFE, [])[1]["entries"]}
    (epoch,) = timeline(old_block, [])

    assert entries["work.checkpointed"]["progress"] == PROGRESS
    assert entries["work.blocked"]["progress"] == PROGRESS
    assert entries["work.blocked"]["required_resolution"] == "API key for X"
    assert entries["work.started"]["progress"] is None
    by_kind = {e["kind"]: e for e in epoch["entries"]}
    assert by_kind["work.progress_reported"]["progress"] == PROGRESS
    assert by_kind["work.blocked"]["progress"] == {"phase": "waiting"}  # the older shape


def test_summaries_say_what_happened_in_a_sentence():
    said = {e["sequence"]: e["summary"] for g in timeline(LIFE, []) for e in g["entries"]}

    assert said[1] == "authorized by agent:c (contract revision 1)"
    assert said[2] == "offered to agent:w3 (sequential) until 13:00:00"
    assert said[3] == "offer to agent:w3 declined: capacity"
    assert said[5] == "accepted by agent:w1: ownership epoch 1, start by 12:14:00"
    assert said[6] == "lease L1 started (attempt 1), expires 12:10:00"
    assert said[7] == "lease L1 renewed until 12:12:00"
    assert said[10] == "lease L2 started (attempt 1, resumed), expires 12:15:00"
    assert said[9] == ("checkpoint: phase 'draft', 2 milestones reached, next 'figures', "
                       "1 blocker; lease L1 released, start again by 12:19:00")
    assert said[11] == ("blocked: needs “API key for X”; lease L2 released, the owner keeps "
                        "it until 12:41:00")
    assert said[12] == "ownership of agent:w1 (epoch 1) expired: the blocked lease ran out"


def test_summaries_of_unblocking_failure_and_a_time_on_another_day():
    def said(type_, data, actor="agent:c"):
        return summary({"type": type_, "data": data, "actor": actor,
                        "occurredAt": "2026-11-29T23:59:00Z"})

    assert said("work.unblocked", {"resolution": "key attached", "next": "queued",
                                   "startBy": "2026-11-30T00:09:00Z"}) == (
        "unblocked: “key attached”; back in the queue, start by 2026-11-30 00:09:00")
    assert said("work.unblocked", {"resolution": "key attached", "next": "open",
                                   "expiredOwner": "w1"}) == (
        "unblocked: “key attached”; reopened, as the ownership of agent:w1 had run out")
    assert said("work.failed", {"by": "agent:c", "reason": "wrong", "permanent": True,
                                "retryAt": None, "exhaustedBy": "permanent"}) == (
        "failed by agent:c: wrong (permanent); no retry left (permanent)")
    assert said("work.offer_declined", {"agentId": "w1", "reason": "deadline",
                                        "detail": "too soon"}) == (
        "offer to agent:w1 declined: deadline (too soon)")
    assert said("review.evaluated", {}, actor="system") == "review.evaluated by system"


# --- the Conversation ---------------------------------------------------------------------

def posted(minute, message_id, kind, text, author="agent:w1", **extra):
    return (minute, "conversation.message_posted", {"messageId": message_id, "kind": kind,
                                                    "text": text, "author": author,
                                                    "resolves": None, **extra}, author)


def test_messages_in_order_and_an_answered_ambiguity_stays_open_as_the_item_says():
    events = trail(posted(0, "m1", "message", "starting"),
                   posted(1, "a1", "ambiguity", "500 words or one A4 page?"),
                   posted(2, "r1", "resolution", "500 words", author="agent:c",
                          resolves="a1", cleared=False))

    talk = conversation(events, ("a1",))

    assert [(m["message_id"], m["kind"], m["actor"]) for m in talk["messages"]] == [
        ("m1", "message", "agent:w1"), ("a1", "ambiguity", "agent:w1"),
        ("r1", "resolution", "agent:c")]
    assert talk["messages"][2]["resolves"] == "a1"
    (ambiguity,) = talk["ambiguities"]
    assert talk["open"] == [ambiguity]
    assert (ambiguity["open"], ambiguity["raised_by"], ambiguity["resolved_how"]) == (
        True, "agent:w1", None)
    assert [a["message_id"] for a in ambiguity["answers"]] == ["r1"]


def test_a_contract_revision_resolves_every_open_ambiguity_and_older_resolutions_cleared():
    events = trail(posted(0, "a1", "ambiguity", "which quarter?"),
                   posted(1, "r1", "resolution", "Q3", author="agent:c", resolves="a1"),
                   posted(2, "a2", "ambiguity", "which format?"),
                   posted(3, "a3", "ambiguity", "which audience?"),
                   (4, "work.contract_revised", {"contractRevision": 2, "previousRevision": 1,
                                                 "contract": {}, "resolvedAmbiguities":
                                                 ["a2", "a3"]}, "agent:c"),
                   posted(5, "a4", "ambiguity", "and the deadline?"))

    talk = conversation(events, ("a4",))

    resolved = {a["message_id"]: (a["open"], a["resolved_how"], a["resolved_by"])
                for a in talk["ambiguities"]}
    assert resolved == {"a1": (False, "resolution message #2", "agent:c"),
                        "a2": (False, "contract revision 2", "agent:c"),
                        "a3": (False, "contract revision 2", "agent:c"),
                        "a4": (True, None, None)}
    assert [a["message_id"] for a in talk["open"]] == ["a4"]
