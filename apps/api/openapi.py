"""The OpenAPI document's schemas, generated from the JSON Schemas the server validates
against: the Work Contract file, mission_weave/core/schemas.py (Evidence, the manifest, the
Context Package and every command body), the command envelope, the session and Presence
requests, the Agent Card. Nothing here copies them.

The document is OpenAPI 3.1, whose Schema Object is JSON Schema 2020-12, the dialect of
those schemas, so the conversion is small: `$id`/`$schema` go, the contract's `$defs`
become components, and the sub-schemas the source names (EVIDENCE, MANIFEST, ...) become
one component each, `$ref`'d wherever the source reuses the same dict.

`postprocess` (SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]) adds the components; the
views' `extend_schema` refer to them with `ref()`, `json_body()` and `errors()`.

Each `<Type>Command` carries an example envelope (apps/api/examples.py), and the commands
endpoint offers them all by type; tests/integration/test_openapi_examples.py posts each one.

The answers have no JSON Schema of their own on the server (reads.py and the views build
them); their shapes are written once here, and tests/integration/test_openapi.py checks
real answers against them.
"""

import copy
import re
from collections import defaultdict
from functools import lru_cache

from drf_spectacular.utils import OpenApiResponse

from apps.identity import presence, registry, sessions
from apps.identity.models import Membership
from apps.ledger.envelope import ENVELOPE
from mission_weave.core import commands, lifecycle
from mission_weave.core import schemas as work
from mission_weave.core import state as work_state
from mission_weave.core.json_types import JsonObject
from mission_weave.protocol.errors import HTTP_STATUS

from . import examples

COMPONENTS = "#/components/schemas/"


def ref(name: str) -> dict:
    return {"$ref": COMPONENTS + name}


def json_body(name: str) -> dict:
    """`extend_schema(request=...)` for a JSON body described by component `name`."""
    return {"application/json": ref(name)}


def source(compiled) -> dict:
    """The schema dict a compiled `jsonschema_check.Schema` was made from."""
    return compiled.explainer.schema


def pascal(command_type: str) -> str:
    """`work.accept_offer` -> `WorkAcceptOffer` (component names)."""
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[._]", command_type))


# --- JSON Schema -> OpenAPI 3.1 component schemas ------------------------------------------

def _named_schemas() -> dict:
    """Component name -> schema dict, for the dicts mission_weave/core/schemas.py names and reuses:
    each becomes one component, referenced wherever the same dict appears."""
    names = {"Evidence": work.EVIDENCE, "Progress": work.PROGRESS,
             "Checkpoint": getattr(work, "CHECKPOINT", None),
             "SixDimensions": work.SIX_DIMENSIONS, "Money": work.MONEY,
             "Signature": work.SIGNATURE, "ArtifactManifest": work.MANIFEST,
             "ContextPackage": work.CONTEXT_PACKAGE,
             "CapabilityScopes": work.CAPABILITY_SCOPES,
             "ForwardingApproval": work.FORWARDING_APPROVAL}
    return {name: schema for name, schema in names.items() if isinstance(schema, dict)}


VERBATIM = frozenset({"enum", "const", "default", "examples", "required"})
SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "dependentSchemas"})


def convert(node, named: dict, defs_prefix: str = "", root: bool = True):
    """A deep copy of a JSON Schema as an OpenAPI 3.1 schema: named sub-schemas become
    `$ref`s (not the root itself), `#/$defs/x` becomes `#/components/schemas/<prefix>X`,
    `$id`, `$schema` and `$defs` go (the caller hoists the `$defs`)."""
    if isinstance(node, list):
        return [convert(item, named, defs_prefix, root=False) for item in node]
    if not isinstance(node, dict):
        return node
    if not root and id(node) in named:
        return ref(named[id(node)])
    out: JsonObject = {}
    for key, value in node.items():
        if key in ("$id", "$schema", "$defs"):
            continue
        if key == "$ref" and isinstance(value, str) and value.startswith("#/$defs/"):
            out[key] = COMPONENTS + defs_prefix + pascal(value[len("#/$defs/"):])
        elif key in VERBATIM:
            out[key] = copy.deepcopy(value)
        elif key in SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: convert(sub, named, defs_prefix, root=False)
                        for name, sub in value.items()}
        else:
            out[key] = convert(value, named, defs_prefix, root=False)
    return out


