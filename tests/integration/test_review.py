"""The review pipeline (§13.2) end to end, over HTTP, on PostgreSQL: a submission starts
the Celery tasks after its commit (eager here, a real worker in the last test), each step
appends its event as `system`, reviewer Evidence changes the evaluation, the Coordinator
decides, the MissionOwner approves, and mw_verify rebuilds it all from the log."""

import itertools
import json
import os

import pytest
from django.conf import settings as django_settings

from apps.artifacts.models import Blob
from apps.ledger.models import Event
from apps.ledger.verify import verify_group
from apps.review import tasks
from mission_weave.celery import app as celery_app
from tests.faults.procs import wait_until
from tests.integration.artifact_helpers import REVIEWED, published, submitted_json
from tests.integration.celery_worker import celery_worker
from tests.integration.test_races import post, race
from tests.support import Scenario, World, assert_error, contract, evidence

PIPELINE = ["work.submitted", "review.integrity_checked", "review.checks_completed",
            "review.evidence_requested", "review.evaluated"]

pytestmark = pytest.mark.usefixtures("blob_root")


def item_events(s: Scenario, item_id: str, after: int = 0) -> list:
    return list(Event.objects.filter(group_id=s.world.group.id, work_item_id=item_id,
                                     sequence__gt=after).order_by("sequence"))


def review_of(s: Scenario, item_id: str, actor=None) -> dict:
    response = (actor or s.c).get(f"work-items/{item_id}/review")
    assert response.status_code == 200, response.content
    return response.json()


def reviewer_of(s: Scenario):
    return s.world.agent("rev-" + s.world.group.slug, roles=("reviewer",))


# --- the whole pipeline ------------------------------------------------------------------------

def test_a_submission_whose_schema_check_fails_is_evaluated_as_failing(transactional_db,
                                                                        eager):
    s = Scenario()
    item_id, name = submitted_json(s, {"title": "Q3 summary", "words": 900})

    events = item_events(s, item_id)
    steps = events[-5:]
    review = review_of(s, item_id)

    assert [e.type for e in steps] == PIPELINE
    assert [e.actor for e in steps[1:]] == ["system"] * 4
    integrity = steps[1].data
    assert integrity["result"] == "fail"
    assert integrity["artifacts"][0]["result"] == "pass"  # stored and intact
    assert integrity["schemas"] == [{
        "deliverableId": "summary", "artifacts": [name], "result": "fail",
        "detail": f"{name}: .words: 900 is greater than the maximum of 500"}]
    assert steps[2].data["checks"][0]["result"] == "pass"  # 44 bytes is under 1 KiB
    assert steps[3].data["criteria"] == ["ac1"]
    evaluation = steps[4].data
    assert (evaluation["verdict"], evaluation["integrity"]) == ("fail", "fail")
    assert review["state"] == "submitted"
    assert review["review"]["evaluation"]["verdict"] == "fail"
    assert [e["type"] for e in review["history"]] == PIPELINE
    assert s.item(item_id)["review"] == review["review"]

    refused = s.c.send("work.accept_result", {}, workItemId=item_id)
    assert_error(refused, 409, "EVIDENCE_INCOMPLETE")
    s.c.ok("work.fail", {"evidence": [evidence(["ac1", "ac2"], producer=s.c.principal,
                                                result="fail: the summary breaks its schema")],
                         "reason": "schema"}, workItemId=item_id)
    assert s.item(item_id)["state"] == "failed"
    assert review_of(s, item_id)["review"]["evaluation"]["verdict"] == "fail"  # kept
    assert verify_group(s.world.group.id) == []


def test_a_passing_submission_is_reviewed_accepted_and_approved(transactional_db, eager):
    s = Scenario()
    reviewer = reviewer_of(s)
    item_id, name = submitted_json(s, {"title": "Q3 summary", "words": 320})
    first = review_of(s, item_id)["review"]

    assert first["integrity"]["result"] == "pass"
    assert first["checks"]["result"] == "pass"
    assert (first["evaluation"]["verdict"], first["evaluation"]["pending"]) == ("pending",
                                                                                 ["ac1"])

    # A reviewer fails the semantic criterion, then, after a discussion, passes it.
    head = s.world.head
    reviewer.ok("evidence.record", {"evidence": [evidence(
        ["ac1"], producer=reviewer.principal, result="fail: misses the outlook section",
        method="read against the report", artifacts=[name])]}, workItemId=item_id)
    failing = review_of(s, item_id)["review"]["evaluation"]
    reviewer.ok("evidence.record", {"evidence": [evidence(
        ["ac1"], producer=reviewer.principal, result="pass: the outlook is in paragraph 4",
        method="read against the report", artifacts=[name])]}, workItemId=item_id)
    passing = review_of(s, item_id)["review"]["evaluation"]

    assert [e.type for e in item_events(s, item_id, head)] == [
        "evidence.recorded", "review.evaluated", "evidence.recorded", "review.evaluated"]
    assert (failing["verdict"], failing["failing"]) == ("fail", ["ac1"])
    assert (passing["verdict"], passing["failing"], passing["pending"]) == ("pass", [], [])
    assert len(passing["criteria"][0]["reviewerEvidence"]) == 2

    verified = s.c.ok("work.accept_result", {"evidence": [evidence(
        ["ac1", "ac2"], result="pass: the review passed; I read it too")]}, workItemId=item_id)
    assert verified[0]["data"]["review"] == {
        "submissionRevision": first["submissionRevision"], "verdict": "pass",
        "integrity": "pass", "overridden": []}
    approved = s.owner.ok("mission.approve", {"missionId": s.mission_id})
    assert approved[0]["type"] == "mission.approved"

    # Everything the MissionOwner approved on is still there to read.
    final = review_of(s, item_id, actor=s.owner)
    assert final["state"] == "verified"
    assert final["review"]["evaluation"] == passing
    assert [e["type"] for e in final["history"]] == [
        *PIPELINE, "evidence.recorded", "review.evaluated", "evidence.recorded",
        "review.evaluated", "work.verified"]
    assert verify_group(s.world.group.id) == []


