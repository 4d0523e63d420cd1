"""The Evidence-based review (§13.2) as pure functions: the named checks, each pipeline
step's outcome, the combined evaluation, the system steps' decisions, evidence.record and
what the review asks of work.accept_result. No database: plain data and builders."""

from dataclasses import replace

import pytest

from mission_weave.core import checks, commands, evidence_review, state
from mission_weave.core.checks import NOT_READ, ArtifactFacts
from mission_weave.core.commands.review import review_step
from mission_weave.protocol.errors import ProtocolError
from tests.unit import builders
from tests.unit.builders import COORDINATOR, contract, evidence

A, B, S = "sha256:" + "a" * 64, "sha256:" + "b" * 64, "sha256:" + "c" * 64
SCHEMA = {"type": "object", "required": ["title", "words"],
          "properties": {"title": {"type": "string"}, "words": {"type": "integer", "maximum": 500}}}
REVIEWER = "agent:rev"


def review_contract(**overrides) -> dict:
    """A summary deliverable with a JSON schema; ac1 is semantic, ac2 a max-size check."""
    return contract(**{
        "deliverables": [{"id": "summary", "description": "The summary",
                          "mediaType": "application/json", "schema": SCHEMA}],
        "acceptanceCriteria": [
            {"id": "ac1", "description": "Covers every section"},
            {"id": "ac2", "description": "At most 1 KiB", "method": "check:max-size:1024"}],
        **overrides})


def submission(artifacts=(A,), **evidence_overrides) -> dict:
    return {"contractRevision": 1, "artifacts": list(artifacts),
            "evidence": [evidence(["ac1", "ac2"], artifacts=list(artifacts),
                                  **evidence_overrides)],
            "at": builders.iso(0)}


def stored(name=A, content=None, size=40, **fields) -> ArtifactFacts:
    """A stored, intact blob whose manifest is published in the Group (as JSON)."""
    return ArtifactFacts(name, present=True, intact=True, size=size,
                         content=NOT_READ if content is None else content,
                         **{"media_type": "application/json", "sources": (), **fields})


GOOD = {"title": "Q3", "words": 320}


# --- the registry of checks ----------------------------------------------------------------

def test_a_method_that_is_not_a_check_is_left_to_reviewers():
    assert checks.parse("word-count") is None
    assert checks.parse(None) is None
    assert checks.parse("check:max-size:10") == ("max-size", "10")
    assert checks.problem("word-count", contract()) is None


@pytest.mark.parametrize(("method", "words"), [
    ("check:run-python", "unknown check 'run-python'"),
    ("check:max-size", "positive whole number"),
    ("check:max-size:-3", "positive whole number"),
    ("check:non-empty:7", "takes no argument"),
    ("check:media-type", "needs the media type"),
    ("check:json-schema", "exactly one deliverable with a schema"),
    ("check:json-schema:nope", "has no schema"),
])
def test_a_check_that_cannot_run_says_why(method, words):
    assert words in checks.problem(method, contract())


def test_an_unknown_check_is_refused_when_the_contract_is_authorized():
    bad = contract(acceptanceCriteria=[{"id": "ac1", "description": "x",
                                        "method": "check:exec"}])
    view = builders.view_of(missions=[builders.mission()])
    command = builders.command("work.authorize", {"missionId": builders.MISSION_ID,
                                                  "contract": bad}, actor=COORDINATOR)

    with pytest.raises(ProtocolError) as raised:
        commands.decide(view, command, builders.context())

    assert raised.value.code == "INVALID_CONTRACT"
    assert raised.value.details["path"] == "body.contract.acceptanceCriteria[0].method"
    assert "json-schema" in raised.value.details["knownChecks"]


def test_a_deliverable_schema_that_is_not_a_json_schema_is_refused_when_authorized():
    bad = contract(deliverables=[{"id": "d", "description": "x", "schema": {"type": 12}}])
    view = builders.view_of(missions=[builders.mission()])
    command = builders.command("work.authorize", {"missionId": builders.MISSION_ID,
                                                  "contract": bad}, actor=COORDINATOR)

    with pytest.raises(ProtocolError) as raised:
        commands.decide(view, command, builders.context())

    assert raised.value.code == "INVALID_CONTRACT"
    assert raised.value.details == {"path": "body.contract.deliverables[0].schema"}


