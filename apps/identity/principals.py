"""Who is asking: bearer-token authentication, signed envelopes, Group membership.
On the command hot path, so the lookups are single SQL statements."""

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings

from apps.ledger import db
from mission_weave.protocol.canonical import public_key_from_b64url, signature_key_id, verify
from mission_weave.protocol.errors import ProtocolError
from mission_weave.protocol.timefmt import parse_time

from .models import AgentKey, AgentSession, Membership

SESSIONS, KEYS, MEMBERS = (AgentSession._meta.db_table, AgentKey._meta.db_table,
                           Membership._meta.db_table)


@dataclass(frozen=True)
class Principal:
    id: str  # agent:<id> | user:<username> | system
    session_epoch: int | None = None
    # (group id, roles JSON or None, epoch, {key id: public key}): the membership in the
    # Group of the request, read with the bearer token in one query (`membership`).
    prefetched: tuple | None = field(default=None, compare=False, repr=False)
    is_authenticated = True  # what DRF and Django ask of request.user

    @property
    def is_agent(self) -> bool:
        return self.id.startswith("agent:")

    @property
    def agent_id(self) -> str | None:
        return self.id[len("agent:"):] if self.is_agent else None


@dataclass(frozen=True)
class Member:
    """A live membership; `public_key` is the signing key asked for, if active."""

    roles: frozenset
    epoch: int
    public_key: str | None = None


def token_hash(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def authenticate_bearer(token: str, now: datetime, group_id: str | None = None) -> Principal:
    """The agent of a live session. With `group_id` (a request about one Group) the same
    query reads its membership there and its active keys, for `membership`: a command
    spends one round trip on who is asking instead of two."""
    if group_id is None:
        rows = db.fetch(f"SELECT agent_id, epoch, expires_at, superseded_at FROM {SESSIONS} "
                        "WHERE token_hash = %s", [token_hash(token)])
    else:
        keys = (f"SELECT json_object_agg(k.key_id, k.public_key) FROM {KEYS} k "
                "WHERE k.agent_id = s.agent_id AND k.active")
        rows = db.fetch(
            f"SELECT s.agent_id, s.epoch, s.expires_at, s.superseded_at, m.roles, m.epoch, "
            f"({keys}) FROM {SESSIONS} s LEFT JOIN {MEMBERS} m ON m.group_id = %s "
            f"AND m.principal = 'agent:' || s.agent_id AND m.active WHERE s.token_hash = %s",
            [group_id, token_hash(token)])
    if not rows or db.aware(rows[0][2]) <= now:
        raise ProtocolError("UNAUTHENTICATED", "the bearer token is unknown or expired")
    agent_id, epoch, _expires, superseded_at = rows[0][:4]
    if superseded_at is not None:
        raise ProtocolError("STALE_SESSION", "this session was superseded by a newer one",
                            {"sessionEpoch": epoch})
    prefetched = None if group_id is None else (group_id, *rows[0][4:])
    return Principal(f"agent:{agent_id}", epoch, prefetched)


def check_fresh(issued_at: str, now: datetime) -> None:
    skew = timedelta(seconds=settings.MW_CLOCK_SKEW_SECONDS)
    if abs(parse_time(issued_at) - now) > skew:
        raise ProtocolError(
            "CLOCK_SKEW", f"issuedAt is more than {settings.MW_CLOCK_SKEW_SECONDS} s from "
            "the server's clock", {"serverTime": now.isoformat()})


def check_signature(document: dict, agent_id: str) -> None:
    """The document must be signed by one of the agent's active keys."""
    key_id = signature_key_id(document)
    key = AgentKey.objects.filter(key_id=key_id, agent_id=agent_id, active=True).first() \
        if key_id else None
    _verify(document, key.public_key if key else None, key_id)


def _verify(document: dict, public_key: str | None, key_id, signed: bytes | None = None):
    """canonical.verify also refuses a non-canonical S and a small-order or non-canonical
    key; a stored key that no longer parses verifies nothing (the 0003 migration revoked
    those)."""
    try:
        valid = public_key is not None and verify(document, public_key_from_b64url(public_key),
                                                  signed)
    except ValueError:
        valid = False
    if not valid:
        raise ProtocolError("INVALID_SIGNATURE", _refusal(public_key, key_id), {"keyId": key_id})


def _refusal(public_key: str | None, key_id) -> str:
    """Why: a revoked key is named as such (only on this failure path, one query)."""
    revoked = public_key is None and isinstance(key_id, str) and AgentKey.objects.filter(
        key_id=key_id, active=False).exists()
    if revoked:
        return (f"key {key_id} was revoked and signs nothing more; sign with another active "
                "key of this agent")
    return "the signature does not verify with an active key of this agent"


def membership(group_id: str, principal: Principal, key_id: str | None = None) -> Member:
    """The principal's live membership (and, for an agent, the public key `key_id` if
    it is one of its active keys). A non-member learns nothing of the Group."""
    if principal.prefetched is not None and principal.prefetched[0] == group_id:
        _, roles, epoch, keys = principal.prefetched
        rows = [] if roles is None else [(roles, epoch, db.from_json(keys or "{}").get(key_id))]
    else:
        rows = _membership_rows(group_id, principal, key_id)
    if not rows:
        raise ProtocolError("NOT_A_MEMBER", "you are not a member of this Group")
    roles, epoch, public_key = rows[0]
    return Member(frozenset(db.from_json(roles)), epoch, public_key)


def _membership_rows(group_id: str, principal: Principal, key_id: str | None) -> list:
    return db.fetch(
        f"SELECT m.roles, m.epoch, k.public_key FROM {MEMBERS} m "
        f"LEFT JOIN {KEYS} k ON k.key_id = %s AND k.agent_id = %s AND k.active "
        "WHERE m.group_id = %s AND m.principal = %s AND m.active",
        [key_id, principal.agent_id, group_id, principal.id])


def check_envelope_identity(envelope: dict, principal: Principal, member: Member,
                            signed: bytes, now: datetime) -> None:
    """The actor is the authenticated principal; an agent's command is fresh, from its
    current session, and signed by its key (PROTOCOL §1). `signed` are the envelope's
    signing bytes."""
    if envelope["actor"] != principal.id:
        raise ProtocolError("FORBIDDEN", f"actor {envelope['actor']} is not the authenticated "
                            f"principal {principal.id}")
    if not principal.is_agent:
        return
    _verify(envelope, member.public_key, signature_key_id(envelope), signed)
    check_current(envelope, principal, now)


def check_current(envelope: dict, principal: Principal, now: datetime) -> None:
    """A new decision needs a command from the current session, issued just now."""
    if envelope.get("sessionEpoch") != principal.session_epoch:
        raise ProtocolError("STALE_SESSION", f"sessionEpoch must be the current session's "
                            f"{principal.session_epoch}", {"sessionEpoch": principal.session_epoch})
    check_fresh(envelope["issuedAt"], now)


def check_membership_epoch(member: Member, epoch) -> None:
    if epoch != member.epoch:
        raise ProtocolError("STALE_MEMBERSHIP",
                            f"membershipEpoch must be the current {member.epoch}",
                            {"membershipEpoch": member.epoch})
