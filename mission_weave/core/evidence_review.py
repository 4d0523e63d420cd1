"""The Evidence-based review of a submission (§13.2), as pure functions over plain data.

The pipeline runs in the seed's order, each step's outcome an event of the WorkItem
(actor `system`), the item staying `submitted` throughout:

  1. review.integrity_checked   every cited artifact is stored and still hashes to its
                                name; each deliverable with a `schema` validates
  2. review.checks_completed    the named deterministic checks (`method: "check:..."`,
                                mission_weave/core/checks.py) of the acceptance criteria
  3. review.evidence_requested  the criteria no check decides await reviewer Evidence
                                (`evidence.record` by a reviewer or coordinator)
  4. review.evaluated           per criterion: the submitted Evidence, the check, the
                                reviewer Evidence and a verdict pass | fail | pending;
                                appended again whenever reviewer Evidence arrives
  5. all of it stays in the log and on the WorkItem for the MissionOwner's Approval.

Which artifacts a deliverable or criterion concerns comes from the submission's own
Evidence: Evidence with `subject: "deliverable:<id>"` names the deliverable's artifacts
(with one deliverable and no such Evidence, the submission's `artifacts` deliver it);
either way a deliverable is an artifact published for this WorkItem (work.submit checks
it). The artifacts of the Evidence citing a criterion are what its check examines; for
Evidence that cites no artifact, every submitted artifact counts.

Verdicts: a criterion with a check is decided by the check. Any other criterion is
decided by the latest reviewer Evidence citing it, whose `result` begins with `pass` or
`fail` (evidence.record refuses anything else); until some arrives it is pending. The
worker's own Evidence is shown beside it but decides nothing: a claim is not a review.
The whole evaluation fails if integrity failed or any criterion failed, is pending while
integrity has not run or any criterion is pending, and passes otherwise.
"""

import json
import re
from collections.abc import Iterable, Sequence

from . import checks
from .checks import FAIL, NOT_READ, PASS
from .json_types import JsonObject

PENDING = "pending"
DELIVERABLE_SUBJECT = "deliverable:"

# Events of the pipeline, and the key under which the WorkItem's review keeps each outcome.
INTEGRITY_CHECKED = "review.integrity_checked"
CHECKS_COMPLETED = "review.checks_completed"
EVIDENCE_REQUESTED = "review.evidence_requested"
EVALUATED = "review.evaluated"
EVIDENCE_RECORDED = "evidence.recorded"
STEP_KEYS = {INTEGRITY_CHECKED: "integrity", CHECKS_COMPLETED: "checks",
             EVIDENCE_REQUESTED: "evidenceRequest", EVALUATED: "evaluation"}

_VERDICT = re.compile(r"^\s*(pass|fail)\b", re.IGNORECASE)


def verdict_of(result: str) -> str | None:
    """pass / fail from a reviewer Evidence `result` ("fail: misses section 3"), or None."""
    match = _VERDICT.match(result or "")
    return match.group(1).lower() if match else None


# --- what the submission cites ------------------------------------------------------------

def _unique(hashes: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(hashes))


def artifact_hashes(submission: JsonObject) -> list[str]:
    """Every artifact the submission cites: its `artifacts` and those of its Evidence."""
    return _unique([*submission.get("artifacts", []),
                    *(h for e in submission.get("evidence", []) for h in e.get("artifacts", []))])


def is_deliverable_evidence(record: JsonObject) -> bool:
    """Evidence whose subject is a deliverable (`deliverable:<id>`): its artifacts are
    offered as that deliverable."""
    subject: str = record.get("subject", "")
    return subject.startswith(DELIVERABLE_SUBJECT)


def deliverable_artifacts(contract: JsonObject,
                          submission: JsonObject) -> dict[str, list[str]]:
    """deliverable id -> the artifact hashes that deliver it: those of the Evidence with
    its subject, or, for the only deliverable, the submission's `artifacts`. Artifacts
    cited only by other Evidence (an input, a test log) deliver nothing."""
    named: dict[str, list[str]] = {}
    for record in submission.get("evidence", []):
        if is_deliverable_evidence(record):
            named.setdefault(record["subject"][len(DELIVERABLE_SUBJECT):], []).extend(
                record.get("artifacts", []))
    deliverables = contract.get("deliverables", [])
    submitted = list(submission.get("artifacts", []))
    return {d["id"]: _unique(named.get(d["id"]) or (submitted if len(deliverables) == 1
                                                     else []))
            for d in deliverables}