def test_max_size_passes_and_fails_by_the_byte():
    ok = checks.run("check:max-size:40", [stored(size=40)], contract())
    over = checks.run("check:max-size:39", [stored(size=40)], contract())

    assert ok.result == "pass"
    assert (over.result, over.detail) == ("fail", f"{A}: 40 bytes is over 39")


def test_non_empty_fails_on_an_empty_artifact_and_on_none():
    assert checks.run("check:non-empty", [stored(size=0)], contract()).result == "fail"
    assert checks.run("check:non-empty", [], contract()).detail == "no artifact was submitted"
    assert checks.run("check:non-empty", [stored()], contract()).result == "pass"


def test_media_type_and_sources_need_a_published_manifest():
    bare = stored(media_type=None, sources=None)  # no manifest of it in the Group
    published = stored(media_type="application/json", sources=(S,), missing_sources=())
    orphan = stored(media_type="text/csv", sources=(S,), missing_sources=(S,))

    assert "no published manifest" in checks.run("check:media-type:application/json", [bare],
                                                 contract()).detail
    assert checks.run("check:media-type:application/json", [published],
                      contract()).result == "pass"
    assert checks.run("check:media-type:application/json", [orphan],
                      contract()).detail == f"{A}: is text/csv, not application/json"
    assert checks.run("check:sources-present", [published], contract()).result == "pass"
    assert checks.run("check:sources-present", [orphan], contract()).detail == (
        f"{A}: sources not stored: {S}")


def test_json_schema_check_names_the_path_that_breaks_it():
    outcome = checks.run("check:json-schema", [stored(content={"title": "Q3", "words": 900})],
                         review_contract())

    assert outcome.result == "fail"
    assert outcome.detail == f"{A}: .words: 900 is greater than the maximum of 500"


def test_a_remote_ref_is_not_fetched_it_fails():
    remote = {"$ref": "https://example.invalid/schema.json"}
    assert "could not be applied" in checks.validate(remote, {"a": 1})


# --- step 1: integrity and output schemas ---------------------------------------------------

def test_integrity_passes_when_every_artifact_is_stored_intact_and_valid():
    outcome = evidence_review.integrity(review_contract(), submission(), {A: stored(content=GOOD)})

    assert outcome["result"] == "pass"
    assert outcome["artifacts"] == [{"hash": A, "present": True, "intact": True, "size": 40,
                                     "result": "pass", "detail": "stored and intact"}]
    assert [(s["deliverableId"], s["artifacts"], s["result"]) for s in outcome["schemas"]] == [
        ("summary", [A], "pass")]


def test_integrity_fails_for_a_deliverable_without_a_manifest_or_of_another_media_type():
    unpublished = evidence_review.integrity(review_contract(), submission(),
                                   {A: stored(content=GOOD, sources=None)})
    other_type = evidence_review.integrity(review_contract(), submission(),
                                  {A: stored(content=GOOD, media_type="text/plain")})

    assert unpublished["result"] == other_type["result"] == "fail"
    assert unpublished["deliverables"] == [{
        "deliverableId": "summary", "artifacts": [A], "result": "fail",
        "detail": f"{A}: no manifest of it is published in this Group"}]
    assert "its manifest says text/plain, the contract asks for application/json" in \
        other_type["deliverables"][0]["detail"]


def test_integrity_fails_on_a_schema_violation_and_says_where():
    outcome = evidence_review.integrity(review_contract(), submission(),
                               {A: stored(content={"title": "Q3"})})

    assert outcome["result"] == "fail"
    (schema,) = outcome["schemas"]
    assert schema["result"] == "fail"
    assert schema["detail"] == f"{A}: (root): 'words' is a required property"


def test_integrity_fails_on_a_missing_or_corrupted_blob_and_on_content_that_is_not_json():
    missing = evidence_review.integrity(review_contract(), submission(),
                                        {A: ArtifactFacts(A, False)})
    corrupted = evidence_review.integrity(review_contract(), submission(),
                                 {A: replace(stored(content=GOOD), intact=False)})
    not_json = evidence_review.integrity(review_contract(), submission(), {A: stored(
        content_problem="its content is not JSON: Expecting value")})

    assert missing["artifacts"][0]["detail"] == "no blob is stored under this hash"
    assert corrupted["artifacts"][0]["detail"] == "the stored bytes no longer hash to this name"
    assert "not JSON" in not_json["schemas"][0]["detail"]
    assert {missing["result"], corrupted["result"], not_json["result"]} == {"fail"}


