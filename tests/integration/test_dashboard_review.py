"""Why an item was verified, in the browser's terms (issue 5): a submission with a JSON
artifact goes through the review pipeline (Celery, eager here), a reviewer's Evidence
arrives, and the dashboard shows each step, each criterion's Evidence and verdict, the
artifact with its download and provenance; the Coordinator decides and the MissionOwner
approves through the dashboard's forms, and mw_verify rebuilds it all from the log."""

import json
import re

import pytest

from apps.ledger.models import Event
from apps.ledger.verify import verify_group
from tests.integration.artifact_helpers import submitted_json
from tests.support import Scenario, evidence

pytestmark = pytest.mark.usefixtures("blob_root")


def criteria(html: str) -> dict:
    return {m.group(1): m.group(0) for m in re.finditer(
        r'<tr data-criterion="([^"]+)">.*?</tr>', html, re.S)}


def html_of(actor, path: str) -> str:
    response = actor.client.get(path)
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def test_a_human_sees_why_an_item_was_verified_and_approves(transactional_db, eager):
    s = Scenario()
    coordinator = s.world.human("hc-" + s.world.group.slug, roles=("coordinator",))
    s.coordinated_by(coordinator)
    reviewer = s.world.agent("rev-" + s.world.group.slug, roles=("reviewer",))
    document = {"title": "Q3 summary", "words": 320}
    item_id, name = submitted_json(s, document, result="pass: covers all four sections")
    url = f"/g/{s.world.group.id}/work-items/{item_id}/"

    waiting = html_of(coordinator, url)
    reviewer.ok("evidence.record", {"evidence": [evidence(
        ["ac1"], producer=reviewer.principal, result="pass: the outlook is in paragraph 4",
        method="read against the report", artifacts=[name])]}, workItemId=item_id)
    reviewed = html_of(coordinator, url)
    accepted = coordinator.client.post(url + "accept", {"note": "the review passed"})
    decided = html_of(s.owner, url)
    blob = s.owner.client.get(f"/api/v1/blobs/{name}")
    lineage = html_of(s.owner, f"/g/{s.world.group.id}/artifacts/{name}/")
    approved = s.owner.client.post(f"/g/{s.world.group.id}/missions/{s.mission_id}/approve",
                                   {"comment": "read the Evidence"})

    # Before the reviewer: the steps ran, ac2 passed its check, ac1 waits.
    assert 'id="evaluation-verdict">pending<' in waiting
    assert 'verdict-pass">pass<' in criteria(waiting)["ac2"]
    assert "check:max-size:1024" in criteria(waiting)["ac2"]
    assert "awaiting reviewer Evidence" in criteria(waiting)["ac1"]
    assert "1 artifact(s) validate against the schema" in waiting
    assert "for ac1 (from reviewer or coordinator)" in waiting
    # After: the reviewer's Evidence decides ac1, and the combined evaluation passes.
    ac1 = criteria(reviewed)["ac1"]
    assert "pass: the outlook is in paragraph 4" in ac1
    assert "reviewer Evidence" in ac1 and reviewer.principal in ac1
    assert "pass: covers all four sections" in ac1  # the worker's claim, beside it
    assert 'id="evaluation-verdict">pass<' in reviewed
    # The Coordinator's acceptance, and why, as the MissionOwner reads it.
    assert accepted.status_code == 302
    verified = Event.objects.get(group_id=s.world.group.id, work_item_id=item_id,
                                 type="work.verified")
    assert verified.actor == coordinator.principal
    assert verified.data["review"]["verdict"] == "pass"
    assert 'id="item-state">verified<' in decided
    assert f"Accepted by <strong>{coordinator.principal}</strong>" in decided
    assert 'verdict-pass">pass</span>' in decided and "pass: the review passed" in decided
    # The artifact: its download link (the reader's content endpoint) and the API serve the
    # bytes, its page the manifest.
    assert f'href="/g/{s.world.group.id}/artifacts/{name}/content?download=1"' in decided
    assert f'href="/g/{s.world.group.id}/artifacts/{name}/"' in decided
    assert blob.status_code == 200
    assert b"".join(blob.streaming_content) == json.dumps(document).encode()
    assert "application/json" in lineage and s.w1.name in lineage
    # The final Approval.
    assert approved.status_code == 302
    assert Event.objects.filter(group_id=s.world.group.id, type="mission.approved",
                                actor=s.owner.principal).count() == 1
    assert verify_group(s.world.group.id) == []


