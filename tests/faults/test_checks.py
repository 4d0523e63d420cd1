"""The fault tests' checks (tests/faults/checks.py) find what they look for: a log in
which a fenced worker's renewal was appended, and a command recorded without its events."""

import pytest

from apps.bench.http_lifecycles import contract
from apps.ledger.models import CommandRecord
from tests.faults import checks
from tests.support import World


def document(sequence: int, type_: str, data: dict, actor: str, at: str, item=None) -> dict:
    return {"sequence": sequence, "type": type_, "data": data, "actor": actor,
            "occurredAt": at, "missionId": "m", "workItemId": item}


def started(sequence: int, agent: str, epoch: int, at: str, until: str) -> list:
    return [document(sequence, "work.offer_accepted", {
                "agentId": agent, "ownershipEpoch": epoch, "startBy": until, "withdrawn": [],
                "contractRevision": 1}, f"agent:{agent}", at, "wi"),
            document(sequence + 1, "work.started", {
                "leaseId": f"lease-{agent}", "expiresAt": until, "ownershipEpoch": epoch,
                "agentId": agent, "sessionEpoch": 1, "attempt": epoch}, f"agent:{agent}", at,
                "wi")]


LOG = [document(1, "mission.created", {"missionId": "m", "title": "t", "ownerId": "user:o",
                                       "coordinatorId": "agent:c", "budgets": {},
                                       "autoDispatch": False}, "agent:c", "2030-01-01T00:00:00Z"),
       document(2, "work.authorized", {"workItemId": "wi", "proposalId": None,
                                       "contract": {**contract(), "revision": 1}},
                "agent:c", "2030-01-01T00:00:00Z", "wi"),
       *started(3, "a", 1, "2030-01-01T00:00:01Z", "2030-01-01T00:00:05Z")]


def test_one_live_owner_finds_a_renewal_by_someone_else(monkeypatch):
    renewal = document(5, "lease.renewed", {"leaseId": "lease-a", "ownershipEpoch": 1,
                                            "expiresAt": "2030-01-01T00:01:00Z"},
                       "agent:b", "2030-01-01T00:00:02Z", "wi")
    monkeypatch.setattr(checks.history, "history", lambda *a, **k: [*LOG, renewal])
    assert checks.one_live_owner("grp_x") == [
        "sequence 5 (lease.renewed of wi): by b, but the live owner is a (lease lease-a)"]


def test_one_live_owner_finds_progress_after_the_lease_expired(monkeypatch):
    late = document(5, "work.progress_reported", {"phase": "late"}, "agent:a",
                    "2030-01-01T00:00:06Z", "wi")
    monkeypatch.setattr(checks.history, "history", lambda *a, **k: [*LOG, late])
    assert checks.one_live_owner("grp_x") == [
        "sequence 5 (work.progress_reported of wi): by a after its lease expired at "
        "2030-01-01T00:00:05+00:00"]


def test_one_live_owner_passes_an_orderly_log(monkeypatch):
    monkeypatch.setattr(checks.history, "history", lambda *a, **k: LOG)
    assert checks.one_live_owner("grp_x") == []


@pytest.mark.django_db
def test_partial_states_finds_a_record_without_its_events():
    group = World().group
    CommandRecord.objects.create(group=group, command_id="c-1", content_hash="sha256:x",
                                 type="work.progress", actor="agent:a", accepted=True,
                                 status=200, response={"sequences": [1, 2]},
                                 created_at="2030-01-01T00:00:00Z")
    assert checks.partial_states(group.id) == [
        "command c-1 was accepted with events 1..2 but the log holds 0 of its events"]