def test_artifacts_deliver_the_deliverable_their_evidence_names():
    two = review_contract(deliverables=[
        {"id": "summary", "description": "s", "schema": SCHEMA},
        {"id": "figures", "description": "f", "mediaType": "text/csv"}])
    sub = {"contractRevision": 1, "artifacts": [A, B], "at": builders.iso(0), "evidence": [
        evidence(["ac1"], record_id="e1", subject="deliverable:summary", artifacts=[A]),
        evidence(["ac2"], record_id="e2", subject="deliverable:figures", artifacts=[B])]}

    assert evidence_review.deliverable_artifacts(two, sub) == {"summary": [A], "figures": [B]}
    assert evidence_review.content_needed(two, sub) == {A}
    assert evidence_review.criterion_artifacts(sub, "ac2") == [B]


def test_a_schema_deliverable_no_artifact_delivers_fails():
    two = review_contract(deliverables=[
        {"id": "summary", "description": "s", "schema": SCHEMA},
        {"id": "figures", "description": "f"}])

    # Two deliverables, and the only Evidence names neither of them.
    outcome = evidence_review.integrity(two, submission(subject="the work"),
                                        {A: stored(content=GOOD)})

    assert outcome["result"] == "fail"
    assert "cite it in Evidence with subject deliverable:summary" in outcome["schemas"][0][
        "detail"]


# --- steps 2 and 3 ----------------------------------------------------------------------------

def test_checks_run_only_for_criteria_that_name_one():
    outcome = evidence_review.run_checks(review_contract(), submission(), {A: stored(size=2000)})

    assert outcome == {"result": "fail", "checks": [{
        "criterionId": "ac2", "method": "check:max-size:1024", "artifacts": [A],
        "result": "fail", "detail": f"{A}: 2000 bytes is over 1024"}]}


def test_the_evidence_request_names_the_criteria_no_check_decides():
    assert evidence_review.evidence_request(review_contract()) == {
        "criteria": ["ac1"], "roles": ["reviewer", "coordinator"], "command": "evidence.record"}
    only_checks = review_contract(acceptanceCriteria=[
        {"id": "ac2", "description": "small", "method": "check:max-size:1024"}])
    assert evidence_review.evidence_request(only_checks)["criteria"] == []


# --- step 4: the combined evaluation -----------------------------------------------------------

def reviewed(integrity="pass", check="pass", reviewer_results=()) -> dict:
    return {"submissionRevision": 6,
            "integrity": {"result": integrity, "artifacts": [], "schemas": []},
            "checks": {"result": check, "checks": [
                {"criterionId": "ac2", "method": "check:max-size:1024", "artifacts": [A],
                 "result": check, "detail": "d"}]},
            "evidenceRequest": evidence_review.evidence_request(review_contract()),
            "reviewerEvidence": [evidence(["ac1"], record_id=f"r{i}", producer=REVIEWER,
                                          result=r) for i, r in enumerate(reviewer_results)],
            "evaluation": None}


def test_a_semantic_criterion_is_pending_until_a_reviewer_speaks():
    result = evidence_review.evaluate(review_contract(), submission(), reviewed())

    assert result["verdict"] == "pending"
    assert result["pending"] == ["ac1"]
    ac1, ac2 = result["criteria"]
    assert (ac1["decidedBy"], ac1["verdict"], ac1["submittedEvidence"]) == (
        "reviewer", "pending", ["ev-1"])
    assert (ac2["decidedBy"], ac2["verdict"], ac2["check"]) == (
        "check", "pass", {"result": "pass", "detail": "d"})


def test_the_latest_reviewer_evidence_decides_a_semantic_criterion():
    failed = evidence_review.evaluate(review_contract(), submission(), reviewed(
        reviewer_results=["fail: misses section 3"]))
    passed = evidence_review.evaluate(review_contract(), submission(), reviewed(
        reviewer_results=["fail: misses section 3", "PASS after the fix"]))

    assert (failed["verdict"], failed["failing"]) == ("fail", ["ac1"])
    assert (passed["verdict"], passed["failing"], passed["pending"]) == ("pass", [], [])
    assert passed["criteria"][0]["reviewerEvidence"] == ["r0", "r1"]


