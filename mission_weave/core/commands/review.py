"""The review of a submission (§13.2): reviewer Evidence (`evidence.record`), the steps the
server appends for itself (apps/artifacts/tasks.py runs them), and what the review asks of
`work.accept_result`. The evaluation itself is mission_weave/core/review.py. Pure."""

from mission_weave.core import review as evaluation
from mission_weave.protocol.errors import ProtocolError

from ..state import SUBMITTED, WorkItem
from .base import item_draft, target_item


def current_review(item: WorkItem | None, submission_revision: int) -> dict | None:
    """The item's review if it is still `submitted` with that submission, else None: a
    step scheduled for an earlier submission, or for an item accepted, failed or
    cancelled meanwhile, does nothing."""
    if item is None or item.state != SUBMITTED or item.review is None:
        return None
    if item.review["submissionRevision"] != submission_revision:
        return None
    return item.review


def review_step(item_id: str, submission_revision: int, event_type: str, outcome=None):
    """The system decision for one pipeline step (pipeline.submit_system): its event, or
    nothing when the submission is no longer current or the step is already recorded, so
    that a retried or duplicated task appends nothing. `outcome(item)` gives the step's
    data; the evaluation is computed here, from what the review holds under the lock."""
    key = evaluation.STEP_KEYS[event_type]

    def decide(view) -> list:
        item = view.items.get(item_id)
        review = current_review(item, submission_revision)
        if review is None:
            return []
        if event_type == evaluation.EVALUATED:
            data = evaluation.evaluate(item.contract, item.submission, review)
            if review.get(key) == data:
                return []
        elif review.get(key) is not None:
            return []
        else:
            data = outcome(item)
        return [item_draft(item, event_type, {"submissionRevision": submission_revision,
                                              **data})]
    return decide


def evidence_record(view, command, context):
    """Reviewer-Agent Evidence for the current submission (a reviewer or coordinator)."""
    item = target_item(view, command)
    body = command.body
    if body.get("workItemId", item.id) != item.id:
        raise ProtocolError("VALIDATION_ERROR",
                            "body.workItemId must be the envelope's workItemId",
                            {"path": "body.workItemId"})
    review = item.review or {}
    known = {e["id"] for e in item.submission["evidence"]} | {
        e["id"] for e in review.get("reviewerEvidence", [])}
    criteria = set(item.criteria_ids)
    for index, record in enumerate(body["evidence"]):
        _check_record(record, f"body.evidence[{index}]", command.actor, criteria, known)
        known.add(record["id"])
    return [item_draft(item, evaluation.EVIDENCE_RECORDED, {
        "submissionRevision": review.get("submissionRevision"), "evidence": body["evidence"],
        "by": command.actor})]


def _check_record(record: dict, path: str, actor: str, criteria: set, known: set) -> None:
    if record["producer"] != actor:
        raise ProtocolError("FORBIDDEN", f"{path}.producer must be you ({actor}): Evidence is "
                            "recorded by the principal that produced it",
                            {"path": f"{path}.producer"})
    if not record["criteria"]:
        raise ProtocolError("VALIDATION_ERROR", f"{path}.criteria must name at least one "
                            "acceptance criterion", {"path": f"{path}.criteria"})
    unknown = sorted(set(record["criteria"]) - criteria)
    if unknown:
        raise ProtocolError("VALIDATION_ERROR",
                            f"{path}.criteria: the contract has no criteria {unknown}",
                            {"path": f"{path}.criteria", "unknownCriteria": unknown})
    if evaluation.verdict_of(record["result"]) is None:
        raise ProtocolError("VALIDATION_ERROR",
                            f"{path}.result must begin with pass or fail (e.g. \"fail: misses "
                            "the Q3 figures\")", {"path": f"{path}.result"})
    if record["id"] in known:
        raise ProtocolError("VALIDATION_ERROR",
                            f"{path}.id: Evidence {record['id']} is already recorded for this "
                            "submission", {"path": f"{path}.id"})


def acceptance(item: WorkItem, evidence: list) -> dict:
    """What `work.accept_result` records of the review, or why it is refused.

    §13.2: "A Worker's claim of completion is insufficient." The Coordinator decides on
    the review's evaluation, with Evidence of their own (at least one record). While
    the evaluation is missing (the review has not run) or pending, acceptance is
    REVIEW_PENDING; a failed one is EVIDENCE_INCOMPLETE. Either way the Coordinator may
    override with their own Evidence: for every criterion while the review is missing
    or pending or integrity failed, for each failing one otherwise. The override is
    recorded beside the evaluation, for the MissionOwner's final Approval."""
    if not evidence:
        raise ProtocolError("EVIDENCE_INCOMPLETE",
                            "work.accept_result needs your own Evidence: at least one record "
                            "saying how you reviewed the result", {"path": "body.evidence"})
    review = item.review or {}
    result = review.get("evaluation")
    verdict = result["verdict"] if result else "none"
    if verdict == "pass":
        open_criteria = []
    elif verdict == "fail" and result["integrity"] == "pass":
        open_criteria = result["failing"]
    else:  # not run, pending, or integrity failed: the override answers for every criterion
        open_criteria = list(item.criteria_ids)
    cited = {c for record in evidence for c in record["criteria"]}
    missing = [c for c in item.criteria_ids if c in open_criteria and c not in cited]
    if missing and verdict == "fail":
        raise ProtocolError(
            "EVIDENCE_INCOMPLETE",
            f"the review of this submission failed criteria {missing}"
            f"{' (artifact integrity failed)' if result['integrity'] == 'fail' else ''}; "
            "work.fail it, or accept with your own Evidence for each of them",
            {"failingCriteria": missing, "verdict": verdict})
    if missing:
        state = "has not evaluated" if result is None else "has not yet decided"
        raise ProtocolError(
            "REVIEW_PENDING",
            f"the review {state} criteria {missing} of this submission; wait for it (or for "
            "reviewer Evidence), or accept with your own Evidence for each of them",
            {"pendingCriteria": missing, "verdict": verdict})
    return {"submissionRevision": review.get("submissionRevision"),
            "verdict": verdict, "overridden": [c for c in item.criteria_ids
                                               if c in open_criteria]}
