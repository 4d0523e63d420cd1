"""The review of a submission (§13.2): reviewer Evidence (`evidence.record`), the steps the
server appends for itself (apps/review/tasks.py runs them), and what the review asks of
`work.accept_result`. The evaluation itself is mission_weave/core/evidence_review.py. Pure."""

from collections.abc import Callable, Sequence

from mission_weave.core import evidence_review as evaluation
from mission_weave.protocol.errors import ProtocolError

from ..json_types import JsonObject
from ..state import SUBMITTED, View, WorkItem
from .base import Command, Context, Draft, item_draft, target_item


def current_review(item: WorkItem | None, submission_revision: int) -> JsonObject | None:
    """The item's review if it is still `submitted` with that submission, else None: a
    step scheduled for an earlier submission, or for an item accepted, failed or
    cancelled meanwhile, does nothing."""
    if item is None or item.state != SUBMITTED or item.review is None:
        return None
    if item.review["submissionRevision"] != submission_revision:
        return None
    return item.review


def review_step(item_id: str, submission_revision: int, event_type: str,
                outcome: Callable[[WorkItem], JsonObject] | None = None,
                ) -> Callable[[View], list[Draft]]:
    """The system decision for one pipeline step (pipeline.submit_system): its event, or
    nothing when the submission is no longer current or the step is already recorded, so
    that a retried or duplicated task appends nothing. `outcome(item)` gives the step's
    data; the evaluation is computed here, from what the review holds under the lock."""
    key = evaluation.STEP_KEYS[event_type]

    def decide(view: View) -> list[Draft]:
        item = view.items.get(item_id)
        review = current_review(item, submission_revision)
        if item is None or review is None:
            return []
        if event_type == evaluation.EVALUATED:
            assert item.submission is not None, "a current review has its submission"
            data = evaluation.evaluate(item.contract, item.submission, review)
            if review.get(key) == data:
                return []
        elif review.get(key) is not None:
            return []
        else:
            assert outcome is not None, "every step but the evaluation has an outcome"
            data = outcome(item)
        return [item_draft(item, event_type, {"submissionRevision": submission_revision,
                                              **data})]
    return decide


def evidence_record(view: View, command: Command, context: Context) -> list[Draft]:
    """Reviewer-Agent Evidence for the current submission (a reviewer or coordinator)."""
    item = target_item(view, command)
    body = command.body
    if body.get("workItemId", item.id) != item.id:
        raise ProtocolError("VALIDATION_ERROR",
                            "body.workItemId must be the envelope's workItemId",
                            {"path": "body.workItemId"})
    check_not_own_work(item, command)
    review = item.review or {}
    assert item.submission is not None, "a submitted WorkItem has its submission"
    known = {e["id"] for e in item.submission["evidence"]} | {
        e["id"] for e in review.get("reviewerEvidence", [])}
    criteria = set(item.criteria_ids)
    for index, record in enumerate(body["evidence"]):
        _check_record(record, f"body.evidence[{index}]", command.actor, criteria, known)
        known.add(record["id"])
    return [item_draft(item, evaluation.EVIDENCE_RECORDED, {
        "submissionRevision": review.get("submissionRevision"), "evidence": body["evidence"],
        "by": command.actor})]


def submitter(item: WorkItem) -> str | None:
    """The agent that owned the WorkItem during the submitted attempt (the Ownership
    Epoch the submission was made under) and submitted it. work.submitted says so since
    it records `agentId`; before, the lease it closed does (no lease starts while the
    item is `submitted`)."""
    submission = item.submission or {}
    if "agentId" in submission:
        agent: str = submission["agentId"]
        return agent
    return item.lease.agent_id if item.lease is not None else None


def check_not_own_work(item: WorkItem, command: Command) -> None:
    """§13.2: reviewer Evidence and the acceptance come from someone else than the one
    whose work it is, whatever roles it also holds (worker and reviewer, or coordinator)."""
    agent = command.agent_id
    if agent is not None and agent == submitter(item):
        raise ProtocolError("FORBIDDEN",
                            f"you ({command.actor}) owned {item.id} during the attempt whose "
                            "submission this is: no one reviews or accepts their own work, "
                            "whatever their roles; another reviewer or Coordinator decides it",
                            {"submittedBy": agent,
                             "ownershipEpoch": (item.submission or {}).get(
                                 "ownershipEpoch", item.lease.ownership_epoch if item.lease
                                 else None)})


def _check_record(record: JsonObject, path: str, actor: str, criteria: set[str],
                  known: set[str]) -> None:
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


