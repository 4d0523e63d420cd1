"""The review rules of issue 24 in the pure core (PROTOCOL §2 "Review rules"):

1. no one reviews their own work: evidence.record from the agent that owned the WorkItem
   during the submitted attempt is FORBIDDEN, whatever its roles;
2. a deliverable is an artifact published for this WorkItem, however it is cited; Evidence,
   manifest `sources` (and Context Packages) cite only their Mission's artifacts or
   reusable ones (VALIDATION_ERROR naming the field; NOT_FOUND for an unknown one);
3. work.accept_result decides on the review evaluated again with all recorded Evidence,
   and `overridden` names exactly the criteria that had not passed;
4. a manifest's agentCardVersion is a version the producer's Agent Card has had.
Each test here failed before these rules."""

from dataclasses import replace

import pytest

from mission_weave.core import commands, evidence_review, records, state
from mission_weave.protocol.errors import ProtocolError
from tests.unit import builders
from tests.unit.builders import (
    AGENT,
    ALL_ROLES,
    COORDINATOR,
    DELIVERABLE,
    ITEM_ID,
    MISSION_ID,
    WORKER,
    evidence,
    iso,
)
from tests.unit.test_manifests import GROUP, active_view, decide_publish, manifest, publish_context
from tests.unit.test_review import REVIEWER, reviewed, submitted_item, with_evaluation

OTHER_MISSION = "msn_2"
OTHER_ITEM = "wi_2"
SIBLING, FOREIGN, SHARED, RECEIVED, SOURCE = ("sha256:" + c * 64 for c in "56789")


def refusal(call) -> ProtocolError:
    with pytest.raises(ProtocolError) as raised:
        call()
    return raised.value


def artifact(name: str, mission_id: str = MISSION_ID, item_id: str | None = OTHER_ITEM,
             origin: str = records.PUBLISHED, classification: str = "internal", sources=(),
             approved: bool = False) -> dict:
    """An artifact record of this Group as evolve leaves it."""
    document = {"hash": name, "mediaType": "text/markdown", "schema": None,
                "missionId": mission_id, "workItemId": item_id, "groupId": GROUP,
                "producer": WORKER, "classification": classification, "sources": list(sources)}
    received = ({"groupId": "grp_src", "approval": {"id": "fwa_src", "approvedBy": "user:x",
                                                    "approvedAt": iso(0)}}
                if origin == records.RECEIVED else None)
    record = records.artifact_record(document, origin, AGENT, iso(0), received)
    if approved:
        record["forwardingApprovals"] = [{"id": "fwa_1", "targetGroupId": GROUP,
                                          "by": builders.HUMAN, "at": iso(0), "comment": None}]
    return record


def world(item: state.WorkItem) -> state.View:
    """`item` of Mission msn_1 with its deliverable, beside Mission msn_2, and artifacts:
    SIBLING (another WorkItem of msn_1), FOREIGN (of msn_2), SHARED (of msn_2, published
    for reuse and approved for this Group), RECEIVED (forwarded here with an approval)."""
    view = builders.with_deliverable(builders.view_of(
        item, missions=[builders.mission(), builders.mission(OTHER_MISSION)]))
    for record in (artifact(SIBLING), artifact(FOREIGN, OTHER_MISSION),
                   artifact(SHARED, OTHER_MISSION, classification="public", sources=[FOREIGN],
                            approved=True),
                   artifact(RECEIVED, "msn_src", origin=records.RECEIVED)):
        view.artifacts[record["hash"]] = record
    return view


def decide(view, command_type, body, item, actor=AGENT, roles=ALL_ROLES):
    command = builders.command(command_type, body, item, actor=actor, roles=frozenset(roles))
    return commands.decide(view, command, builders.context())


def submit_body(artifacts=(DELIVERABLE,), cited=(), subject="workItem:wi_1") -> dict:
    return {"contractRevision": 1, "artifacts": list(artifacts),
            "evidence": [evidence(["ac1", "ac2"], subject=subject, artifacts=list(cited))]}


