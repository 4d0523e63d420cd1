"""The signed command envelope (PROTOCOL §2, §7): its schema and its parsing."""

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from mission_weave.core import offline_binding
from mission_weave.core.commands import Command
from mission_weave.core.jsonschema_check import check, compile_schema
from mission_weave.protocol.canonical import MAX_DEPTH, domain_problem, signing_bytes
from mission_weave.protocol.errors import ProtocolError

KNOWN_EXTENSIONS = frozenset({offline_binding.URN})

ENVELOPE = compile_schema({
    "type": "object", "additionalProperties": False,
    "required": ["id", "type", "groupId", "actor", "issuedAt", "membershipEpoch", "body"],
    "properties": {
        "id": {"type": "string", "minLength": 1, "maxLength": 200, "pattern": "^[!-~]+$"},
        "type": {"type": "string", "minLength": 1, "maxLength": 100},
        "groupId": {"type": "string", "minLength": 1, "maxLength": 100},
        "actor": {"type": "string", "minLength": 1, "maxLength": 200},
        "issuedAt": {"type": "string", "format": "date-time"},
        "sessionEpoch": {"type": "integer", "minimum": 1},
        "membershipEpoch": {"type": "integer", "minimum": 1},
        "workItemId": {"type": "string", "minLength": 1, "maxLength": 100},
        "expectedRevision": {"type": "integer", "minimum": 0},
        "ownershipEpoch": {"type": "integer", "minimum": 0},
        "leaseId": {"type": "string", "minLength": 1, "maxLength": 100},
        "body": {"type": "object"},
        "extensions": {"type": "object", "additionalProperties": {
            "type": "object", "required": ["critical"],
            "properties": {"critical": {"type": "boolean"}}}},
        "signature": {"type": "object", "additionalProperties": False,
                      "required": ["alg", "keyId", "sig"],
                      "properties": {"alg": {"const": "Ed25519"},
                                     "keyId": {"type": "string", "maxLength": 120},
                                     "sig": {"type": "string", "maxLength": 200}}},
    },
})


# The envelope its transport has just found within the JSON domain, and the depth it was
# checked to: (envelope, max_depth), set by `domain_checked` around one submit.
_CHECKED: ContextVar[tuple[object, int] | None] = ContextVar("mw_domain_checked", default=None)


@contextmanager
def domain_checked(envelope: object, max_depth: int) -> Iterator[None]:
    """Within it, `check_envelope(envelope, ...)` does not walk `envelope` for the JSON
    domain again: its transport did, and found domain_problem(envelope, max_depth) None
    (HTTP's read_json, the WebSocket's frame one level up). Only that very object, and
    only when max_depth is within MAX_DEPTH, so the refusals stay those of the walk."""
    token = _CHECKED.set((envelope, max_depth))
    try:
        yield
    finally:
        _CHECKED.reset(token)


def _walked(envelope: object) -> bool:
    checked = _CHECKED.get()
    return checked is not None and checked[0] is envelope and checked[1] <= MAX_DEPTH


def check_envelope(envelope, group_id: str) -> bytes:
    """Check the envelope's shape; return the bytes its signature covers (RFC 8785)."""
    if not isinstance(envelope, dict):
        raise ProtocolError("VALIDATION_ERROR", "the command must be a JSON object")
    # Any transport: it is hashed, signed and stored. Once is enough (domain_checked).
    problem = None if _walked(envelope) else domain_problem(envelope)
    if problem is not None:
        raise ProtocolError("VALIDATION_ERROR", f"command envelope: {problem[0]}: {problem[1]}",
                            {"path": problem[0]})
    check(ENVELOPE, envelope, "VALIDATION_ERROR", "command envelope")
    if envelope["groupId"] != group_id:
        raise ProtocolError("VALIDATION_ERROR",
                            "groupId in the command differs from the Group in the path",
                            {"path": "groupId"})
    for urn, extension in (envelope.get("extensions") or {}).items():
        if extension["critical"] and urn not in KNOWN_EXTENSIONS:
            raise ProtocolError("UNKNOWN_CRITICAL_EXTENSION",
                                f"the critical extension {urn} is not understood here",
                                {"extension": urn})
    binding = (envelope.get("extensions") or {}).get(offline_binding.URN)
    if binding is not None:
        offline_binding.check_binding(binding, envelope["type"], group_id)
    try:
        return signing_bytes(envelope)
    except (ValueError, TypeError) as error:  # e.g. an integer beyond IEEE 754's 2**53
        raise ProtocolError("VALIDATION_ERROR",
                            f"the command has no RFC 8785 canonical form: {error}") from None


def to_command(envelope: dict, roles: frozenset) -> Command:
    return Command(
        id=envelope["id"], type=envelope["type"], actor=envelope["actor"], body=envelope["body"],
        roles=roles, work_item_id=envelope.get("workItemId"),
        expected_revision=envelope.get("expectedRevision"),
        ownership_epoch=envelope.get("ownershipEpoch"), lease_id=envelope.get("leaseId"),
        session_epoch=envelope.get("sessionEpoch"),
        offline=(envelope.get("extensions") or {}).get(offline_binding.URN))
