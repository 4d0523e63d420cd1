"""A human's decisions as commands through the one append path (apps/ledger/pipeline.py).

A human's envelope carries no signature and no sessionEpoch: the browser session is the
authentication, the actor is `user:<name>` and membershipEpoch is the membership's as it
was read for the page. The pipeline checks the role, the §10.2 table and everything else;
a refusal comes back as the PROTOCOL error and changes nothing."""

import uuid
from dataclasses import dataclass
from datetime import datetime

from apps.ledger import pipeline
from mission_weave.protocol.errors import ProtocolError
from mission_weave.protocol.timefmt import format_time

from .access import Viewer

HUMAN_REVIEW = "human-review"


@dataclass(frozen=True)
class Outcome:
    status: int
    events: list
    error: dict | None  # {code, message, details} when refused

    @property
    def accepted(self) -> bool:
        return self.error is None


def envelope(viewer: Viewer, type_: str, body: dict, now: datetime,
             work_item_id: str | None = None) -> dict:
    document = {"id": f"dash-{uuid.uuid4().hex}", "type": type_, "groupId": viewer.group_id,
                "actor": viewer.principal.id, "issuedAt": format_time(now),
                "membershipEpoch": viewer.membership_epoch, "body": body}
    if work_item_id is not None:
        document["workItemId"] = work_item_id
    return document


def send(viewer: Viewer, type_: str, body: dict, now: datetime,
         work_item_id: str | None = None) -> Outcome:
    try:
        answer = pipeline.submit(viewer.group_id,
                                 envelope(viewer, type_, body, now, work_item_id),
                                 viewer.principal, now)
    except ProtocolError as error:  # identity, membership or envelope: nothing was recorded
        return Outcome(error.http_status, [], error.as_json()["error"])
    if answer.status != 200:
        return Outcome(answer.status, [], answer.body["error"])
    return Outcome(200, answer.body["events"], None)


def evidence(viewer: Viewer, item_id: str, criteria: list, result: str, now: datetime,
             artifacts=()) -> dict:
    """The human reviewer's own Evidence (§13.2) for the current submission."""
    return {"id": f"ev-{uuid.uuid4().hex}", "subject": f"workItem:{item_id}",
            "criteria": list(criteria), "method": HUMAN_REVIEW, "result": result,
            "producer": viewer.principal.id, "timestamp": format_time(now),
            "artifacts": list(artifacts)}


def accept_result(viewer: Viewer, item, note: str, reasons: dict, now: datetime) -> Outcome:
    """work.accept_result with the Coordinator's Evidence (PROTOCOL §13.2, as
    mission_weave/core/commands/review.py has it): the note, citing every criterion not
    overridden (all of them when every one is), and one record per criterion the
    acceptance overrides, "pass: <reason>" citing that criterion alone. Overriding the
    review is the Coordinator's right, but only with reasons on record, per criterion:
    forms.AcceptForm asks for each one before this is called (views.accept_result)."""
    reasons = {criterion: reason for criterion, reason in reasons.items() if reason}
    rest = [c for c in item.criteria_ids if c not in reasons] or list(item.criteria_ids)
    result = f"pass: {note}" if note else "pass: accepted after reviewing the evaluation"
    records = [evidence(viewer, item.id, rest, result, now)] + [
        evidence(viewer, item.id, [criterion], f"pass: {reason}", now)
        for criterion, reason in reasons.items()]
    return send(viewer, "work.accept_result", {"evidence": records}, now, item.id)


def fail(viewer: Viewer, item, criteria: list, reason: str, permanent: bool,
         now: datetime) -> Outcome:
    record = evidence(viewer, item.id, criteria or item.criteria_ids, f"fail: {reason}", now)
    return send(viewer, "work.fail", {"evidence": [record], "reason": reason,
                                      "permanent": permanent}, now, item.id)


def with_dependencies(contract: dict, depends_on: list) -> dict:
    """The same contract with another dependency list (an edge added or removed)."""
    dependencies = {**contract.get("dependencies", {}), "workItems": list(depends_on)}
    return {key: value for key, value in {**contract, "dependencies": dependencies}.items()
            if key != "revision"}


def change_edge(viewer: Viewer, item, dependency: str, add: bool, now: datetime) -> Outcome:
    """An edge `item` depends on `dependency`, added or removed: a revision of the
    dependant's contract, as the API would send it (§10.4; a cycle is DEPENDENCY_CYCLE)."""
    current = list(item.depends_on)
    if add and dependency not in current:
        current.append(dependency)
    elif not add:
        current = [d for d in current if d != dependency]
    return send(viewer, "work.revise_contract",
                {"contract": with_dependencies(item.contract, current)}, now, item.id)