def submitted_world():
    """An active item submitted by its owner w1 through work.submit: (view, drafts)."""
    item = builders.work_item(state.ACTIVE)
    view = world(item)
    drafts = decide(view, "work.submit", submit_body(), item, roles={"worker"})
    return builders.apply(view, drafts), drafts


# --- 1. no one reviews their own work ------------------------------------------------------

def test_work_submitted_records_who_submitted_under_which_ownership_epoch():
    view, drafts = submitted_world()

    assert (drafts[0].data["agentId"], drafts[0].data["ownershipEpoch"]) == (WORKER, 1)
    submission = view.items[ITEM_ID].submission
    assert (submission["agentId"], submission["ownershipEpoch"]) == (WORKER, 1)


@pytest.mark.parametrize("roles", [{"worker", "reviewer"}, {"coordinator"}, ALL_ROLES])
def test_the_agent_that_submitted_cannot_record_evidence_on_it_whatever_its_roles(roles):
    view, _ = submitted_world()
    item = view.items[ITEM_ID]
    # w1 is the Mission's Coordinator too: a coordinator's review is the Mission's own
    view.missions[MISSION_ID] = replace(view.missions[MISSION_ID], coordinator_id=AGENT)
    own = {"evidence": [evidence(["ac1"], record_id="r1", result="pass: looks right")]}

    error = refusal(lambda: decide(view, "evidence.record", own, item, roles=roles))
    others = decide(view, "evidence.record", {"evidence": [evidence(
        ["ac1"], record_id="r2", producer=REVIEWER, result="pass: read it")]}, item,
        actor=REVIEWER, roles={"reviewer"})

    assert error.code == "FORBIDDEN"
    assert error.details == {"submittedBy": WORKER, "ownershipEpoch": 1}
    assert "no one reviews or accepts their own work" in error.message
    assert [d.type for d in others] == ["evidence.recorded"]


def test_the_agent_that_submitted_cannot_accept_it_as_the_missions_coordinator():
    view, _ = submitted_world()
    item = view.items[ITEM_ID]
    view.missions[MISSION_ID] = replace(view.missions[MISSION_ID], coordinator_id=AGENT)
    own = {"evidence": [evidence(["ac1", "ac2"], record_id="c1", result="pass: mine")]}

    error = refusal(lambda: decide(view, "work.accept_result", own, item,
                                   roles={"worker", "coordinator"}))

    assert (error.code, error.details["submittedBy"]) == ("FORBIDDEN", WORKER)


def test_a_submission_of_an_older_log_is_known_by_the_lease_it_closed():
    item = submitted_item()  # work.submitted without agentId, as logs before issue 24 hold
    assert "agentId" not in item.submission

    error = refusal(lambda: decide(builders.view_of(item), "evidence.record", {"evidence": [
        evidence(["ac1"], record_id="r1")]}, item, roles={"worker", "reviewer"}))

    assert error.code == "FORBIDDEN"


def test_the_owner_of_an_earlier_attempt_may_review_a_later_one():
    view, _ = submitted_world()
    later = view.items[ITEM_ID]
    later = replace(later, submission={**later.submission, "agentId": "w2",
                                       "ownershipEpoch": 2})
    view.items[ITEM_ID] = later

    drafts = decide(view, "evidence.record", {"evidence": [evidence(
        ["ac1"], record_id="r1", result="pass")]}, later, roles={"reviewer"})

    assert [d.type for d in drafts] == ["evidence.recorded"]


# --- 2. deliverables and what Evidence, sources and packages may cite ----------------------

def test_a_deliverable_cited_only_in_evidence_is_published_for_this_work_item():
    item = builders.work_item(state.ACTIVE)
    body = submit_body(artifacts=(), cited=[SIBLING], subject="deliverable:summary")

    error = refusal(lambda: decide(world(item), "work.submit", body, item))

    assert error.code == "VALIDATION_ERROR"
    assert error.details == {"path": "body.evidence[0].artifacts[0]", "hash": SIBLING}
    assert f"was published for WorkItem {OTHER_ITEM}, not for {ITEM_ID}" in error.message


