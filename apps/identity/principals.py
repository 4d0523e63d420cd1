"""Who is asking: bearer-token authentication, signed envelopes, Group membership.
On the command hot path, so the lookups are single SQL statements."""

import hashlib
import threading
import time
from collections import OrderedDict
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
    # Read from the session cache: the session, membership and key it names are checked
    # again in the Group's locked read (`recheck`, `confirm`) before anything is decided.
    cached_as: str | None = field(default=None, compare=False, repr=False)  # token hash
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


class _SessionCache:
    """Token hash and Group -> what `authenticate_bearer` read (a live session with a live
    membership): process-local, bounded, for a few seconds. A command authenticated from
    it costs no query before the lock; it is trusted for nothing: the pipeline reads the
    session, the membership and the key again in the Group's locked read (`recheck`), so
    a revocation is refused by the very next command (issue 27)."""

    SIZE, SECONDS = 10_000, 30.0

    def __init__(self) -> None:
        self._entries: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple):
        with self._lock:
            entry = self._entries.get(key)
        if entry is None or entry[0] < time.monotonic():
            return None
        return entry[1]

    def put(self, key: tuple, row) -> None:
        with self._lock:
            self._entries[key] = (time.monotonic() + self.SECONDS, row)
            self._entries.move_to_end(key)
            while len(self._entries) > self.SIZE:
                self._entries.popitem(last=False)

    def drop(self, token_hash_: str) -> None:
        with self._lock:
            for key in [k for k in self._entries if k[0] == token_hash_]:
                del self._entries[key]


SESSION_CACHE = _SessionCache()


def authenticate_bearer(token: str, now: datetime, group_id: str | None = None,
                        cached: bool = False) -> Principal:
    """The agent of a live session. With `group_id` (a request about one Group) the same
    query reads its membership there and its active keys, for `membership`: a command
    spends one round trip on who is asking instead of two. With `cached` (a command,
    whose pipeline checks it again under the Group lock) a session read a moment ago
    costs no query at all."""
    return _authenticated(token_hash(token), now, group_id, cached)


def _authenticated(hashed: str, now: datetime, group_id: str | None,
                   cached: bool) -> Principal:
    if cached and group_id is not None:
        row = SESSION_CACHE.get((hashed, group_id))
        if row is not None and db.aware(row[2]) > now:
            return Principal(f"agent:{row[0]}", row[1], (group_id, *row[4:]), hashed)
    if group_id is None:
        rows = db.fetch(f"SELECT agent_id, epoch, expires_at, superseded_at FROM {SESSIONS} "
                        "WHERE token_hash = %s", [hashed])
    else:
        keys = (f"SELECT json_object_agg(k.key_id, k.public_key) FROM {KEYS} k "
                "WHERE k.agent_id = s.agent_id AND k.active")
        rows = db.fetch(
            f"SELECT s.agent_id, s.epoch, s.expires_at, s.superseded_at, m.roles, m.epoch, "
            f"({keys}) FROM {SESSIONS} s LEFT JOIN {MEMBERS} m ON m.group_id = %s "
            f"AND m.principal = 'agent:' || s.agent_id AND m.active WHERE s.token_hash = %s",
            [group_id, hashed])
    if not rows or db.aware(rows[0][2]) <= now:
        raise ProtocolError("UNAUTHENTICATED", "the bearer token is unknown or expired")
    agent_id, epoch, _expires, superseded_at = rows[0][:4]
    if superseded_at is not None:
        raise ProtocolError("STALE_SESSION", "this session was superseded by a newer one",
                            {"sessionEpoch": epoch})
    prefetched = None if group_id is None else (group_id, *rows[0][4:])
    if cached and group_id is not None and rows[0][4] is not None:  # a live membership
        SESSION_CACHE.put((hashed, group_id), tuple(rows[0]))
    return Principal(f"agent:{agent_id}", epoch, prefetched)


def recheck(group_id: str, principal: Principal, key_id: str | None) -> tuple | None:
    """For a principal read from the session cache: the statement that reads its session,
    its membership and its signing key as they are now, to run in the Group's locked read
    (`confirm` judges its rows). None for any other principal: it was read just now."""
    if principal.cached_as is None:
        return None
    return (f"SELECT s.epoch, s.expires_at, s.superseded_at, m.roles, m.epoch, k.active "
            f"FROM {SESSIONS} s LEFT JOIN {MEMBERS} m ON m.group_id = %s "
            f"AND m.principal = 'agent:' || s.agent_id AND m.active "
            f"LEFT JOIN {KEYS} k ON k.key_id = %s AND k.agent_id = s.agent_id AND k.active "
            "WHERE s.token_hash = %s", [group_id, key_id, principal.cached_as])


def confirm(principal: Principal, member: Member, rows: list, key_id, now: datetime) -> None:
    """`recheck`'s rows agree with the cached session and membership, or the command is
    refused as it would have been without the cache (and the cache forgets the token)."""
    if principal.cached_as is None:
        return
    row = rows[0] if rows else None
    if row is not None and db.aware(row[1]) > now and row[2] is None and \
            row[0] == principal.session_epoch and row[3] is not None and \
            frozenset(db.from_json(row[3])) == member.roles and row[4] == member.epoch and \
            row[5]:
        return
    SESSION_CACHE.drop(principal.cached_as)
    if row is None or db.aware(row[1]) <= now:
        raise ProtocolError("UNAUTHENTICATED", "the bearer token is unknown or expired")
    if row[2] is not None or row[0] != principal.session_epoch:
        raise ProtocolError("STALE_SESSION", "this session was superseded by a newer one",
                            {"sessionEpoch": row[0]})
    if row[3] is None:
        raise ProtocolError("NOT_A_MEMBER", "you are not a member of this Group")
    if row[4] != member.epoch or frozenset(db.from_json(row[3])) != member.roles:
        raise ProtocolError("STALE_MEMBERSHIP", f"membershipEpoch must be the current {row[4]}",
                            {"membershipEpoch": row[4]})
    raise ProtocolError("INVALID_SIGNATURE", _refusal(None, key_id), {"keyId": key_id})


def cached(principal: Principal) -> bool:
    return principal.cached_as is not None


def afresh(group_id: str, principal: Principal, now: datetime) -> Principal | None:
    """A principal from the session cache, read again (and cached again) after a check
    before the lock refused it: the refusal, if any, is the one a fresh read gives."""
    if principal.cached_as is None:
        return None
    SESSION_CACHE.drop(principal.cached_as)
    return _authenticated(principal.cached_as, now, group_id, True)


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