def reevaluated(item: WorkItem) -> JsonObject:
    """The combined evaluation of the current submission from everything its review holds
    now: the automatic steps' outcomes and every reviewer Evidence recorded so far, also
    what arrived after the stored evaluation (its task not run yet)."""
    return evaluation.evaluate(item.contract, item.submission or {}, item.review or {})


def reevaluation(item: WorkItem) -> list[Draft]:
    """`review.evaluated` of the evaluation work.accept_result decides on, when the
    automatic steps have run and it differs from the stored one; [] otherwise."""
    review = item.review
    if not review or review.get("integrity") is None or review.get("checks") is None:
        return []
    data = reevaluated(item)
    if review.get("evaluation") == data:
        return []
    return [item_draft(item, evaluation.EVALUATED, {
        "submissionRevision": review["submissionRevision"], **data})]


def override(item: WorkItem) -> JsonObject:
    """What an acceptance now answers for with the Coordinator's own Evidence, from the
    evaluation again (reevaluated):

      verdict      the evaluation's, or "none" while the review's first automatic step
                   (integrity) has not run
      integrity    pass | fail | pending
      open         the criteria the Coordinator's Evidence must cite: none when the
                   evaluation passed; every one while integrity has not passed (failed
                   or not run: no criterion's verdict stands on unchecked artifacts);
                   otherwise each criterion that has not passed (failing or pending)
      overridden   the open criteria that had not passed: what the acceptance
                   overrides. A criterion that passed is never among them.
    """
    result = reevaluated(item)
    verdicts = {c["id"]: c["verdict"] for c in result["criteria"]}
    review = item.review or {}
    verdict = "none" if review.get("integrity") is None else result["verdict"]
    if result["verdict"] == "pass":
        open_criteria = []
    elif result["integrity"] != "pass":
        open_criteria = list(item.criteria_ids)
    else:
        open_criteria = [c for c in item.criteria_ids if verdicts[c] != "pass"]
    return {"verdict": verdict, "integrity": result["integrity"], "open": open_criteria,
            "overridden": [c for c in open_criteria if verdicts[c] != "pass"],
            "failing": [c for c in open_criteria
                        if verdicts[c] == "fail" or result["integrity"] == "fail"]}


def acceptance(item: WorkItem, evidence: Sequence[JsonObject]) -> JsonObject:
    """What `work.accept_result` records of the review, or why it is refused.

    §13.2: "A Worker's claim of completion is insufficient." The Coordinator decides on
    the review evaluated again with all the Evidence recorded so far (override()), with
    Evidence of their own (at least one record). A criterion that has not passed needs
    the Coordinator's Evidence citing it (every criterion while artifact integrity has
    not passed): missing for a failed evaluation it is EVIDENCE_INCOMPLETE, otherwise
    REVIEW_PENDING (the review's automatic steps have not run, or reviewer Evidence is
    awaited). The criteria so overridden are recorded (`overridden`), with the verdict
    and the integrity outcome, for the MissionOwner's final Approval."""
    if not evidence:
        raise ProtocolError("EVIDENCE_INCOMPLETE",
                            "work.accept_result needs your own Evidence: at least one record "
                            "saying how you reviewed the result", {"path": "body.evidence"})
    review = item.review or {}
    outcome = override(item)
    verdict = outcome["verdict"]
    cited = {c for record in evidence for c in record["criteria"]}
    missing = [c for c in outcome["open"] if c not in cited]
    if missing and verdict == "fail":
        failing = [c for c in missing if c in outcome["failing"]]
        pending = [c for c in missing if c not in outcome["failing"]]
        raise ProtocolError(
            "EVIDENCE_INCOMPLETE",
            f"the review of this submission failed criteria {failing}"
            f"{' (artifact integrity failed)' if outcome['integrity'] == 'fail' else ''}"
            f"{f' and has not decided {pending}' if pending else ''}; "
            "work.fail it, or accept with your own Evidence for each of them",
            {"failingCriteria": failing, "verdict": verdict,
             **({"pendingCriteria": pending} if pending else {})})
    if missing:
        why = ("its automatic steps (artifact integrity, checks) have not run yet"
               if verdict == "none" else "no check or reviewer Evidence has decided them yet")
        raise ProtocolError(
            "REVIEW_PENDING",
            f"the review of this submission has not passed criteria {missing}: {why}; wait "
            "for it (or for reviewer Evidence), or accept with your own Evidence for each of "
            "them", {"pendingCriteria": missing, "verdict": verdict})
    return {"submissionRevision": review.get("submissionRevision"), "verdict": verdict,
            "integrity": outcome["integrity"], "overridden": outcome["overridden"]}