def _contract_components(named: dict) -> dict:
    """WorkContract and its `$defs` (WorkContractId, WorkContractMoney, ...), with the
    deliverable and acceptance criterion as components of their own."""
    contract = source(work.CONTRACT)
    prefix = "WorkContract"
    found = {prefix + pascal(name): convert(schema, named, prefix)
             for name, schema in contract.get("$defs", {}).items()}
    document = convert(contract, named, prefix)
    for member, name in (("deliverables", "Deliverable"),
                         ("acceptanceCriteria", "AcceptanceCriterion")):
        array = document["properties"][member]
        found[name], array["items"] = array["items"], ref(name)
    found[prefix] = document
    return found


# --- Commands -------------------------------------------------------------------------------

CONTRACT_MEMBER = "contract"  # a body's contract is checked by check_contract, not BODIES


def _body_schema(command_type: str, named: dict) -> tuple[dict | None, dict]:
    """(component to add or None, the schema of the envelope's `body`)."""
    schema = work.BODIES.get(command_type)
    if schema is None:  # a command without a body schema of its own
        return None, {"type": "object"}
    if id(schema) in named:
        return None, ref(named[id(schema)])
    body = convert(schema, named)
    if body.get("properties", {}).get(CONTRACT_MEMBER) == {"type": "object"}:
        body["properties"][CONTRACT_MEMBER] = ref("WorkContract")
    return body, ref(pascal(command_type) + "Body")


def _roles_text(command_type: str) -> str:
    roles = ", ".join(sorted(commands.ROLES[command_type]))
    human = " Given by a human (`user:` actor) only." if command_type in commands.HUMAN_ONLY \
        else ""
    return f"`{command_type}`: needs one of the roles {roles} in the Group.{human}"


def _command_components(named: dict) -> dict:
    """One `<Type>Command` per command type (the envelope with `type` fixed and `body`
    its body schema, and an example), `<Type>Body` where the body is not a named component,
    and CommandEnvelope: a oneOf over them, discriminated by `type`."""
    found, mapping = {}, {}
    base = convert(source(ENVELOPE), named)
    for command_type in commands.COMMAND_TYPES:
        body, body_schema = _body_schema(command_type, named)
        if body is not None:
            found[pascal(command_type) + "Body"] = body
        variant = copy.deepcopy(base)
        name = pascal(command_type) + "Command"
        variant["title"] = f"{name}: {command_type}"
        variant["description"] = _roles_text(command_type)
        variant["properties"]["type"] = {"type": "string", "enum": [command_type]}
        variant["properties"]["body"] = body_schema
        if command_type in examples.COMMANDS:  # each has one (test_openapi_examples.py)
            variant["examples"] = [examples.example(command_type)]
        found[name] = variant
        mapping[command_type] = COMPONENTS + name
    found["CommandType"] = {"type": "string", "enum": list(commands.COMMAND_TYPES)}
    found["CommandEnvelope"] = {
        "description": "The signed command envelope (PROTOCOL §2, §7); `type` selects the "
                       "shape of `body`. `signature` is absent on a logged-in human's "
                       "command.",
        "oneOf": [{"$ref": target} for target in mapping.values()],
        "discriminator": {"propertyName": "type", "mapping": mapping},
    }
    return found


# --- Errors ---------------------------------------------------------------------------------

def _error_components() -> dict:
    table = ", ".join(f"`{code}` ({status})" for code, status in HTTP_STATUS.items())
    return {
        "ErrorCode": {"type": "string", "enum": list(HTTP_STATUS),
                      "description": f"PROTOCOL §2's codes with their usual HTTP status: "
                                     f"{table}."},
        "ErrorObject": {
            "type": "object", "additionalProperties": False,
            "required": ["code", "message", "details"],
            "properties": {"code": ref("ErrorCode"), "message": {"type": "string"},
                           "details": {"type": "object"}}},
        "ErrorEnvelope": {
            "description": "Every answer under /api/ that is not a success (PROTOCOL §7).",
            "type": "object", "additionalProperties": False, "required": ["error"],
            "properties": {"error": ref("ErrorObject")}},
    }