@pytest.mark.parametrize(("name", "why"), [
    (RECEIVED, "was received from Group grp_src"),
    (SHARED, f"was published for WorkItem {OTHER_ITEM}"),
])
def test_a_received_or_reusable_artifact_is_no_deliverable(name, why):
    item = builders.work_item(state.ACTIVE)

    error = refusal(lambda: decide(world(item), "work.submit", submit_body([name]), item))

    assert (error.code, error.details["path"]) == ("VALIDATION_ERROR", "body.artifacts[0]")
    assert why in error.message


def test_an_artifact_cited_by_other_evidence_delivers_nothing():
    item = builders.work_item(state.ACTIVE)
    # the deliverable is cited, but only by Evidence about the work, not as the deliverable
    body = submit_body(artifacts=(), cited=[DELIVERABLE])

    error = refusal(lambda: decide(world(item), "work.submit", body, item))

    assert (error.code, error.details) == ("EVIDENCE_INCOMPLETE",
                                           {"missingDeliverables": ["summary"]})


def test_submission_evidence_cites_its_missions_artifacts_and_reusable_ones_only():
    item = builders.work_item(state.ACTIVE)

    error = refusal(lambda: decide(world(item), "work.submit",
                                   submit_body(cited=[SIBLING, FOREIGN]), item))
    cited = decide(world(item), "work.submit", submit_body(cited=[SIBLING, SHARED, RECEIVED]),
                   item)

    assert error.code == "VALIDATION_ERROR"
    assert error.details == {"path": "body.evidence[0].artifacts[1]", "hash": FOREIGN}
    assert f"belongs to Mission {OTHER_MISSION}, not to Mission {MISSION_ID}" in error.message
    assert [d.type for d in cited] == ["work.submitted"]


@pytest.mark.parametrize(("command_type", "item_state", "actor", "roles", "result"), [
    ("evidence.record", state.SUBMITTED, REVIEWER, {"reviewer"}, "pass: read it"),
    ("work.accept_result", state.SUBMITTED, COORDINATOR, {"coordinator"}, "pass: fine"),
    ("work.fail", state.ACTIVE, COORDINATOR, {"coordinator"}, "fail: wrong quarter"),
])
def test_every_evidence_command_cites_only_its_missions_artifacts(command_type, item_state,
                                                                   actor, roles, result):
    item = builders.work_item(item_state)
    body = {"evidence": [evidence(["ac1", "ac2"], record_id="e9", producer=actor,
                                  result=result, artifacts=[FOREIGN])]}

    error = refusal(lambda: decide(world(item), command_type, body, item, actor, roles))
    unknown = refusal(lambda: decide(world(item), command_type, {"evidence": [
        {**body["evidence"][0], "artifacts": ["sha256:" + "0" * 64]}]}, item, actor, roles))

    assert (error.code, error.details) == (
        "VALIDATION_ERROR", {"path": "body.evidence[0].artifacts[0]", "hash": FOREIGN})
    assert (unknown.code, unknown.details["path"]) == ("NOT_FOUND",
                                                       "body.evidence[0].artifacts[0]")


def test_a_manifest_derives_from_its_missions_artifacts_and_reusable_ones_only():
    view = active_view()
    for record in (artifact(SIBLING), artifact(FOREIGN, OTHER_MISSION),
                   artifact(SHARED, OTHER_MISSION, classification="public",
                            sources=[FOREIGN], approved=True)):
        view.artifacts[record["hash"]] = record

    error = refusal(lambda: decide_publish(view, manifest(sources=[SIBLING, FOREIGN])))
    drafts = decide_publish(view, manifest(sources=[SIBLING, SHARED]))

    assert error.code == "VALIDATION_ERROR"
    assert error.details == {"path": "body.sources[1]", "hash": FOREIGN}
    assert drafts[0].data["manifest"]["sources"] == [SIBLING, SHARED]


# --- 3. acceptance decides on all the Evidence before it -----------------------------------