def test_a_failed_check_or_integrity_fails_the_whole_evaluation():
    by_check = evidence_review.evaluate(review_contract(), submission(), reviewed(
        check="fail", reviewer_results=["pass"]))
    by_integrity = evidence_review.evaluate(review_contract(), submission(), reviewed(
        integrity="fail", reviewer_results=["pass"]))

    assert (by_check["verdict"], by_check["failing"]) == ("fail", ["ac2"])
    assert (by_integrity["verdict"], by_integrity["integrity"], by_integrity["failing"]) == (
        "fail", "fail", [])


def test_the_next_step_is_the_first_missing_one_then_a_stale_evaluation():
    fresh = {"integrity": None, "checks": None, "evidenceRequest": None,
             "reviewerEvidence": [], "evaluation": None}
    done = reviewed()
    done["evaluation"] = evidence_review.evaluate(review_contract(), submission(), done)
    later = {**done, "reviewerEvidence": [evidence(["ac1"], record_id="r9", producer=REVIEWER)]}

    assert evidence_review.next_step(fresh) == evidence_review.INTEGRITY_CHECKED
    assert evidence_review.next_step({**fresh, "integrity": {}}) == evidence_review.CHECKS_COMPLETED
    assert evidence_review.next_step(done) is None
    assert evidence_review.next_step(later) == evidence_review.EVALUATED


# --- the projection and the system decisions ------------------------------------------------

def submitted_item(**overrides) -> state.WorkItem:
    """A submitted item as `evolve` leaves it after work.submitted (revision 6)."""
    item = builders.work_item(state.ACTIVE, contract=review_contract())
    view = builders.view_of(item)
    data = {"leaseId": builders.LEASE_ID, "contractRevision": 1, "artifacts": [A],
            "evidence": submission()["evidence"]}
    after = builders.apply(view, [builders_draft(item, "work.submitted", data)])
    return replace(after.items[item.id], **overrides)


def builders_draft(item, type_, data):
    return commands.Draft(type_, data, item.mission_id, item.id)


def test_work_submitted_opens_a_review_named_by_the_revision_it_gives_the_item():
    item = submitted_item()

    assert item.state == state.SUBMITTED
    assert item.review == {"submissionRevision": item.revision, "integrity": None,
                           "checks": None, "evidenceRequest": None, "reviewerEvidence": [],
                           "evaluation": None}


def test_a_step_appends_once_for_the_current_submission_and_never_for_another():
    item = submitted_item()
    view = builders.view_of(item)
    step = review_step(item.id, item.revision, evidence_review.EVIDENCE_REQUESTED,
                       lambda it: evidence_review.evidence_request(it.contract))

    drafts = step(view)
    after = builders.apply(view, drafts)

    assert [(d.type, d.data["submissionRevision"], d.data["criteria"]) for d in drafts] == [
        (evidence_review.EVIDENCE_REQUESTED, item.revision, ["ac1"])]
    assert after.items[item.id].state == state.SUBMITTED
    assert after.items[item.id].review["evidenceRequest"]["criteria"] == ["ac1"]
    assert step(after) == []  # already recorded: a retried task appends nothing
    assert review_step(item.id, item.revision - 1, evidence_review.EVIDENCE_REQUESTED,
                       lambda it: {})(view) == []  # an earlier submission's task


@pytest.mark.parametrize("moved_on", [state.VERIFIED, state.FAILED, state.CANCELLED])
def test_a_step_for_an_item_that_left_submitted_does_nothing(moved_on):
    item = submitted_item(state=moved_on)
    step = review_step(item.id, item.review["submissionRevision"], evidence_review.EVALUATED)

    assert step(builders.view_of(item)) == []


def test_evaluation_is_appended_only_when_it_changes():
    item = submitted_item()
    view = builders.view_of(item)
    evaluate = review_step(item.id, item.revision, evidence_review.EVALUATED)

    first = evaluate(view)
    view = builders.apply(view, first)

    assert [d.data["verdict"] for d in first] == ["pending"]
    assert evaluate(view) == []


# --- evidence.record ------------------------------------------------------------------------