def errors(*codes) -> dict:
    """`extend_schema(responses=...)` entries for the codes an endpoint can answer,
    grouped by HTTP status: a code, or (code, status) where the status is not its usual."""
    by_status = defaultdict(list)
    for entry in codes:
        code, status = entry if isinstance(entry, tuple) else (entry, HTTP_STATUS[entry])
        by_status[status].append(code)
    return {status: OpenApiResponse(response=ref("ErrorEnvelope"),
                                    description=", ".join(f"`{c}`" for c in found))
            for status, found in sorted(by_status.items())}


# The errors the endpoints share.
AUTH = ("UNAUTHENTICATED", "STALE_SESSION")
MEMBER = (*AUTH, "NOT_A_MEMBER")
PAGE = ("VALIDATION_ERROR", *MEMBER)
ONE = (*MEMBER, "NOT_FOUND")
COMMAND_ERRORS = tuple(code for code, status in HTTP_STATUS.items()
                       if status in (400, 401, 403, 404, 409, 413, 422))


# --- Answers --------------------------------------------------------------------------------

def _obj(required=(), **properties) -> dict:
    """An answer object: open (clients must tolerate members added later)."""
    return {"type": "object", "required": list(required), "properties": properties}


def _nullable(schema: dict) -> dict:
    return {"anyOf": [schema, {"type": "null"}]}


STR = {"type": "string"}
INT = {"type": "integer"}
BOOL = {"type": "boolean"}
ANY_OBJECT = {"type": "object"}


def _list(schema: dict) -> dict:
    return {"type": "array", "items": schema}


