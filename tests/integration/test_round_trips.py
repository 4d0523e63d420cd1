"""The command hot path's round trips to PostgreSQL, counted on the wire (libpq's trace).
A renewal over HTTP is BEGIN with the Group lock, the sender's session and membership
read again (the bearer token came from the session cache) and the first read (one
pipeline), then the writes with the command record and COMMIT (one pipeline): BEGIN and
COMMIT ride with the statements (db.transaction) and authentication costs no query of
its own (principals.SESSION_CACHE; issue 27). Every command an Agent or a Coordinator
sends in a lifecycle is held to its count. A new query on this path shows up here."""

from datetime import timedelta

import pytest
from django.db import connection

from apps.identity import principals
from mission_weave.protocol.timefmt import format_time
from tests.integration.artifact_helpers import digest, manifest, signed, upload
from tests.support import Scenario, contract, evidence, now

pytestmark = pytest.mark.django_db(transaction=True)

PROGRESS = {"phase": "drafting", "milestones": ["outline"], "nextCheckpoint": "draft",
            "blockers": [], "evidenceRefs": []}


def _round_trips(trace: str) -> list:
    """The statements of each round trip: a run of frontend messages answered by the
    backend."""
    trips, current, last = [], [], None
    for line in trace.splitlines():
        fields = line.split("\t")
        if len(fields) < 4:
            continue
        direction, message = fields[1], fields[3]
        if direction == "F" and last == "B":
            trips.append(current)
            current = []
        if direction == "F" and message in ("Parse", "Query"):
            current.append(fields[-1])
        last = direction
    return [*trips, current] if current else trips


def traced(tmp_path, send) -> tuple:
    """(the response of `send()`, its round trips as [statements joined by ' | '])."""
    connection.ensure_connection()
    path = tmp_path / "trace.txt"
    raw, threshold = connection.connection, connection.connection.prepare_threshold
    raw.prepare_threshold = None  # every statement sends its text: the trace names it
    with open(path, "w") as trace:
        raw.pgconn.trace(trace.fileno())
        try:
            response = send()
        finally:
            raw.pgconn.untrace()
            raw.prepare_threshold = threshold
    return response, [" | ".join(t) for t in _round_trips(path.read_text())]


def test_a_renewal_takes_two_round_trips(tmp_path):
    s = Scenario()
    item_id, _ = s.running()
    envelope = s.w1.envelope("lease.renew", {"leaseSeconds": 600}, **s.lease_fields(item_id))
    response, statements = traced(tmp_path, lambda: s.w1.post(envelope))
    assert response.status_code == 200, response.json()
    assert len(statements) == 2, statements
    assert "BEGIN" in statements[0] and "FOR NO KEY UPDATE" in statements[0] \
        and "identity_agentsession" in statements[0] and "identity_membership" in statements[0] \
        and "work_workitem" in statements[0]
    assert "ledger_commandrecord" in statements[1] and "ledger_event" in statements[1] \
        and "COMMIT" in statements[1]


def test_a_token_not_in_the_session_cache_is_read_before_the_lock(tmp_path):
    s = Scenario()
    item_id, _ = s.running()
    principals.SESSION_CACHE.drop(principals.token_hash(s.w1.token))
    envelope = s.w1.envelope("lease.renew", {"leaseSeconds": 600}, **s.lease_fields(item_id))
    response, statements = traced(tmp_path, lambda: s.w1.post(envelope))
    assert response.status_code == 200, response.json()
    assert len(statements) == 3, statements
    assert "identity_agentsession" in statements[0] and "BEGIN" not in statements[0]
    assert "identity_agentsession" not in statements[1]


def test_every_lifecycle_command_takes_at_most_four_round_trips(tmp_path):
    """Each type the SDK's worker and a Coordinator send in a lifecycle, accepted and
    rejected (a rejection is recorded and committed the same way)."""
    s = Scenario()
    counts = {}

    def sent(actor, type_, body, expect=200, **fields):
        envelope = actor.envelope(type_, body, **fields)
        response, statements = traced(tmp_path, lambda: actor.post(envelope))
        assert response.status_code == expect, response.json()
        key = type_ if expect == 200 else f"{type_} (refused)"
        counts[key] = len(statements)
        assert statements[-1].endswith('"COMMIT" 0'), (type_, statements)
        return response.json()

    offer = {"candidates": [s.w1.name], "mode": "sequential",
             "expiresAt": format_time(now() + timedelta(seconds=600))}
    sent(s.c, "mission.create", {"title": "Q4", "ownerId": s.owner.principal,
                                 "coordinatorId": s.c.principal})
    item_id = sent(s.c, "work.authorize", {"missionId": s.mission_id, "contract": contract()}
                   )["events"][0]["workItemId"]
    sent(s.c, "work.offer", offer, workItemId=item_id)
    sent(s.w1, "work.accept_offer", {"contractRevision": 1}, workItemId=item_id)
    sent(s.w1, "work.start", {}, workItemId=item_id,
         ownershipEpoch=s.item(item_id)["ownershipEpoch"])
    sent(s.w1, "lease.renew", {"leaseSeconds": 600}, **s.lease_fields(item_id))
    sent(s.w1, "work.progress", PROGRESS, **s.lease_fields(item_id))
    sent(s.w1, "lease.renew", {"leaseSeconds": 600}, expect=409,
         **{**s.lease_fields(item_id), "ownershipEpoch": 99})
    data = b"# The summary\n"
    upload(s.w1, data)
    sent(s.w1, "artifact.publish", signed(manifest(s.w1, s.mission_id, item_id, data), s.w1),
         **s.lease_fields(item_id))
    sent(s.w1, "work.submit", {"contractRevision": 1, "artifacts": [digest(data)],
                               "evidence": [evidence(["ac1", "ac2"], artifacts=[digest(data)],
                                                     result="pass: done")]},
         **s.lease_fields(item_id))
    criteria = [c["id"] for c in s.item(item_id)["contract"]["acceptanceCriteria"]]
    sent(s.c, "work.accept_result", {"evidence": [evidence(
        criteria, method="coordinator-review", result="pass: checked it myself")]},
        workItemId=item_id)

    other = s.authorize()
    s.offer(other, s.w1)
    sent(s.w1, "work.decline_offer", {"reason": "capacity"}, workItemId=other)
    s.offer(other, s.w1)
    s.accept(other)
    s.start(other)
    sent(s.w1, "work.checkpoint", {"progress": PROGRESS}, **s.lease_fields(other))
    paused = s.running()[0]
    sent(s.w1, "work.fail", {"evidence": [evidence(["ac1"], result="outage")]},
         **s.lease_fields(paused))

    assert counts["lease.renew"] <= 2, counts
    # A sender's first command reads its session before the lock (3 + 1 for
    # work.accept_offer here); a publication reads the cited artifacts and the signer's
    # facts after the lock.
    assert max(counts.values()) <= 4, counts


def test_a_non_member_is_refused_with_the_membership_read_beside_the_token():
    s, other = Scenario(), Scenario()
    item_id, _ = s.running()
    # w1 of `other` signs a renewal for `s`'s Group, where it is no member
    envelope = other.w1.envelope("lease.renew", {"leaseSeconds": 600},
                                 groupId=s.world.group.id, **s.lease_fields(item_id))
    response = other.w1.post(envelope, group_id=s.world.group.id)
    assert response.status_code == 403, response.json()
    assert response.json()["error"]["code"] == "NOT_A_MEMBER"
