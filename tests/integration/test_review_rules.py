"""The review rules of issue 24 (PROTOCOL §2 "Review rules") through HTTP on PostgreSQL:
no one reviews their own work; a deliverable is this WorkItem's and Evidence cites only
its Mission's artifacts; acceptance decides on every Evidence recorded before it and names
what it overrides (and the dashboard shows it); a manifest's agentCardVersion is one the
producer's card has had. Each refusal appends nothing, and the log stays verifiable."""

import pytest

from apps.identity import registry
from apps.identity.models import Agent
from apps.ledger.models import Event
from apps.ledger.verify import verify_group
from apps.review import tasks
from mission_weave.protocol.canonical import public_key_b64url
from tests.integration.artifact_helpers import publish, submitted_json
from tests.support import Scenario, assert_error, evidence

pytestmark = pytest.mark.usefixtures("blob_root")


def refused(s, response, status: int, code: str) -> dict:
    head = s.world.head
    error = assert_error(response, status, code)
    assert s.world.head == head
    return error


def test_an_agent_holding_worker_and_reviewer_cannot_review_its_own_submission(db):
    s = Scenario()
    both = s.world.agent("wr-" + s.world.group.slug, roles=("worker", "reviewer"))
    reviewer = s.world.agent("rev-" + s.world.group.slug, roles=("reviewer",))
    item_id, _ = s.running(both)
    both.ok("work.submit", {"contractRevision": 1, "artifacts": [s.deliver(item_id, both)],
                            "evidence": [evidence(["ac1", "ac2"])]}, **s.lease_fields(item_id))
    own = {"evidence": [evidence(["ac1"], result="pass: my summary is complete")]}

    error = refused(s, both.send("evidence.record", own, workItemId=item_id), 403, "FORBIDDEN")
    recorded = reviewer.ok("evidence.record", {"evidence": [evidence(
        ["ac1"], result="pass: every section is covered")]}, workItemId=item_id)

    assert error["details"] == {"submittedBy": both.name, "ownershipEpoch": 1}
    assert "no one reviews or accepts their own work" in error["message"]
    assert [e["type"] for e in recorded] == ["evidence.recorded"]
    assert verify_group(s.world.group.id) == []


def test_deliverables_are_this_work_items_and_evidence_cites_its_own_mission(db):
    s = Scenario()
    item_id, _ = s.running(s.w1)
    sibling_id, _ = s.running(s.w2)
    sibling = s.deliver(sibling_id, s.w2)
    own = s.deliver(item_id)
    s.coordinated_by(s.c)  # a second Mission of the Group
    other_id, _ = s.running(s.w2)
    foreign = s.deliver(other_id, s.w2)

    not_ours = refused(s, s.w1.send("work.submit", {"contractRevision": 1, "evidence": [
        evidence(["ac1", "ac2"], subject="deliverable:summary", artifacts=[sibling])]},
        **s.lease_fields(item_id)), 400, "VALIDATION_ERROR")
    other_mission = refused(s, s.w1.send("work.submit", {
        "contractRevision": 1, "artifacts": [own], "evidence": [
            evidence(["ac1", "ac2"], subject=f"workItem:{item_id}", artifacts=[foreign])]},
        **s.lease_fields(item_id)), 400, "VALIDATION_ERROR")
    s.w1.ok("work.submit", {"contractRevision": 1, "artifacts": [own], "evidence": [
        evidence(["ac1", "ac2"], subject=f"workItem:{item_id}", artifacts=[own, sibling])]},
        **s.lease_fields(item_id))
    accepted_over_foreign = refused(s, s.c.send("work.accept_result", {"evidence": [evidence(
        ["ac1", "ac2"], result="pass: as the other Mission's", artifacts=[foreign])]},
        workItemId=item_id), 400, "VALIDATION_ERROR")

    assert not_ours["details"] == {"path": "body.evidence[0].artifacts[0]", "hash": sibling}
    assert f"was published for WorkItem {sibling_id}" in not_ours["message"]
    assert other_mission["details"] == {"path": "body.evidence[0].artifacts[0]",
                                        "hash": foreign}
    assert accepted_over_foreign["details"] == other_mission["details"]
    assert verify_group(s.world.group.id) == []