def _answer_components(named: dict) -> dict:
    hash_, time = convert(work.HASH, named), convert(work.TIME, named)
    maybe_time = _nullable(time)
    item_states = [s for s in lifecycle.STATES if s not in (lifecycle.NONE, lifecycle.PROPOSAL)]
    mission_states = [work_state.MISSION_ACTIVE, work_state.MISSION_APPROVED,
                      work_state.MISSION_FAILED, work_state.MISSION_CANCELLED]
    event_keys = ("id", "groupId", "sequence", "type", "occurredAt", "actor", "commandId",
                  "missionId", "workItemId", "revision", "data", "prevHash", "hash")
    return {
        "Event": _obj(
            event_keys, id=STR, groupId=STR, sequence={"type": "integer", "minimum": 1},
            type={**STR, "description": "e.g. `work.offered`; `data` depends on it"},
            occurredAt=time, actor={**STR, "description": "`agent:<id>`, `user:<name>` or "
                                                           "`system`"},
            commandId=STR, missionId=_nullable(STR), workItemId=_nullable(STR),
            revision=_nullable(INT), data=ANY_OBJECT, prevHash=hash_, hash=hash_),
        "CommandAnswer": _obj(
            ("commandId", "events", "duplicate"), commandId=STR, events=_list(ref("Event")),
            duplicate=BOOL,
            capabilityToken={**_obj(("id", "token", "scopes", "expiresAt"), id=STR, token=STR,
                                    scopes=ANY_OBJECT, expiresAt=time),
                             "description": "when an event of the answer issued the sender "
                                            "a capability token (§11.3)"}),
        "EventsPage": _obj(("events", "headSequence"), events=_list(ref("Event")),
                           headSequence=INT),
        "ArchivePage": _obj(("events", "onlineFloor"), events=_list(ref("Event")),
                            onlineFloor=INT),
        "Session": _obj(("sessionId", "sessionEpoch", "token", "expiresAt"), sessionId=STR,
                        sessionEpoch=INT, token=STR, expiresAt=time),
        "SessionRequest": convert(source(sessions.OPEN_SESSION), named),
        "PresenceReport": convert(source(presence.REPORT), named),
        "Presence": _obj(("agentId", "availableSlots", "status", "reportedAt"), agentId=STR,
                         availableSlots=INT,
                         status=convert(source(presence.REPORT), named)["properties"]["status"],
                         reportedAt=time),
        "IntrospectionRequest": {"type": "object", "required": ["token"],
                                 "properties": {"token": STR}},
        "Introspection": _obj(
            ("active",), active=BOOL, scope=STR, scopes=ANY_OBJECT, groupId=STR,
            workItemId=STR, missionId=STR, leaseId=STR, ownershipEpoch=INT, sub=STR, exp=INT,
            tokenId=STR, token_type=STR),
        "AuthorityKeys": _obj(("keys",), keys=_list(_obj(
            ("keyId", "publicKey"), keyId=STR, publicKey=STR, current=BOOL,
            retiredAt=time))),
        "Cursor": _obj(("groupId", "principal", "sequence", "updatedAt"), groupId=STR,
                       principal=STR, sequence=INT, updatedAt=maybe_time),
        "AgentCard": convert(source(registry.AGENT_CARD), named),
        "Membership": _obj(
            ("groupId", "principal", "roles", "membershipEpoch", "agentCard"), groupId=STR,
            principal=STR, roles=_list({"type": "string", "enum": list(Membership.ROLES)}),
            membershipEpoch=INT, agentCard=_nullable(ref("AgentCard"))),
        "Lease": _obj(("id", "expiresAt"), id=STR, expiresAt=time),
        "Offer": _obj(("agentId", "expiresAt", "rank", "selectionBasis", "status"),
                      agentId=STR, expiresAt=time, rank=INT, selectionBasis=ANY_OBJECT,
                      status={"type": "string",
                              "enum": ["live", "accepted", "declined", "withdrawn"]},
                      decline=_nullable(ANY_OBJECT)),
        "WorkItem": _obj(
            ("id", "missionId", "state", "revision", "contractRevision", "contract",
             "ownershipEpoch", "owner", "startBy", "lease", "dependsOn"),
            id=STR, missionId=STR, state={"type": "string", "enum": item_states},
            revision=INT, contractRevision=INT, contract=ref("WorkContract"),
            ownershipEpoch=INT, owner={**_nullable(STR), "description": "an agent id"},
            startBy=maybe_time, lease=_nullable(ref("Lease")), dependsOn=_list(STR),
            dependencyPolicy=STR, acceptedContractRevision=_nullable(INT),
            executionApproved=BOOL, offers=_list(ref("Offer")), offerMode=_nullable(STR),
            attempts=INT, blockedUntil=maybe_time, requiredResolution=_nullable(STR),
            childMissionId=_nullable(STR), lastCheckpoint=_nullable(ANY_OBJECT),
            submission=_nullable(ANY_OBJECT), review=_nullable(ANY_OBJECT),
            openAmbiguities=_list({}), usage=ANY_OBJECT,
            scheduleDisclosure=_nullable(ANY_OBJECT)),
        "WorkItemList": _obj(("workItems",), workItems=_list(ref("WorkItem")), truncated=BOOL),
        "Mission": _obj(
            ("id", "title", "state", "ownerId", "coordinatorId", "parentWorkItemId",
             "workItems"),
            id=STR, title=STR, state={"type": "string", "enum": mission_states}, ownerId=STR,
            coordinatorId=STR, parentWorkItemId=_nullable(STR), workItems=_list(STR),
            revision=INT, budgets=_nullable(ANY_OBJECT), autoDispatch=BOOL, usage=ANY_OBJECT),
        "MissionList": _obj(("missions",), missions=_list(ref("Mission")), truncated=BOOL),
        "RefusedCommand": _obj(
            ("commandId", "type", "actor", "at", "status", "error", "command"), commandId=STR,
            type=STR, actor=STR, at=time, status=INT,
            error=_nullable(ref("ErrorObject")),
            command=_nullable(ANY_OBJECT)),
        "AuditTrail": _obj(("events", "refusedCommands"), events=_list(ref("Event")),
                           refusedCommands=_list(ref("RefusedCommand")),
                           refusedCommandsTruncated=BOOL),
        "Review": _obj(
            ("workItemId", "state", "revision", "contractRevision", "deliverables",
             "acceptanceCriteria", "submission", "review", "history"),
            workItemId=STR, state={"type": "string", "enum": item_states}, revision=INT,
            contractRevision=INT, deliverables=_list(ref("Deliverable")),
            acceptanceCriteria=_list(ref("AcceptanceCriterion")),
            submission=_nullable(ANY_OBJECT), review=_nullable(ANY_OBJECT),
            history=_list(ref("Event"))),
        "Snapshot": _obj(("id", "groupId", "sequence", "hash", "state", "createdAt",
                          "signature"), id=STR, groupId=STR, sequence=INT, hash=hash_,
                         state=ANY_OBJECT, createdAt=time, signature=ref("Signature")),
        "Artifact": _obj(
            ("hash", "origin", "manifest", "publishedBy", "recordedAt", "receivedFrom",
             "forwardedTo"),
            hash=hash_, origin={"type": "string", "enum": ["published", "received"]},
            manifest=ref("ArtifactManifest"), publishedBy=STR, recordedAt=time,
            receivedFrom=_nullable(_obj(("groupId", "approval"), groupId=STR,
                                        approval=ref("ForwardingApproval"))),
            forwardedTo=_list(_obj(("groupId", "approval", "by", "at"), groupId=STR,
                                   approval=ref("ForwardingApproval"), by=STR, at=time))),
        "ArtifactSummary": _obj(
            ("hash", "origin", "mediaType", "producer", "missionId", "workItemId",
             "createdAt", "classification", "sources"),
            hash=hash_, origin=STR, mediaType=STR, producer=STR, missionId=STR,
            workItemId=_nullable(STR), createdAt=time, classification=STR,
            sources=_list(hash_)),
        "Provenance": _obj(("artifact", "ancestors", "descendants", "edges"),
                           artifact=ref("Artifact"), ancestors=_list(ref("ArtifactSummary")),
                           descendants=_list(ref("ArtifactSummary")),
                           edges=_list(_obj(("from", "to"), **{"from": hash_, "to": hash_}))),
        "ContextPackageRecord": _obj(
            ("id", "version", "hash", "previousVersion", "previousHash", "package",
             "publisher", "publishedAt"),
            id=STR, version=INT, hash=hash_, previousVersion=_nullable(INT),
            previousHash=_nullable(hash_), package=ref("ContextPackage"), publisher=STR,
            publishedAt=time),
        "ContextPackageEvents": _obj(("packageId", "version", "sourceEvents", "events"),
                                     packageId=STR, version=INT,
                                     sourceEvents=_obj(("from", "to"), **{"from": INT,
                                                                          "to": INT}),
                                     events=_list(ref("Event"))),
        "StoredBlob": _obj(("hash", "size"), hash=hash_, size=INT),
    }