def test_accepting_a_failed_review_needs_a_reason_and_records_the_override(transactional_db,
                                                                          eager):
    s = Scenario()
    coordinator = s.world.human("hc-" + s.world.group.slug, roles=("coordinator",))
    s.coordinated_by(coordinator)
    item_id, _ = submitted_json(s, {"title": "Q3 summary", "words": 900})  # breaks the schema
    url = f"/g/{s.world.group.id}/work-items/{item_id}/"
    head = s.world.head

    page = html_of(coordinator, url)
    silent = coordinator.client.post(url + "accept", {})
    noted = coordinator.client.post(url + "accept", {"note": "the client asked for it"})
    head_after_silent = s.world.head
    reasoned = coordinator.client.post(url + "accept", {
        "note": "the client asked for it", "override-ac1": "900 words was agreed by mail"})
    verified = Event.objects.get(group_id=s.world.group.id, work_item_id=item_id,
                                 type="work.verified")

    assert 'id="evaluation-verdict">fail<' in page
    assert ".words: 900 is greater than the maximum of 500" in page
    # ac2 passed its check: only ac1 (awaiting a reviewer) and integrity are overridden
    assert ("Accepting overrides the failed artifact integrity and the criteria that have "
            "not passed: ac1. Give a reason for each") in page
    assert silent.status_code == noted.status_code == 400
    assert 'data-code="VALIDATION_ERROR"' in silent.content.decode()
    assert 'name="override-ac1"' in noted.content.decode()  # the reason still asked for
    assert head_after_silent == head
    assert reasoned.status_code == 302
    assert verified.data["review"] == {"submissionRevision": verified.data["review"][
        "submissionRevision"], "verdict": "fail", "integrity": "fail", "overridden": ["ac1"]}
    decided = html_of(s.owner, url)
    assert ("artifact integrity failed, accepted over it; criteria overridden by the "
            "decision's own Evidence: ac1.") in decided
    assert "pass: 900 words was agreed by mail" in decided
    assert verify_group(s.world.group.id) == []


def test_after_a_failure_no_criterion_says_it_awaits_reviewer_evidence(transactional_db, eager):
    s = Scenario()
    coordinator = s.world.human("hc-" + s.world.group.slug, roles=("coordinator",))
    s.coordinated_by(coordinator)
    item_id, _ = submitted_json(s, {"title": "Q3 summary", "words": 300})
    url = f"/g/{s.world.group.id}/work-items/{item_id}/"

    before = criteria(html_of(coordinator, url))
    coordinator.client.post(url + "fail", {"reason": "misses section 3", "criteria": ["ac1"]})
    after = criteria(html_of(coordinator, url))

    assert "awaiting reviewer Evidence" in before["ac1"]  # ac1 has no check: a reviewer's
    assert "awaiting reviewer Evidence" not in after["ac1"]
    assert "the submission was failed before a reviewer gave Evidence" in after["ac1"]


def test_before_a_submission_a_criterion_says_nothing_was_submitted(transactional_db):
    s = Scenario()
    item_id = s.authorize()
    s.offer(item_id, s.w1)
    url = f"/g/{s.world.group.id}/work-items/{item_id}/"

    rows = criteria(html_of(s.owner, url)).values()

    assert rows and all("nothing submitted yet" in row for row in rows)
    assert not any("not decided by the review" in row for row in rows)