def criterion_artifacts(submission: JsonObject, criterion_id: str) -> list[str]:
    cited = [h for e in submission.get("evidence", []) if criterion_id in e.get("criteria", [])
             for h in e.get("artifacts", [])]
    return _unique(cited) or list(submission.get("artifacts", []))


def check_method(criterion: JsonObject) -> str | None:
    method = criterion.get("method")
    return method if checks.parse(method) is not None else None


def content_needed(contract: JsonObject, submission: JsonObject) -> set[str]:
    """The hashes whose content the shell must read and parse as JSON."""
    needed = set()
    for deliverable_id, hashes in deliverable_artifacts(contract, submission).items():
        if any(d["id"] == deliverable_id and "schema" in d for d in contract["deliverables"]):
            needed.update(hashes)
    for criterion in contract["acceptanceCriteria"]:
        parsed = checks.parse(criterion.get("method"))
        if parsed is not None and parsed[0] in checks.READS_CONTENT:
            needed.update(criterion_artifacts(submission, criterion["id"]))
    return needed


def parse_content(data: bytes) -> tuple[object, str | None]:
    """(the JSON value, None) or (NOT_READ, why not)."""
    try:
        return json.loads(data.decode("utf-8")), None
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        return NOT_READ, f"its content is not JSON: {str(error)[:200]}"


# --- step 1: integrity and required output schemas ------------------------------------------

def _integrity_problem(facts: checks.ArtifactFacts) -> str | None:
    if not facts.present:
        return "no blob is stored under this hash"
    if facts.intact is False:
        return "the stored bytes no longer hash to this name"
    return None


def integrity(contract: JsonObject, submission: JsonObject, facts: JsonObject) -> JsonObject:
    """The outcome of step 1 from the facts (hash -> ArtifactFacts) of every cited artifact."""
    artifacts = []
    for name in artifact_hashes(submission):
        found = facts[name]
        problem = _integrity_problem(found)
        artifacts.append({"hash": name, "present": found.present, "intact": found.intact,
                          "size": found.size, "result": FAIL if problem else PASS,
                          "detail": problem or "stored and intact"})
    schemas, deliverables = [], []
    by_deliverable = deliverable_artifacts(contract, submission)
    for deliverable in contract["deliverables"]:
        hashes = by_deliverable[deliverable["id"]]
        deliverables.append({"deliverableId": deliverable["id"], "artifacts": hashes,
                             **_delivery_outcome(deliverable, hashes, facts)})
        if "schema" in deliverable:
            schemas.append({"deliverableId": deliverable["id"], "artifacts": hashes,
                            **_schema_outcome(deliverable, hashes, facts)})
    failed = any(a["result"] == FAIL for a in artifacts + schemas + deliverables)
    return {"result": FAIL if failed else PASS, "artifacts": artifacts, "schemas": schemas,
            "deliverables": deliverables}


def _delivery_outcome(deliverable: JsonObject, hashes: Sequence[str],
                      facts: JsonObject) -> JsonObject:
    """A deliverable is delivered by artifacts with a published manifest in this Group
    (§13.1), of the media type the contract asks for."""
    if not hashes:
        return {"result": FAIL, "detail": f"no artifact delivers {deliverable['id']}"}
    problems = []
    for name in hashes:
        found = facts[name]
        if found.sources is None:
            problems.append(f"{name}: no manifest of it is published in this Group")
        elif deliverable.get("mediaType") and found.media_type != deliverable["mediaType"]:
            problems.append(f"{name}: its manifest says {found.media_type}, the contract "
                            f"asks for {deliverable['mediaType']}")
    if problems:
        return {"result": FAIL, "detail": "; ".join(problems)}
    return {"result": PASS, "detail": f"{len(hashes)} published artifact(s)"}


def _schema_outcome(deliverable: JsonObject, hashes: Sequence[str],
                    facts: JsonObject) -> JsonObject:
    broken = checks.schema_problem(deliverable["schema"])
    if broken is not None:
        return {"result": FAIL, "detail": broken}
    if not hashes:
        return {"result": FAIL, "detail": (
            f"no artifact delivers {deliverable['id']}: cite it in Evidence with subject "
            f"{DELIVERABLE_SUBJECT}{deliverable['id']}")}
    problems = []
    for name in hashes:
        found = facts[name]
        why = (_integrity_problem(found) or
               (found.content_problem or "its content was not read"
                if found.content is NOT_READ else None) or
               checks.validate(deliverable["schema"], found.content))
        if why is not None:
            problems.append(f"{name}: {why}")
    if problems:
        return {"result": FAIL, "detail": "; ".join(problems)}
    return {"result": PASS, "detail": f"{len(hashes)} artifact(s) validate against the schema"}