@lru_cache(maxsize=1)
def _components() -> dict:
    by_name = _named_schemas()
    named = {id(schema): name for name, schema in by_name.items()}
    found = {name: convert(schema, named) for name, schema in by_name.items()}
    found.update(_contract_components(named))
    found.update(_command_components(named))
    found.update(_error_components())
    found.update(_answer_components(named))
    return found


def components() -> dict:
    """Every component schema, a fresh copy (the cached one stays as built)."""
    return copy.deepcopy(_components())


# Every request under /api/v1/ counts against a rate limit, by client IP before anything
# else and by principal once known (mission_weave/runtime/rate_limits.py): any operation
# may answer it.
RATE_LIMITED_ANSWER = {
    "description": "`RATE_LIMITED`",
    "headers": {"Retry-After": {"description": "whole seconds until a retry may pass",
                                "schema": {"type": "integer", "minimum": 1}}},
    "content": {"application/json": {"schema": ref("ErrorEnvelope")}},
}


def command_examples() -> dict:
    """The commands endpoint's request examples, one per command type (a Media Type
    Object's `examples`: Swagger UI and ReDoc offer them by name)."""
    return {command_type: {"summary": _roles_text(command_type).split(":", 1)[0].strip("`"),
                           "description": _roles_text(command_type),
                           "value": examples.example(command_type)}
            for command_type in commands.COMMAND_TYPES if command_type in examples.COMMANDS}


def postprocess(result, generator, request, public):
    """drf-spectacular hook: add the components, mark every request body required (a raw
    schema in `extend_schema(request=...)` leaves it optional), give every operation its
    429 answer, and a command body an example per command type."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas.update(components())
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            if not isinstance(operation, dict):
                continue
            if "requestBody" in operation:
                operation["requestBody"]["required"] = True
                media = operation["requestBody"].get("content", {}).get("application/json", {})
                if media.get("schema") == ref("CommandEnvelope"):
                    media["examples"] = command_examples()
            operation.setdefault("responses", {}).setdefault(
                "429", copy.deepcopy(RATE_LIMITED_ANSWER))
    return result
