"""JSON Schemas: the versioned Work Contract (`mwp.work-contract/1`), Evidence and
every command body. A body that breaks its schema is refused with the path named."""

import json
from collections.abc import Sequence
from pathlib import Path

from mission_weave.core import checks
from mission_weave.core.jsonschema_check import check, compile_schema
from mission_weave.protocol.errors import ProtocolError

from .json_types import JsonObject

CONTRACT = compile_schema(json.loads(
    (Path(__file__).parent / "contract_schemas" / "work-contract-1.json").read_text()))

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
    "required": ["id", "subject", "criteria", "method", "result", "producer", "timestamp",
                 "artifacts"],
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


# §11.5: the six dimensions of a budget or a usage delta (the contract's own definition).
COUNT = {"type": "integer", "minimum": 0, "maximum": 2**53 - 1}
MONEY = {"type": "object", "additionalProperties": False, "required": ["amount", "currency"],
         "properties": {"amount": {"type": "string", "pattern": "^[0-9]{1,15}(\\.[0-9]{1,6})?$"},
                        "currency": {"type": "string", "pattern": "^[A-Z]{3}$"}}}
SIX_DIMENSIONS = {"type": "object", "additionalProperties": False, "properties": {
    "financial": MONEY, "tokens": COUNT, "toolCalls": COUNT, "computeSeconds": COUNT,
    "wallClockSeconds": COUNT, "sideEffects": COUNT}}


def _body(properties: JsonObject, required: Sequence[str] = ()) -> JsonObject:
    return {"type": "object", "additionalProperties": False, "required": list(required),
            "properties": properties}


# §11.4: a checkpoint is progress plus, optionally, the state artifact to resume from.
# It is the whole of a work.checkpoint body and, unchanged, work.block's `checkpoint`
# (PROTOCOL §2: "`checkpoint` has the shape of a `work.checkpoint` body").
CHECKPOINT = _body({"progress": PROGRESS, "stateArtifact": HASH}, ["progress"])


BODIES = {
    "mission.create": _body({"missionId": ID, "title": TEXT, "ownerId": PRINCIPAL,
                             "coordinatorId": PRINCIPAL, "budgets": SIX_DIMENSIONS,
                             "autoDispatch": {"type": "boolean"},
                             # §10.2 scoped delegates: may act as the Mission's Coordinator
                             "delegates": {"type": "array", "items": PRINCIPAL,
                                           "maxItems": 20, "uniqueItems": True}},
                            ["title", "ownerId", "coordinatorId"]),
    "mission.create_child": _body({"childMissionId": ID, "title": TEXT,
                                   "childFailurePolicy": {"enum": ["block", "fail"]}},
                                  ["title", "childFailurePolicy"]),
    "mission.approve": _body({"missionId": ID, "comment": TEXT}, ["missionId"]),
    # The MissionOwner's "not yet": a reason for the Mission and per WorkItem, recorded;
    # the Mission stays active for more work (docs/protocol.md).
    "mission.refuse_approval": _body({
        "missionId": ID, "reason": {**TEXT, "minLength": 1},
        "workItems": {"type": "array", "maxItems": 200, "items": _body(
            {"workItemId": ID, "reason": {**TEXT, "minLength": 1}},
            ["workItemId", "reason"])}}, ["missionId", "reason"]),
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
    "approval.refuse_execution": _body({"reason": {**TEXT, "minLength": 1}}, ["reason"]),
    "work.start": _body({"leaseSeconds": SECONDS}),
    "lease.renew": _body({"leaseSeconds": SECONDS}),
    "work.progress": PROGRESS,
    "work.checkpoint": CHECKPOINT,
    "work.block": _body({"checkpoint": CHECKPOINT, "requiredResolution": TEXT,
                         "blockedLeaseSeconds": SECONDS}, ["checkpoint", "requiredResolution"]),
    "work.unblock": _body({"resolution": TEXT}, ["resolution"]),
    "work.submit": _body({"contractRevision": {"type": "integer", "minimum": 1},
                          "artifacts": {"type": "array", "items": HASH, "maxItems": 200},
                          "evidence": EVIDENCE_LIST}, ["contractRevision", "evidence"]),
    "work.accept_result": _body({"evidence": EVIDENCE_LIST}),
    "evidence.record": _body({"workItemId": ID, "evidence": {**EVIDENCE_LIST, "minItems": 1}},
                             ["evidence"]),
    "work.fail": _body({"evidence": {**EVIDENCE_LIST, "minItems": 1}, "reason": TEXT,
                        "permanent": {"type": "boolean"}}, ["evidence"]),
    "work.cancel": _body({"reason": TEXT}),
    "work.request_preemption": _body({"reason": TEXT}),
    "capability.rotate": _body({"scopes": CAPABILITY_SCOPES, "expiresInSeconds": SECONDS}),
    "capability.narrow": _body({"scopes": CAPABILITY_SCOPES, "expiresInSeconds": SECONDS},
                               ["scopes"]),
    "usage.record": SIX_DIMENSIONS,
    "conversation.post": _body({
        "messageId": ID, "kind": {"enum": ["message", "ambiguity", "resolution"]},
        "text": TEXT, "resolves": ID}, ["kind", "text"]),
}

