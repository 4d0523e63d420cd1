"""The command hot path's round trips to PostgreSQL, counted on the wire (libpq's trace):
a renewal over HTTP is the bearer token with the membership (one query), BEGIN, the
Group lock with the first read (one pipeline), the writes with the command record (one
pipeline) and COMMIT. A new query on this path shows up here."""

import pytest
from django.db import connection

from tests.support import Scenario

pytestmark = pytest.mark.django_db(transaction=True)


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


def test_a_renewal_takes_five_round_trips(tmp_path):
    s = Scenario()
    item_id, _ = s.running()
    envelope = s.w1.envelope("lease.renew", {"leaseSeconds": 600}, **s.lease_fields(item_id))
    connection.ensure_connection()
    path = tmp_path / "trace.txt"
    raw, threshold = connection.connection, connection.connection.prepare_threshold
    raw.prepare_threshold = None  # every statement sends its text: the trace names it
    with open(path, "w") as trace:
        raw.pgconn.trace(trace.fileno())
        try:
            response = s.w1.post(envelope)
        finally:
            raw.pgconn.untrace()
            raw.prepare_threshold = threshold
    assert response.status_code == 200, response.json()
    trips = _round_trips(path.read_text())
    statements = [" | ".join(t) for t in trips]
    assert len(trips) == 5, statements
    assert "identity_agentsession" in statements[0] and "identity_membership" in statements[0]
    assert "BEGIN" in statements[1]
    assert "FOR NO KEY UPDATE" in statements[2] and "work_workitem" in statements[2]
    assert "ledger_commandrecord" in statements[3] and "ledger_event" in statements[3]
    assert "COMMIT" in statements[4]


def test_a_non_member_is_refused_with_the_membership_read_beside_the_token():
    s, other = Scenario(), Scenario()
    item_id, _ = s.running()
    # w1 of `other` signs a renewal for `s`'s Group, where it is no member
    envelope = other.w1.envelope("lease.renew", {"leaseSeconds": 600},
                                 groupId=s.world.group.id, **s.lease_fields(item_id))
    response = other.w1.post(envelope, group_id=s.world.group.id)
    assert response.status_code == 403, response.json()
    assert response.json()["error"]["code"] == "NOT_A_MEMBER"