# --- step 2: deterministic checks ----------------------------------------------------------

def run_checks(contract: JsonObject, submission: JsonObject, facts: JsonObject) -> JsonObject:
    """The outcome of step 2: every criterion that names a check, run."""
    results = []
    for criterion in contract["acceptanceCriteria"]:
        method = check_method(criterion)
        if method is None:
            continue
        hashes = criterion_artifacts(submission, criterion["id"])
        outcome = checks.run(method, [facts[h] for h in hashes], contract)
        results.append({"criterionId": criterion["id"], "method": method, "artifacts": hashes,
                        "result": outcome.result, "detail": outcome.detail})
    failed = any(r["result"] == FAIL for r in results)
    return {"result": FAIL if failed else PASS, "checks": results}


# --- step 3: the request for reviewer Evidence --------------------------------------------

def evidence_request(contract: JsonObject) -> JsonObject:
    """The outcome of step 3: which criteria await reviewer Evidence, and how to give it."""
    waiting = [c["id"] for c in contract["acceptanceCriteria"] if check_method(c) is None]
    return {"criteria": waiting, "roles": ["reviewer", "coordinator"] if waiting else [],
            "command": "evidence.record"}


# --- step 4: the combined evaluation ----------------------------------------------------------

def evaluate(contract: JsonObject, submission: JsonObject, review: JsonObject) -> JsonObject:
    """The combined evaluation of the submission from what the review holds so far."""
    checked = {c["criterionId"]: c for c in (review.get("checks") or {}).get("checks", [])}
    integrity_step = review.get("integrity")
    criteria = []
    for criterion in contract["acceptanceCriteria"]:
        cid = criterion["id"]
        method = check_method(criterion)
        reviewed = [e for e in review.get("reviewerEvidence", []) if cid in e["criteria"]]
        entry = {"id": cid, "description": criterion["description"],
                 "method": criterion.get("method"), "decidedBy": "check" if method else "reviewer",
                 "submittedEvidence": [e["id"] for e in submission.get("evidence", [])
                                       if cid in e["criteria"]],
                 "reviewerEvidence": [e["id"] for e in reviewed], "check": None}
        if method is not None:
            found = checked.get(cid)
            if found is None:
                entry.update(verdict=PENDING, basis="the check has not run yet")
            else:
                entry["check"] = {"result": found["result"], "detail": found["detail"]}
                entry.update(verdict=found["result"], basis=f"{method}: {found['detail']}")
        elif reviewed:
            latest = reviewed[-1]
            entry.update(verdict=verdict_of(latest["result"]) or PENDING,
                         basis=f"reviewer Evidence {latest['id']} by {latest['producer']}")
        else:
            entry.update(verdict=PENDING, basis="awaiting reviewer Evidence")
        criteria.append(entry)
    integrity_verdict = integrity_step["result"] if integrity_step else PENDING
    failing = [c["id"] for c in criteria if c["verdict"] == FAIL]
    pending = [c["id"] for c in criteria if c["verdict"] == PENDING]
    if integrity_verdict == FAIL or failing:
        verdict = FAIL
    elif integrity_verdict == PENDING or pending:
        verdict = PENDING
    else:
        verdict = PASS
    return {"verdict": verdict, "integrity": integrity_verdict, "failing": failing,
            "pending": pending, "criteria": criteria}


ORDER = (INTEGRITY_CHECKED, CHECKS_COMPLETED, EVIDENCE_REQUESTED, EVALUATED)


def next_step(review: JsonObject) -> str | None:
    """The first step the review still lacks, or EVALUATED when reviewer Evidence arrived
    after the latest evaluation; None when it is up to date (what `resume` looks at)."""
    for event_type in ORDER[:-1]:
        if review.get(STEP_KEYS[event_type]) is None:
            return event_type
    latest = review.get("evaluation")
    if latest is None:
        return EVALUATED
    seen = {e for c in latest["criteria"] for e in c["reviewerEvidence"]}
    if seen != {e["id"] for e in review.get("reviewerEvidence", [])}:
        return EVALUATED
    return None