# §13.1, §13.3: an artifact's manifest and a Context Package, each signed by the agent
# that made it; closed, so every member the seed lists is there and nothing else is.
SIGNATURE = {"type": "object", "additionalProperties": False, "required": ["alg", "keyId", "sig"],
             "properties": {"alg": {"const": "Ed25519"},
                            "keyId": {"type": "string", "minLength": 1, "maxLength": 120},
                            "sig": {"type": "string", "minLength": 1, "maxLength": 200}}}
HASHES = {"type": "array", "items": HASH, "maxItems": 1000, "uniqueItems": True}
VERSION_TEXT = {"type": ["string", "null"], "maxLength": 200}
MANIFEST = _body({
    "hash": HASH,
    "mediaType": {"type": "string", "maxLength": 255,
                  "pattern": "^[A-Za-z0-9][A-Za-z0-9!#&^_.+-]*/[A-Za-z0-9][A-Za-z0-9!#&^_.+-]*"
                             "( *;.*)?$"},
    "schema": {"type": ["string", "null"], "minLength": 1, "maxLength": 2000},
    "size": {"type": "integer", "minimum": 0, "maximum": 2**53 - 1},
    "producer": ID, "agentCardVersion": {"type": "string", "minLength": 1, "maxLength": 100},
    "missionId": ID, "groupId": {"type": "string", "minLength": 1, "maxLength": 100},
    "workItemId": {"anyOf": [ID, {"type": "null"}]},
    "sources": HASHES,
    "versions": _body({"tool": VERSION_TEXT, "model": VERSION_TEXT, "capability": VERSION_TEXT},
                      ["tool", "model", "capability"]),
    "createdAt": TIME,
    "classification": {"enum": ["public", "internal", "confidential", "restricted"]},
    "uri": {"type": "string", "minLength": 1, "maxLength": 2000},
    "signature": SIGNATURE,
}, ["hash", "mediaType", "schema", "size", "producer", "agentCardVersion", "missionId", "groupId",
    "workItemId", "sources", "versions", "createdAt", "classification", "uri", "signature"])
NOTES = {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 4000},
         "maxItems": 500}
CONTEXT_PACKAGE = _body({
    "id": ID, "version": {"type": "integer", "minimum": 1, "maximum": 2**31 - 1},
    "previousVersion": {"type": "integer", "minimum": 1, "maximum": 2**31 - 1},
    "scope": _body({"missionId": ID, "workItemId": ID}, ["missionId"]),
    "sourceEvents": _body({"from": {"type": "integer", "minimum": 1, "maximum": 2**53 - 1},
                           "to": {"type": "integer", "minimum": 1, "maximum": 2**53 - 1}},
                          ["from", "to"]),
    "artifacts": HASHES, "decisions": NOTES, "constraints": NOTES, "unresolvedQuestions": NOTES,
    "generator": ID, "createdAt": TIME, "signature": SIGNATURE,
}, ["id", "version", "scope", "sourceEvents", "artifacts", "decisions", "constraints",
    "unresolvedQuestions", "generator", "createdAt", "signature"])
# An addition to PROTOCOL §2 (README): reusable knowledge crossing into another Group.
# The Organization's approval is a recorded event (`artifact.approve_forwarding`, by a
# human MissionOwner of the source Group); a forwarding names it, and this is the shape
# it is named in (`artifact.forwarded`, `artifact.received`, the artifact read).
FORWARDING_APPROVAL = _body({"id": ID, "approvedBy": PRINCIPAL, "approvedAt": TIME},
                            ["id", "approvedBy", "approvedAt"])