def test_a_blob_corrupted_on_disk_fails_integrity_and_is_flagged(transactional_db, eager,
                                                                  blob_root):
    s = Scenario()
    item_id, _ = s.running(s.w1, **REVIEWED)
    name = published(s, item_id, json.dumps({"title": "Q3", "words": 10}).encode(),
                     mediaType="application/json")
    hex_digest = name.split(":", 1)[1]
    stored = blob_root / "store" / hex_digest[:2] / hex_digest[2:4] / hex_digest
    stored.write_bytes(b'{"title": "x"}')  # the disk changes under the store

    s.w1.ok("work.submit", {"contractRevision": 1, "artifacts": [name], "evidence": [
        evidence(["ac1", "ac2"], artifacts=[name])]}, **s.lease_fields(item_id))
    integrity = review_of(s, item_id)["review"]["integrity"]

    assert integrity["result"] == "fail"
    assert integrity["artifacts"][0]["intact"] is False
    assert Blob.objects.get(hash=name).corrupted_at is not None
    assert verify_group(s.world.group.id) == []


# --- idempotent, and only for the submission scheduled ------------------------------------------

def test_steps_run_again_or_late_append_nothing(transactional_db, eager):
    s = Scenario()
    item_id, _ = submitted_json(s, {"title": "Q3", "words": 10})
    revision = review_of(s, item_id)["review"]["submissionRevision"]
    head = s.world.head
    group = s.world.group.id

    for task in (tasks.check_integrity, tasks.run_checks, tasks.request_evidence,
                 tasks.evaluate):
        task.apply(args=(group, item_id, revision))
    assert s.world.head == head  # a duplicated delivery of every step: nothing new

    s.c.ok("work.cancel", {"reason": "no longer needed"}, workItemId=item_id)
    head = s.world.head
    tasks.evaluate.apply(args=(group, item_id, revision))
    tasks.check_integrity.apply(args=(group, item_id, revision - 1))  # an older submission
    assert s.world.head == head
    assert verify_group(group) == []


def test_reviewer_evidence_racing_the_evaluation_ends_evaluated_with_it(transactional_db,
                                                                        eager):
    """Reviewer Evidence (whose commit schedules an evaluation) and two more evaluations,
    in threads at once: the Group lock orders them, and the last evaluation has the
    Evidence, whichever came first."""
    s = Scenario()
    reviewer = reviewer_of(s)
    item_id, _ = submitted_json(s, {"title": "Q3", "words": 10})
    revision = review_of(s, item_id)["review"]["submissionRevision"]
    head = s.world.head
    envelope = reviewer.envelope("evidence.record", {"evidence": [evidence(
        ["ac1"], producer=reviewer.principal, result="pass: complete")]}, workItemId=item_id)
    group = s.world.group.id

    answers = race([
        lambda: post(reviewer.token, group, envelope)[0],
        lambda: tasks.evaluate.apply(args=(group, item_id, revision)).successful(),
        lambda: tasks.evaluate.apply(args=(group, item_id, revision)).successful()])

    assert answers == [200, True, True]
    evaluations = [e.data for e in item_events(s, item_id, head) if e.type == "review.evaluated"]
    assert evaluations[-1]["verdict"] == "pass"
    assert all(a != b for a, b in itertools.pairwise(evaluations))  # never twice the same
    assert review_of(s, item_id)["review"]["evaluation"] == {
        k: v for k, v in evaluations[-1].items() if k != "submissionRevision"}
    assert verify_group(group) == []


