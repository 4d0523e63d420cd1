"""JSON Schemas: the versioned Work Contract (`mwp.work-contract/1`), Evidence and
every command body. A body that breaks its schema is refused with the path named."""

import json
from pathlib import Path

from mission_weave.protocol.errors import ProtocolError
from mission_weave.protocol.jsonschema_check import check, compile_schema

CONTRACT_SCHEMA_ID = "mwp.work-contract/1"
CONTRACT = compile_schema(json.loads(
    (Path(__file__).parent / "schemas" / "work-contract-1.json").read_text()))

ID = {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$"}
PRINCIPAL = {"type": "string", "pattern": "^(agent:|user:)[A-Za-z0-9][A-Za-z0-9_.@+-]{0,149}$"}
HASH = {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"}
TIME = {"type": "string", "format": "date-time"}
TEXT = {"type": "string", "minLength": 1, "maxLength": 10000}
SECONDS = {"type": "integer", "minimum": 1, "maximum": 10 * 366 * 86400}  # <= 10 years

# §13.2: subject, criteria, method, result, producer, timestamp, referenced Artifacts.
# Closed: there is no member for private reasoning, and one that tries to add it is refused.
EVIDENCE = {
    "type": "object", "additionalProperties": False,
    "required": ["id", "subject", "criteria", "method", "result", "producer", "timestamp"],
    "properties": {
        "id": ID, "subject": {"type": "string", "minLength": 1, "maxLength": 500},
        "criteria": {"type": "array", "items": ID, "maxItems": 100},
        "method": {"type": "string", "minLength": 1, "maxLength": 500},
        "result": {"type": "string", "minLength": 1, "maxLength": 10000},
        "producer": {"anyOf": [PRINCIPAL, {"const": "system"}]},
        "timestamp": TIME,
        "artifacts": {"type": "array", "items": HASH, "maxItems": 200},
    },
}
EVIDENCE_LIST = {"type": "array", "items": EVIDENCE, "maxItems": 200}

# §11.4: structured around phase, milestones, next checkpoint, blockers, estimate, Evidence.
PROGRESS = {
    "type": "object", "additionalProperties": False, "required": ["phase"],
    "properties": {
        "phase": {"type": "string", "minLength": 1, "maxLength": 200},
        "milestones": {"type": "array", "items": {"type": "string", "maxLength": 500},
                       "maxItems": 200},
        "nextCheckpoint": {"type": ["string", "null"], "maxLength": 500},
        "blockers": {"type": "array", "items": {"type": "string", "maxLength": 2000},
                     "maxItems": 100},
        "estimate": {"type": ["object", "null"], "additionalProperties": False, "properties": {
            "completion": TIME, "confidence": {"type": "number", "minimum": 0, "maximum": 1},
            "remainingSeconds": {"type": "integer", "minimum": 0}}},
        "evidenceRefs": {"type": "array", "items": {"type": "string", "maxLength": 200},
                         "maxItems": 200},
    },
}

# §11.3: the scopes asked of a rotated or narrowed capability token; a kind left out keeps
# what the token holds.
SCOPE_NAMES = {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 200},
               "maxItems": 200}
CAPABILITY_SCOPES = {"type": "object", "additionalProperties": False,
                     "properties": {"tools": SCOPE_NAMES, "operations": SCOPE_NAMES}}


def _body(properties: dict, required=()) -> dict:
    return {"type": "object", "additionalProperties": False, "required": list(required),
            "properties": properties}


BODIES = {
    "mission.create": _body({"missionId": ID, "title": TEXT, "ownerId": PRINCIPAL,
                             "coordinatorId": PRINCIPAL, "budgets": {"type": "object"},
                             "autoDispatch": {"type": "boolean"}},
                            ["title", "ownerId", "coordinatorId"]),
    "mission.create_child": _body({"childMissionId": ID, "title": TEXT,
                                   "childFailurePolicy": {"enum": ["block", "fail"]}},
                                  ["title", "childFailurePolicy"]),
    "mission.approve": _body({"missionId": ID, "comment": TEXT}, ["missionId"]),
    "mission.fail": _body({"missionId": ID, "reason": TEXT}, ["missionId"]),
    "mission.cancel": _body({"missionId": ID, "reason": TEXT}, ["missionId"]),
    "work.propose": _body({"proposalId": ID, "missionId": ID, "contract": {"type": "object"}},
                          ["missionId", "contract"]),
    "work.authorize": _body({"workItemId": ID, "missionId": ID, "proposalId": ID,
                             "contract": {"type": "object"}}, ["missionId", "contract"]),
    "work.revise_contract": _body({"contract": {"type": "object"}}, ["contract"]),
    "work.offer": _body({
        "candidates": {"oneOf": [
            {"type": "array", "items": ID, "minItems": 1, "maxItems": 100, "uniqueItems": True},
            {"const": "auto"}]},
        "mode": {"enum": ["sequential", "urgent"]},
        "expiresAt": TIME, "candidateCount": {"type": "integer", "minimum": 1},
        "startWithinSeconds": SECONDS}, ["candidates", "mode", "expiresAt"]),
    "work.decline_offer": _body({
        "reason": {"enum": ["capacity", "deadline", "capability", "authorization", "dependency",
                            "budget"]},
        "detail": {"type": "string", "maxLength": 2000}}, ["reason"]),
    "work.accept_offer": _body({"contractRevision": {"type": "integer", "minimum": 1}},
                               ["contractRevision"]),
    "approval.grant_execution": _body({"comment": TEXT}),
    "work.start": _body({"leaseSeconds": SECONDS}),
    "lease.renew": _body({"leaseSeconds": SECONDS}),
    "work.progress": PROGRESS,
    "work.checkpoint": _body({"progress": PROGRESS, "stateArtifact": HASH}, ["progress"]),
    "work.block": _body({"checkpoint": PROGRESS, "requiredResolution": TEXT,
                         "blockedLeaseSeconds": SECONDS}, ["checkpoint", "requiredResolution"]),
    "work.unblock": _body({"resolution": TEXT}, ["resolution"]),
    "work.submit": _body({"contractRevision": {"type": "integer", "minimum": 1},
                          "artifacts": {"type": "array", "items": HASH, "maxItems": 200},
                          "evidence": EVIDENCE_LIST}, ["contractRevision", "evidence"]),
    "work.accept_result": _body({"evidence": EVIDENCE_LIST}),
    "work.fail": _body({"evidence": {**EVIDENCE_LIST, "minItems": 1}, "reason": TEXT,
                        "permanent": {"type": "boolean"}}, ["evidence"]),
    "work.cancel": _body({"reason": TEXT}),
    "work.request_preemption": _body({"reason": TEXT}),
    "capability.rotate": _body({"scopes": CAPABILITY_SCOPES, "expiresInSeconds": SECONDS}),
    "capability.narrow": _body({"scopes": CAPABILITY_SCOPES, "expiresInSeconds": SECONDS},
                               ["scopes"]),
    "conversation.post": _body({
        "messageId": ID, "kind": {"enum": ["message", "ambiguity", "resolution"]},
        "text": TEXT, "resolves": ID}, ["kind", "text"]),
}
BODY_VALIDATORS = {name: compile_schema(schema) for name, schema in BODIES.items()}


def check_body(command_type: str, body) -> None:
    check(BODY_VALIDATORS[command_type], body, "VALIDATION_ERROR",
          f"{command_type} body", prefix="body")


def check_contract(contract, path: str = "body.contract") -> dict:
    """Validate a Work Contract against `mwp.work-contract/1`; INVALID_CONTRACT names the path."""
    check(CONTRACT, contract, "INVALID_CONTRACT", "Work Contract", prefix=path)
    for member in ("deliverables", "acceptanceCriteria"):
        ids = [entry["id"] for entry in contract[member]]
        duplicate = next((i for i in ids if ids.count(i) > 1), None)
        if duplicate is not None:
            raise ProtocolError("INVALID_CONTRACT",
                                f"Work Contract: {path}.{member}: id {duplicate!r} is repeated",
                                {"path": f"{path}.{member}"})
    backoff = contract["retry"]["backoff"]
    if backoff["maxSeconds"] < backoff["initialSeconds"]:
        raise ProtocolError(
            "INVALID_CONTRACT",
            f"Work Contract: {path}.retry.backoff.maxSeconds is below initialSeconds",
            {"path": f"{path}.retry.backoff.maxSeconds"})
    return contract