GROUP_ID = {"type": "string", "minLength": 1, "maxLength": 100}
BODIES.update({
    "artifact.publish": MANIFEST,
    "context.publish": CONTEXT_PACKAGE,
    "artifact.approve_forwarding": _body({"hash": HASH, "targetGroupId": GROUP_ID,
                                          "comment": TEXT}, ["hash", "targetGroupId"]),
    "artifact.forward": _body({"hash": HASH, "targetGroupId": GROUP_ID},
                              ["hash", "targetGroupId"]),
})
# §11.2 (PROTOCOL §2): the disclosure and nothing else, so that no other Group's names,
# assignments or queue positions can ride along. capacityStatus speaks Presence's words.
BODIES["schedule.disclose"] = _body({
    "estimatedStart": _body({"from": TIME, "to": TIME}, ["from", "to"]),
    "estimatedCompletion": TIME,
    "confidence": {"type": "number", "minimum": 0, "maximum": 1},
    "capacityStatus": {"enum": ["available", "busy", "offline"]},
    "calculatedAt": TIME,
}, ["estimatedStart", "estimatedCompletion", "confidence", "capacityStatus", "calculatedAt"])
BODY_VALIDATORS = {name: compile_schema(schema) for name, schema in BODIES.items()}


def check_body(command_type: str, body: object) -> None:
    try:
        check(BODY_VALIDATORS[command_type], body, "VALIDATION_ERROR",
              f"{command_type} body", prefix="body")
    except ProtocolError as error:
        if command_type == "work.block" and _flat_checkpoint(body):
            raise ProtocolError(
                "VALIDATION_ERROR",
                f"{error.message}; body.checkpoint has the shape of a work.checkpoint body, "
                "{progress: {phase, ...}, stateArtifact?}: put the progress fields under "
                "body.checkpoint.progress", error.details) from None
        raise


def _flat_checkpoint(body: object) -> bool:
    """A work.block whose checkpoint holds the progress fields themselves (the shape this
    server took before it followed PROTOCOL §2), so that its refusal can say how to fix it."""
    checkpoint = body.get("checkpoint") if isinstance(body, dict) else None
    return isinstance(checkpoint, dict) and "progress" not in checkpoint and "phase" in checkpoint


def check_contract(contract: JsonObject, path: str = "body.contract") -> JsonObject:
    """Validate a Work Contract against `mwp.work-contract/1`; INVALID_CONTRACT names the path."""
    check(CONTRACT, contract, "INVALID_CONTRACT", "Work Contract", prefix=path)
    for member in ("deliverables", "acceptanceCriteria"):
        ids = [entry["id"] for entry in contract[member]]
        duplicate = next((i for i in ids if ids.count(i) > 1), None)
        if duplicate is not None:
            raise ProtocolError("INVALID_CONTRACT",
                                f"Work Contract: {path}.{member}: id {duplicate!r} is repeated",
                                {"path": f"{path}.{member}"})
    _check_review_rules(contract, path)
    backoff = contract["retry"]["backoff"]
    if backoff["maxSeconds"] < backoff["initialSeconds"]:
        raise ProtocolError(
            "INVALID_CONTRACT",
            f"Work Contract: {path}.retry.backoff.maxSeconds is below initialSeconds",
            {"path": f"{path}.retry.backoff.maxSeconds"})
    return contract


def _check_review_rules(contract: JsonObject, path: str) -> None:
    """§13.2: a deliverable's `schema` must be a JSON Schema, and a criterion's
    `check:<name>` must name a check the server has (mission_weave/core/checks.py), so that
    the review can run what the contract asks."""
    for index, deliverable in enumerate(contract["deliverables"]):
        broken = "schema" in deliverable and checks.schema_problem(deliverable["schema"])
        if broken:
            where = f"{path}.deliverables[{index}].schema"
            raise ProtocolError("INVALID_CONTRACT", f"Work Contract: {where}: {broken}",
                                {"path": where})
    for index, criterion in enumerate(contract["acceptanceCriteria"]):
        trouble = checks.problem(criterion.get("method"), contract)
        if trouble:
            where = f"{path}.acceptanceCriteria[{index}].method"
            raise ProtocolError("INVALID_CONTRACT", f"Work Contract: {where}: {trouble}",
                                {"path": where, "knownChecks": sorted(checks.REGISTRY)})