def record(item, evidence_list, roles=frozenset({"reviewer"}), actor=REVIEWER, **body):
    command = builders.command("evidence.record", {"evidence": evidence_list, **body}, item,
                               actor=actor, roles=roles)
    return commands.decide(builders.view_of(item), command, builders.context())


def test_reviewer_evidence_is_recorded_for_the_current_submission():
    item = submitted_item()

    drafts = record(item, [evidence(["ac1"], record_id="r1", producer=REVIEWER,
                                    result="pass: every section covered")])
    after = builders.apply(builders.view_of(item), drafts)

    assert [d.type for d in drafts] == ["evidence.recorded"]
    assert drafts[0].data["submissionRevision"] == item.revision
    assert after.items[item.id].state == state.SUBMITTED
    assert [e["id"] for e in after.items[item.id].review["reviewerEvidence"]] == ["r1"]


@pytest.mark.parametrize(("roles", "code"), [({"worker"}, "FORBIDDEN"),
                                             ({"observer"}, "FORBIDDEN"),
                                             ({"owner"}, "FORBIDDEN")])
def test_only_a_reviewer_or_coordinator_records_evidence(roles, code):
    with pytest.raises(ProtocolError) as raised:
        record(submitted_item(), [evidence(["ac1"], record_id="r1", producer=REVIEWER)],
               roles=frozenset(roles))
    assert raised.value.code == code


@pytest.mark.parametrize("item_state", [state.ACTIVE, state.VERIFIED, state.FAILED, state.OPEN])
def test_evidence_for_an_item_not_submitted_is_refused(item_state):
    item = builders.work_item(item_state)
    with pytest.raises(ProtocolError) as raised:
        record(item, [evidence(["ac1"], record_id="r1", producer=REVIEWER)])
    assert raised.value.code == "TRANSITION_NOT_PERMITTED"


def test_evidence_with_a_private_reasoning_member_is_refused():
    with pytest.raises(ProtocolError) as raised:
        record(submitted_item(), [evidence(["ac1"], record_id="r1", producer=REVIEWER,
                                           reasoning="first I thought...")])
    assert raised.value.code == "VALIDATION_ERROR"
    assert raised.value.details == {"path": "body.evidence[0]"}
    assert "reasoning" in raised.value.message


@pytest.mark.parametrize(("overrides", "code", "path"), [
    ({"producer": "agent:someone-else"}, "FORBIDDEN", "body.evidence[0].producer"),
    ({"result": "looks fine to me"}, "VALIDATION_ERROR", "body.evidence[0].result"),
    ({"criteria": ["ac9"]}, "VALIDATION_ERROR", "body.evidence[0].criteria"),
    ({"criteria": []}, "VALIDATION_ERROR", "body.evidence[0].criteria"),
    ({"id": "ev-1"}, "VALIDATION_ERROR", "body.evidence[0].id"),  # the worker's own id
])
def test_reviewer_evidence_must_be_the_actors_own_and_say_pass_or_fail(overrides, code, path):
    values = {"record_id": "r1", "producer": REVIEWER, **overrides}
    if "id" in values:
        values["record_id"] = values.pop("id")
    with pytest.raises(ProtocolError) as raised:
        record(submitted_item(), [evidence(values.pop("criteria", ["ac1"]), **values)])
    assert (raised.value.code, raised.value.details["path"]) == (code, path)


# --- work.accept_result and the review ------------------------------------------------------

def with_evaluation(item, review_state) -> state.WorkItem:
    review_state = {**review_state, "submissionRevision": item.revision}
    review_state["evaluation"] = evidence_review.evaluate(item.contract, item.submission,
                                                          review_state)
    return replace(item, review=review_state)


def accept(item, evidence_list=()):
    command = builders.command("work.accept_result", {"evidence": list(evidence_list)}, item,
                               actor=COORDINATOR, roles={"coordinator"})
    return commands.decide(builders.view_of(item), command, builders.context())


def test_accepting_a_failed_review_needs_the_coordinators_evidence_for_each_failing_criterion():
    item = with_evaluation(submitted_item(), reviewed(check="fail", reviewer_results=["pass"]))

    with pytest.raises(ProtocolError) as raised:
        accept(item, [evidence(["ac1"], record_id="c0", producer=COORDINATOR)])
    drafts = accept(item, [evidence(["ac2"], record_id="c1", producer=COORDINATOR,
                                    result="pass: 1.1 KiB is fine for this report")])

    assert raised.value.code == "EVIDENCE_INCOMPLETE"
    assert raised.value.details == {"failingCriteria": ["ac2"], "verdict": "fail"}
    assert drafts[0].type == "work.verified"
    assert drafts[0].data["review"] == {"submissionRevision": item.revision, "verdict": "fail",
                                        "integrity": "pass", "overridden": ["ac2"]}


