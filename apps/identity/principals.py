"""Who is asking: bearer-token authentication, signed envelopes, Group membership."""

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings

from mission_weave.protocol.canonical import public_key_from_b64url, signature_key_id, verify
from mission_weave.protocol.errors import ProtocolError
from mission_weave.protocol.timefmt import parse_time

from .models import AgentKey, AgentSession, Membership


@dataclass(frozen=True)
class Principal:
    id: str  # agent:<id> | user:<username> | system
    session_epoch: int | None = None
    is_authenticated = True  # what DRF and Django ask of request.user

    @property
    def is_agent(self) -> bool:
        return self.id.startswith("agent:")

    @property
    def agent_id(self) -> str | None:
        return self.id[len("agent:"):] if self.is_agent else None


SYSTEM = Principal("system")


def token_hash(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def authenticate_bearer(token: str, now: datetime) -> Principal:
    session = (AgentSession.objects.filter(token_hash=token_hash(token))
               .only("agent_id", "epoch", "expires_at", "superseded_at").first())
    if session is None or session.expires_at <= now:
        raise ProtocolError("UNAUTHENTICATED", "the bearer token is unknown or expired")
    if session.superseded_at is not None:
        raise ProtocolError("STALE_SESSION", "this session was superseded by a newer one",
                            {"sessionEpoch": session.epoch})
    return Principal(f"agent:{session.agent_id}", session.epoch)


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
    if key is None or not verify(document, public_key_from_b64url(key.public_key)):
        raise ProtocolError("INVALID_SIGNATURE",
                            "the signature does not verify with an active key of this agent",
                            {"keyId": key_id})


def check_envelope_identity(envelope: dict, principal: Principal, now: datetime) -> None:
    """The actor is the authenticated principal; an agent's command is fresh, from its
    current session, and signed by its key (PROTOCOL §1)."""
    if envelope["actor"] != principal.id:
        raise ProtocolError("FORBIDDEN", f"actor {envelope['actor']} is not the authenticated "
                            f"principal {principal.id}")
    if not principal.is_agent:
        return
    if envelope.get("sessionEpoch") != principal.session_epoch:
        raise ProtocolError("STALE_SESSION", f"sessionEpoch must be the current session's "
                            f"{principal.session_epoch}", {"sessionEpoch": principal.session_epoch})
    check_fresh(envelope["issuedAt"], now)
    check_signature(envelope, principal.agent_id)


def membership(group_id: str, principal: Principal) -> Membership:
    """The principal's live membership; a non-member learns nothing of the Group."""
    member = (Membership.objects.filter(group_id=group_id, principal=principal.id, active=True)
              .only("roles", "epoch").first())
    if member is None:
        raise ProtocolError("NOT_A_MEMBER", "you are not a member of this Group")
    return member


def check_membership_epoch(member: Membership, epoch) -> None:
    if epoch != member.epoch:
        raise ProtocolError("STALE_MEMBERSHIP",
                            f"membershipEpoch must be the current {member.epoch}",
                            {"membershipEpoch": member.epoch})