def test_a_manifest_names_an_agent_card_version_its_producer_has_had(db):
    s = Scenario()
    item_id, _ = s.running(s.w1)
    registry.register_agent(s.w1.name, public_key_b64url(s.w1.key), {
        "version": "2", "capabilities": [{"id": "summarize", "version": "2"}],
        "maxConcurrency": 4})

    earlier = publish(s, item_id, b"made under card 1", agentCardVersion="1")
    current = publish(s, item_id, b"made under card 2", agentCardVersion="2")
    unknown = refused(s, publish(s, item_id, b"made under no card", agentCardVersion="3"),
                      400, "VALIDATION_ERROR")

    assert Agent.objects.get(id=s.w1.name).card_versions == ["1", "2"]
    assert (earlier.status_code, current.status_code) == (200, 200), earlier.json()
    assert unknown["details"] == {"path": "body.agentCardVersion", "knownVersions": ["1", "2"]}
    assert verify_group(s.world.group.id) == []


def test_acceptance_sees_reviewer_evidence_recorded_after_the_evaluation(transactional_db,
                                                                         eager, monkeypatch):
    s = Scenario()
    first = s.world.agent("rev1-" + s.world.group.slug, roles=("reviewer",))
    second = s.world.agent("rev2-" + s.world.group.slug, roles=("reviewer",))
    item_id, name = submitted_json(s, {"title": "Q3 summary", "words": 320})
    first.ok("evidence.record", {"evidence": [evidence(
        ["ac1"], result="pass: every section is there", artifacts=[name])]}, workItemId=item_id)
    monkeypatch.setattr(tasks, "_enqueue", lambda *args: None)  # its evaluation lags behind
    second.ok("evidence.record", {"evidence": [evidence(
        ["ac1"], result="fail: the outlook section is missing", artifacts=[name])]},
        workItemId=item_id)
    stale = s.c.get(f"work-items/{item_id}/review").json()["review"]["evaluation"]

    waved = refused(s, s.c.send("work.accept_result", {"evidence": [evidence(
        ["ac2"], result="pass: the size check passed")]}, workItemId=item_id),
        409, "EVIDENCE_INCOMPLETE")
    events = s.c.ok("work.accept_result", {"evidence": [evidence(
        ["ac1", "ac2"], result="pass: the outlook is in the appendix, agreed by mail")]},
        workItemId=item_id)
    page = s.owner.client.get(f"/g/{s.world.group.id}/work-items/{item_id}/").content.decode()

    assert waved["details"] == {"failingCriteria": ["ac1"], "verdict": "fail"}
    assert [e["type"] for e in events] == ["review.evaluated", "work.verified"]
    assert events[0]["data"]["verdict"] == "fail"
    assert events[1]["data"]["review"] == {
        "submissionRevision": events[0]["data"]["submissionRevision"], "verdict": "fail",
        "integrity": "pass", "overridden": ["ac1"]}  # ac2 passed its check: not overridden
    assert "criteria overridden by the decision's own Evidence: ac1." in page
    assert stale["verdict"] == "pass"  # the second reviewer's Evidence came after it
    assert Event.objects.filter(group_id=s.world.group.id, work_item_id=item_id,
                                type="review.evaluated").count() == 3
    assert verify_group(s.world.group.id) == []


def test_an_acceptance_that_overrides_nothing_says_so(transactional_db, eager):
    s = Scenario()
    reviewer = s.world.agent("rev-" + s.world.group.slug, roles=("reviewer",))
    item_id, name = submitted_json(s, {"title": "Q3 summary", "words": 320})
    reviewer.ok("evidence.record", {"evidence": [evidence(
        ["ac1"], result="pass: every section is there", artifacts=[name])]}, workItemId=item_id)

    s.c.ok("work.accept_result", {"evidence": [evidence(["ac1", "ac2"], result="pass")]},
           workItemId=item_id)
    page = s.owner.client.get(f"/g/{s.world.group.id}/work-items/{item_id}/").content.decode()

    assert "; no criterion overridden." in page