def test_failed_integrity_needs_evidence_for_every_criterion_to_accept():
    item = with_evaluation(submitted_item(), reviewed(integrity="fail", reviewer_results=["pass"]))

    with pytest.raises(ProtocolError) as raised:
        accept(item, [evidence(["ac1"], record_id="c1", producer=COORDINATOR)])

    assert raised.value.details["failingCriteria"] == ["ac2"]


def test_a_passed_review_is_accepted_and_a_pending_one_only_with_the_coordinators_evidence():
    # §13.2 "A Worker's claim of completion is insufficient": while the review has not
    # decided a criterion, acceptance waits for it, or the Coordinator answers for it.
    passed = with_evaluation(submitted_item(), reviewed(reviewer_results=["pass"]))
    pending = with_evaluation(submitted_item(), reviewed())
    own = [evidence(["ac1", "ac2"], record_id="c1", producer=COORDINATOR,
                    result="pass: read it myself")]

    assert accept(passed, own)[0].data["review"] == {
        "submissionRevision": passed.revision, "verdict": "pass", "integrity": "pass",
        "overridden": []}
    with pytest.raises(ProtocolError) as raised:  # ac1 awaits a reviewer; ac2 passed its check
        accept(pending, [evidence(["ac2"], record_id="c0", producer=COORDINATOR)])
    assert raised.value.code == "REVIEW_PENDING"
    assert raised.value.details == {"pendingCriteria": ["ac1"], "verdict": "pending"}
    # Overriding a pending review overrides what had not passed: ac2 passed its check.
    assert accept(pending, own)[0].data["review"] == {
        "submissionRevision": pending.revision, "verdict": "pending", "integrity": "pass",
        "overridden": ["ac1"]}


def test_an_acceptance_without_a_review_or_without_evidence_is_refused():
    unreviewed = submitted_item()
    passed = with_evaluation(submitted_item(), reviewed(reviewer_results=["pass"]))

    for item, evidence_list, code in (
            (passed, [], "EVIDENCE_INCOMPLETE"),
            (unreviewed, [evidence(["ac1"], record_id="c0", producer=COORDINATOR)],
             "REVIEW_PENDING")):
        with pytest.raises(ProtocolError) as raised:
            accept(item, evidence_list)
        assert raised.value.code == code
    override = accept(unreviewed, [evidence(["ac1", "ac2"], record_id="c1",
                                            producer=COORDINATOR)])
    assert override[0].data["review"]["overridden"] == ["ac1", "ac2"]


def test_a_new_submission_starts_a_new_review_and_old_outcomes_do_not_land_on_it():
    item = submitted_item()
    view = builders.view_of(item)
    step = review_step(item.id, item.revision, evidence_review.EVALUATED)
    view = builders.apply(view, step(view))
    first = view.items[item.id].review["submissionRevision"]
    # failed, offered, accepted and started again (built directly), then submitted again
    again = replace(view.items[item.id], state=state.ACTIVE,
                    lease=builders.lease(lease_id="lease_2"))
    view.items[item.id] = again
    view = builders.apply(view, [builders_draft(again, "work.submitted", {
        "leaseId": "lease_2", "contractRevision": 1, "artifacts": [B],
        "evidence": submission((B,))["evidence"]})])
    late = builders_draft(again, evidence_review.INTEGRITY_CHECKED, {
        "submissionRevision": first, "result": "pass", "artifacts": [], "schemas": []})
    after = builders.apply(view, [late])

    fresh = after.items[item.id].review
    assert fresh["submissionRevision"] > first
    assert (fresh["integrity"], fresh["evaluation"]) == (None, None)


@pytest.mark.parametrize("size", ["²", "١٢", "+12", " 12", "1_000", "9" * 5000, "0"])
def test_a_size_that_is_no_plain_positive_whole_number_is_refused(size):
    assert "positive whole number" in checks.problem(f"check:max-size:{size}", contract())