def accept(item, criteria=("ac1", "ac2")):
    body = {"evidence": [evidence(list(criteria), record_id="c1", producer=COORDINATOR,
                                  result="pass: read it myself")]}
    return decide(builders.view_of(item), "work.accept_result", body, item, COORDINATOR,
                  {"coordinator"})


def later_evidence(item, result: str) -> state.WorkItem:
    """`item` with reviewer Evidence for ac1 recorded after its stored evaluation."""
    arrived = evidence(["ac1"], record_id="late", producer="agent:rev2", result=result)
    return replace(item, review={**item.review, "reviewerEvidence": [
        *item.review["reviewerEvidence"], arrived]})


def test_a_failing_verdict_recorded_after_a_passing_evaluation_is_seen_by_acceptance():
    item = later_evidence(with_evaluation(submitted_item(), reviewed(reviewer_results=["pass"])),
                          "fail: misses section 3")
    assert item.review["evaluation"]["verdict"] == "pass"  # stale

    error = refusal(lambda: accept(item, ["ac2"]))

    assert error.code == "EVIDENCE_INCOMPLETE"
    assert error.details == {"failingCriteria": ["ac1"], "verdict": "fail"}


def test_a_passing_verdict_recorded_after_a_pending_evaluation_is_evaluated_in_the_decision():
    item = later_evidence(with_evaluation(submitted_item(), reviewed()), "pass: all there")
    assert item.review["evaluation"]["verdict"] == "pending"  # stale

    drafts = accept(item, ["ac2"])

    assert [d.type for d in drafts] == [evidence_review.EVALUATED, "work.verified"]
    evaluation = evidence_review.evaluate(item.contract, item.submission, item.review)
    assert drafts[0].data == {"submissionRevision": item.revision, **evaluation}
    assert drafts[0].data["verdict"] == "pass"
    assert drafts[1].data["review"] == {"submissionRevision": item.revision, "verdict": "pass",
                                        "integrity": "pass", "overridden": []}


def test_overridden_names_only_the_criteria_that_had_not_passed():
    pending = with_evaluation(submitted_item(), reviewed())  # ac2's check passed
    broken = with_evaluation(submitted_item(), reviewed(integrity="fail",
                                                        reviewer_results=["pass"]))

    assert accept(pending)[-1].data["review"]["overridden"] == ["ac1"]
    # integrity failed: the Coordinator answers for every criterion, overriding none that
    # passed; the event says integrity was accepted over
    assert refusal(lambda: accept(broken, ["ac1"])).details["failingCriteria"] == ["ac2"]
    assert accept(broken)[-1].data["review"] == {
        "submissionRevision": broken.revision, "verdict": "fail", "integrity": "fail",
        "overridden": []}


def test_before_the_automatic_steps_ran_acceptance_is_review_pending_or_a_full_override():
    item = submitted_item()  # no step ran

    error = refusal(lambda: accept(item, ["ac1"]))
    drafts = accept(item)

    assert (error.code, error.details) == ("REVIEW_PENDING",
                                           {"pendingCriteria": ["ac2"], "verdict": "none"})
    assert [d.type for d in drafts] == ["work.verified"]  # no evaluation appended
    assert drafts[0].data["review"]["overridden"] == ["ac1", "ac2"]


# --- 4. agentCardVersion ----------------------------------------------------------------------

def test_a_manifest_names_a_version_the_producers_agent_card_has_had():
    view = active_view()
    known = publish_context()
    known = replace(known, facts={**known.facts, "producerCardVersions": ["1", "2"]})

    error = refusal(lambda: decide_publish(view, manifest(agentCardVersion="3"), known))
    earlier = decide_publish(view, manifest(agentCardVersion="1"), known)

    assert error.code == "VALIDATION_ERROR"
    assert error.details == {"path": "body.agentCardVersion", "knownVersions": ["1", "2"]}
    assert f"agent {WORKER}'s Agent Card" in error.message
    assert earlier[0].type == "artifact.published"
