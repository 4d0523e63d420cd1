"""Opening an Agent session (PROTOCOL §1): signed, fresh, nonce used once; a new
session supersedes the old one. A session remembers the key that opened it, so that
revoking that key ends it (registry.revoke_key). Revoking the Agent's leases (§11.3) is
the work app's: callers open sessions through apps/work/recovery.py's open_session."""

import secrets
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction

from apps.ledger import db, distribution
from mission_weave.core.jsonschema_check import check, compile_schema
from mission_weave.protocol.errors import ProtocolError
from mission_weave.protocol.timefmt import format_time

from . import principals
from .models import Agent, AgentKey, AgentSession, SessionNonce

SESSION_WRITES = 0x6D73  # the advisory lock key of session openings on Citus ("ms")
OPEN_SESSION = compile_schema({
    "type": "object", "additionalProperties": False,
    "required": ["agentId", "keyId", "nonce", "issuedAt", "signature"],
    "properties": {
        "agentId": {"type": "string", "minLength": 1, "maxLength": 100},
        "keyId": {"type": "string", "minLength": 1, "maxLength": 120},
        "nonce": {"type": "string", "minLength": 8, "maxLength": 200},
        "issuedAt": {"type": "string", "format": "date-time"},
        "signature": {"type": "object"},
    },
})


def open_session(request: dict, now: datetime) -> dict:
    check(OPEN_SESSION, request, "VALIDATION_ERROR", "session request")
    agent_id = request["agentId"]
    if request["signature"].get("keyId") != request["keyId"]:
        raise ProtocolError("INVALID_SIGNATURE", "signature.keyId differs from keyId")
    if not Agent.objects.filter(id=agent_id).exists():
        raise ProtocolError("UNAUTHENTICATED", f"no agent {agent_id} is registered")
    principals.check_signature(request, agent_id)
    principals.check_fresh(request["issuedAt"], now)
    token = secrets.token_urlsafe(32)
    expires_at = now + timedelta(seconds=settings.MW_SESSION_TTL_SECONDS)
    try:
        with transaction.atomic():
            if distribution.on_citus():
                # The agents' tables are reference tables there, whose writes lock their
                # one shard on every node: sessions opened at once deadlocked across the
                # nodes. Taken in turn on the coordinator, they wait instead.
                db.fetch("SELECT pg_advisory_xact_lock(%s, 0)", [SESSION_WRITES])
            SessionNonce.objects.create(agent_id=agent_id, nonce=request["nonce"], used_at=now)
            agent = Agent.objects.select_for_update().get(id=agent_id)
            # Under the agent's lock, which revoke_key takes too: a key revoked since its
            # signature was checked opens nothing (the revocation would miss this session).
            if not AgentKey.objects.filter(key_id=request["keyId"], agent=agent,
                                           active=True).exists():
                raise ProtocolError("INVALID_SIGNATURE", f"key {request['keyId']} was revoked "
                                    "just now", {"keyId": request["keyId"]})
            agent.session_epoch += 1
            agent.save(update_fields=["session_epoch"])
            AgentSession.objects.filter(agent=agent, superseded_at=None).update(superseded_at=now)
            session = AgentSession.objects.create(
                id="ses_" + secrets.token_hex(12), agent=agent, epoch=agent.session_epoch,
                key_id=request["keyId"], token_hash=principals.token_hash(token),
                created_at=now, expires_at=expires_at)
    except IntegrityError:
        raise ProtocolError("NONCE_REUSED",
                            "this nonce was already used to open a session") from None
    return {"sessionId": session.id, "sessionEpoch": session.epoch, "token": token,
            "expiresAt": format_time(expires_at)}