def test_resume_finishes_a_review_whose_tasks_were_lost(db, eager):
    # Without a commit no task was scheduled: the same as a broker that lost them.
    s = Scenario()
    item_id, _ = submitted_json(s, {"title": "Q3", "words": 10})
    assert review_of(s, item_id)["review"]["integrity"] is None

    scheduled = tasks.resume.apply().get()

    assert scheduled >= 1
    assert [e.type for e in item_events(s, item_id)][-5:] == PIPELINE
    assert review_of(s, item_id)["review"]["evaluation"]["verdict"] == "pending"
    assert verify_group(s.world.group.id) == []


def test_beat_resumes_reviews(settings):
    entry = settings.CELERY_BEAT_SCHEDULE["review-resume"]
    assert entry["task"] == tasks.resume.name
    assert entry["schedule"] == settings.MW_REVIEW_RESUME_SECONDS


# --- evidence.record refusals, and who may read --------------------------------------------------

def test_evidence_record_refusals_append_nothing(db):
    s = Scenario()
    reviewer = reviewer_of(s)
    item_id, _ = s.running(s.w1)
    head = s.world.head

    not_submitted = reviewer.send("evidence.record", {"evidence": [evidence(
        ["ac1"], producer=reviewer.principal)]}, workItemId=item_id)
    s.w1.ok("work.submit", {"contractRevision": 1, "artifacts": [s.deliver(item_id)],
                            "evidence": [evidence(["ac1", "ac2"])]}, **s.lease_fields(item_id))
    head = s.world.head
    by_worker = s.w2.send("evidence.record", {"evidence": [evidence(
        ["ac1"], producer=s.w2.principal)]}, workItemId=item_id)
    with_reasoning = reviewer.send("evidence.record", {"evidence": [evidence(
        ["ac1"], producer=reviewer.principal,
        chainOfThought="I first assumed the outlook was missing")]}, workItemId=item_id)
    forged = reviewer.send("evidence.record", {"evidence": [evidence(
        ["ac1"], producer=s.c.principal)]}, workItemId=item_id)
    vague = reviewer.send("evidence.record", {"evidence": [evidence(
        ["ac1"], producer=reviewer.principal, result="looks ok")]}, workItemId=item_id)

    assert_error(not_submitted, 409, "TRANSITION_NOT_PERMITTED")
    assert_error(by_worker, 403, "FORBIDDEN")
    error = assert_error(with_reasoning, 400, "VALIDATION_ERROR")
    assert "chainOfThought" in error["message"]
    assert_error(forged, 403, "FORBIDDEN")
    assert_error(vague, 400, "VALIDATION_ERROR")
    assert s.world.head == head
    recorded = s.c.ok("evidence.record", {"evidence": [evidence(
        ["ac2"], producer=s.c.principal, result="pass")]}, workItemId=item_id)
    assert recorded[0]["type"] == "evidence.recorded"  # a coordinator may record too
    assert verify_group(s.world.group.id) == []


def test_the_review_is_read_by_members_only(db):
    s = Scenario()
    item_id, _ = s.running(s.w1)
    outsider = World().agent("outsider-" + s.world.group.slug, roles=("coordinator",))

    answer = outsider.client.get(f"/api/v1/groups/{s.world.group.id}/work-items/{item_id}/review",
                                 HTTP_AUTHORIZATION=f"Bearer {outsider.token}")
    missing = s.c.get("work-items/wi-nope/review")

    assert_error(answer, 403, "NOT_A_MEMBER")
    assert_error(missing, 404, "NOT_FOUND")
    assert review_of(s, item_id)["review"] is None  # not submitted yet


def test_an_unknown_check_in_a_contract_is_refused_at_authorize(db):
    s = Scenario()
    response = s.c.send("work.authorize", {"missionId": s.mission_id, "contract": contract(
        acceptanceCriteria=[{"id": "ac1", "description": "x", "method": "check:shell"}])})

    error = assert_error(response, 400, "INVALID_CONTRACT")
    assert error["details"]["path"] == "body.contract.acceptanceCriteria[0].method"


# --- a real Celery worker ------------------------------------------------------------------------

@pytest.mark.slow
def test_a_real_celery_worker_runs_the_pipeline(transactional_db, tmp_path):
    if celery_app.conf.task_always_eager or not os.environ.get("REDIS_URL"):
        pytest.skip("needs REDIS_URL as the broker")
    # our Redis as the broker, the same blob directory
    with celery_worker(tmp_path, MW_BLOB_ROOT=str(django_settings.MW_BLOB_ROOT)) as worker:
        s = Scenario()
        item_id, _ = submitted_json(s, {"title": "Q3", "words": 900})
        wait_until(lambda: (review_of(s, item_id)["review"] or {}).get("evaluation") is not None,
                   30, "evaluation", process=worker, logs=[tmp_path / "celery.log"])

    assert [e.type for e in item_events(s, item_id)][-5:] == PIPELINE
    assert review_of(s, item_id)["review"]["evaluation"]["verdict"] == "fail"
    assert verify_group(s.world.group.id) == []
