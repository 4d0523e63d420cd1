"""Who may verify, approve and decide, through HTTP on PostgreSQL (the rules are
mission_weave/core/commands/authority.py's and the commands'): each refusal has its
PROTOCOL code, appends nothing, and leaves the log verifiable."""

from datetime import timedelta

import pytest

from apps.ledger.verify import verify_group
from mission_weave.protocol.timefmt import format_time
from tests.samples import contract
from tests.support import Scenario, assert_error, evidence, now


@pytest.fixture
def s(db):
    return Scenario()


def refused(s, response, status: int, code: str) -> dict:
    head = s.world.head
    error = assert_error(response, status, code)
    assert s.world.head == head
    return error


def submitted(s, worker=None) -> str:
    worker = worker or s.w1
    item_id, _ = s.running(worker)
    worker.ok("work.submit", {"contractRevision": 1, "artifacts": [s.deliver(item_id, worker)],
                              "evidence": [evidence(["ac1", "ac2"])]}, **s.lease_fields(item_id))
    return item_id


# --- 1. a Mission's owner and coordinator are authorization ------------------------------

def test_a_coordinator_of_the_group_cannot_steer_another_coordinators_mission(s):
    other = s.world.agent("c2-" + s.world.group.slug, roles=("coordinator",))
    item_id = s.authorize()

    error = refused(s, other.send("work.offer", {"candidates": [s.w1.name], "mode": "sequential",
                                                 "expiresAt": "2030-01-01T00:00:00Z"},
                                  workItemId=item_id), 403, "FORBIDDEN")

    assert error["details"] == {"missionId": s.mission_id, "allowed": [s.c.principal]}
    assert s.c.principal in error["message"]
    refused(s, other.send("work.authorize", {"missionId": s.mission_id,
                                             "contract": s.item(item_id)["contract"]}),
            403, "FORBIDDEN")
    assert s.item(item_id)["state"] == "open"
    assert verify_group(s.world.group.id) == []


def test_a_delegate_the_mission_names_may_coordinate_it(s):
    deputy = s.world.agent("dep-" + s.world.group.slug, roles=("coordinator",))
    mission_id = s.c.ok("mission.create", {
        "title": "Delegated", "ownerId": s.owner.principal, "coordinatorId": s.c.principal,
        "delegates": [deputy.principal]})[0]["missionId"]

    events = deputy.ok("work.authorize", {"missionId": mission_id, "contract": contract()})

    assert events[0]["type"] == "work.authorized"
    assert s.c.get(f"missions/{mission_id}").status_code == 200


def test_only_the_missions_owner_approves_it(s):
    other_owner = s.world.human("owner2-" + s.world.group.slug)
    item_id = submitted(s)
    s.accept_result(item_id)

    refused(s, other_owner.send("mission.approve", {"missionId": s.mission_id}),
            403, "FORBIDDEN")
    approved = s.owner.ok("mission.approve", {"missionId": s.mission_id})

    assert approved[0]["type"] == "mission.approved"


def test_mission_create_names_members_with_the_roles(s):
    for body, path in (({"ownerId": "user:nobody"}, "body.ownerId"),
                       ({"ownerId": s.w1.principal}, "body.ownerId"),
                       ({"coordinatorId": s.w1.principal}, "body.coordinatorId"),
                       ({"delegates": [s.w2.principal]}, "body.delegates[0]")):
        values = {"title": "M", "ownerId": s.owner.principal, "coordinatorId": s.c.principal,
                  **body}
        error = refused(s, s.c.send("mission.create", values), 400, "VALIDATION_ERROR")
        assert error["details"]["path"] == path


# --- 2. Evidence is its sender's ---------------------------------------------------------

def test_a_worker_cannot_submit_evidence_in_a_humans_name(s):
    item_id, _ = s.running(s.w1)
    forged = evidence(["ac1", "ac2"], producer=s.owner.principal, method="human-review")

    error = refused(s, s.w1.send("work.submit", {
        "contractRevision": 1, "artifacts": [s.deliver(item_id)], "evidence": [forged]},
        **s.lease_fields(item_id)), 403, "FORBIDDEN")

    assert error["details"] == {"path": "body.evidence[0].producer"}
    assert s.item(item_id)["state"] == "active"


# --- 4. acceptance waits for the review, or the Coordinator answers for it ---------------

def test_accepting_before_the_review_is_review_pending_and_an_empty_acceptance_is_refused(s):
    item_id = submitted(s)  # no Celery worker here: the review has not run

    pending = refused(s, s.c.send("work.accept_result", {"evidence": [evidence(["ac1"])]},
                                  workItemId=item_id), 409, "REVIEW_PENDING")
    empty = refused(s, s.c.send("work.accept_result", {}, workItemId=item_id),
                    409, "EVIDENCE_INCOMPLETE")
    verified = s.accept_result(item_id)  # the Coordinator's own Evidence for every criterion

    assert pending["details"] == {"pendingCriteria": ["ac2"], "verdict": "none"}
    assert empty["details"] == {"path": "body.evidence"}
    assert verified[0]["data"]["review"]["overridden"] == ["ac1", "ac2"]
    assert verify_group(s.world.group.id) == []


# --- 5. a submission delivers published artifacts ------------------------------------------

def test_a_submission_cites_published_artifacts_for_its_deliverables(s):
    item_id, _ = s.running(s.w1)
    other_id, _ = s.running(s.w2)
    elsewhere = s.deliver(other_id, s.w2)
    unknown = "sha256:" + "e" * 64

    missing = refused(s, s.w1.send("work.submit", {
        "contractRevision": 1, "evidence": [evidence(["ac1", "ac2"])]},
        **s.lease_fields(item_id)), 409, "EVIDENCE_INCOMPLETE")
    not_found = refused(s, s.w1.send("work.submit", {
        "contractRevision": 1, "artifacts": [unknown], "evidence": [evidence(["ac1", "ac2"])]},
        **s.lease_fields(item_id)), 404, "NOT_FOUND")
    other_item = refused(s, s.w1.send("work.submit", {
        "contractRevision": 1, "artifacts": [elsewhere],
        "evidence": [evidence(["ac1", "ac2"])]}, **s.lease_fields(item_id)),
        400, "VALIDATION_ERROR")

    assert missing["details"] == {"missingDeliverables": ["summary"]}
    assert not_found["details"]["path"] == "body.artifacts[0]"
    assert other_item["details"]["path"] == "body.artifacts[0]"
    assert s.item(item_id)["state"] == "active"


# --- 6. nothing verified, nothing to approve ---------------------------------------------

def test_an_empty_mission_cannot_be_approved(s):
    error = refused(s, s.owner.send("mission.approve", {"missionId": s.mission_id}),
                    409, "TRANSITION_NOT_PERMITTED")

    assert error["details"] == {"verified": 0}


# --- 12. no commitment past the deadline ---------------------------------------------------

def test_an_offer_cannot_be_accepted_past_the_contracts_deadline(db, clock):
    s = Scenario()
    deadline = now() + timedelta(minutes=10)
    item_id = s.authorize(deadline=format_time(deadline))
    s.offer(item_id, seconds=3600)
    clock.shift(timedelta(minutes=11))

    error = refused(s, s.w1.send("work.accept_offer", {"contractRevision": 1},
                                 workItemId=item_id), 409, "TRANSITION_NOT_PERMITTED")

    assert error["details"]["reason"] == "deadline"
    assert s.item(item_id)["state"] == "offered"
