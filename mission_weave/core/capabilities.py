"""Capability tokens bound to the Execution Lease (§11.3). Pure: `now` is an argument.

A token is bound to one Lease ID, not the reverse, so it can be rotated or narrowed while
that lease lives. Its scopes come from the Work Contract's `allowed` tools and operations
and can only shrink; it never expires past the lease boundary under which it was issued.
The WorkItem state keeps the descriptors `{id, leaseId, scopes, expiresAt, revoked}`; the
bearer secret a tool gateway sees is derived from them by the shell and never stored.

A token is active iff it is not revoked, its lease is the item's open lease, and `now` is
before both its own expiry and the lease's.
"""

from datetime import datetime, timedelta

from mission_weave.protocol.errors import ProtocolError
from mission_weave.protocol.timefmt import format_time, parse_time

from .json_types import JsonObject
from .state import WorkItem

# A token's scopes: kind (tools, operations) -> the names it may use.
Scopes = dict[str, list[str]]

SCOPE_KINDS = ("tools", "operations")
_SCOPE_PREFIX = {"tools": "tool", "operations": "operation"}


def contract_scopes(contract: JsonObject) -> Scopes:
    """The widest scopes a token for this contract may carry."""
    allowed = contract.get("allowed") or {}
    return {kind: list(allowed.get(kind, [])) for kind in SCOPE_KINDS}


def widening(held: Scopes, requested: JsonObject) -> Scopes:
    """What `requested` asks for beyond `held`, per kind (empty when it is a subset)."""
    extra: Scopes = {}
    for kind in SCOPE_KINDS:
        beyond = [name for name in requested.get(kind, held[kind]) if name not in held[kind]]
        if beyond:
            extra[kind] = beyond
    return extra


def narrowed(held: Scopes, requested: JsonObject) -> Scopes:
    """`requested` as full scopes (a kind it leaves out keeps what is held); refused when it
    would widen anything, since narrowing is a subset only."""
    extra = widening(held, requested)
    if extra:
        raise ProtocolError("FORBIDDEN",
                            "a capability token can only be narrowed to a subset of its scopes",
                            {"widening": extra, "held": held})
    return {kind: list(dict.fromkeys(requested.get(kind, held[kind]))) for kind in SCOPE_KINDS}


def expiry(lease_expires_at: datetime, now: datetime, seconds: int | None = None) -> datetime:
    """A token's expiry: the lease boundary, or earlier when asked for a shorter life."""
    if seconds is None:
        return lease_expires_at
    return min(lease_expires_at, now + timedelta(seconds=seconds))


def descriptor(token_id: str, lease_id: str, scopes: Scopes,
               expires_at: datetime) -> JsonObject:
    """What an event carries as `capabilityToken` (never the bearer secret)."""
    return {"id": token_id, "leaseId": lease_id, "expiresAt": format_time(expires_at),
            "scopes": {kind: list(scopes[kind]) for kind in SCOPE_KINDS}}


def find(item: WorkItem, token_id: str) -> JsonObject | None:
    return next((t for t in item.capability_tokens if t["id"] == token_id), None)


def _unrevoked(item: WorkItem) -> list[JsonObject]:
    """The unrevoked tokens of the item's open lease, oldest first."""
    lease = item.live_lease
    if lease is None:
        return []
    return [t for t in item.capability_tokens if t["leaseId"] == lease.id and not t["revoked"]]


def current(item: WorkItem) -> JsonObject | None:
    """The latest unrevoked token of the item's open lease, if any."""
    live = _unrevoked(item)
    return live[-1] if live else None


def held_scopes(item: WorkItem) -> Scopes:
    """The scopes the lease holder holds now: its current token's, or the contract's when no
    token was recorded for the lease."""
    token = current(item)
    return dict(token["scopes"]) if token is not None else contract_scopes(item.contract)


def unrevoked_ids(item: WorkItem) -> list[str]:
    """The tokens a rotation or narrowing revokes: every unrevoked one of the open lease."""
    return [t["id"] for t in _unrevoked(item)]


def is_active(item: WorkItem, token: JsonObject | None, now: datetime) -> bool:
    if token is None or token["revoked"]:
        return False
    lease = item.live_lease
    if lease is None or token["leaseId"] != lease.id:
        return False
    return now < min(parse_time(token["expiresAt"]), lease.expires_at)


def scope_string(scopes: Scopes) -> str:
    """RFC 7662 `scope`: space-separated `tool:<name>` and `operation:<name>`."""
    return " ".join(f"{_SCOPE_PREFIX[kind]}:{name}"
                    for kind in SCOPE_KINDS for name in scopes.get(kind, []))
