"""The bearer side of capability tokens (§11.3): the secret string a lease holder hands
to a tool gateway, and its introspection in the spirit of RFC 7662. Shell: reads the
settings, the database and the clock. The rules themselves are in capabilities.py.

    mwcap.<base64url(JSON {g, w, t})>.<base64url(HMAC-SHA256(key, first two parts))>

`g` is the Group, `w` the WorkItem, `t` the token id; the key is derived from
SECRET_KEY. The string is never stored and never in the event log: it is a pure function
of the token's descriptor, so a duplicate answer derives the same string again.
"""

import base64
import hashlib
import hmac
import json
from datetime import datetime

from django.conf import settings

from apps.identity import principals
from apps.identity.principals import Principal
from mission_weave.core import capabilities, state_documents
from mission_weave.protocol.errors import ProtocolError
from mission_weave.protocol.timefmt import parse_time

from . import models

PREFIX = "mwcap"
# Events that issue a token to the lease holder who sent the command.
ISSUING = frozenset({"work.started", "lease.renewed", "capability.rotated",
                     "capability.narrowed"})
INACTIVE = {"active": False}


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _key() -> bytes:
    # A key of its own, so that a capability token can never pass for another signed value.
    return hmac.new(settings.SECRET_KEY.encode(), b"missionweave capability token v1",
                    hashlib.sha256).digest()


def _mac(signed: str) -> str:
    return _b64(hmac.new(_key(), signed.encode(), hashlib.sha256).digest())


def bearer(group_id: str, work_item_id: str, token_id: str) -> str:
    payload = json.dumps({"g": group_id, "w": work_item_id, "t": token_id},
                         separators=(",", ":"), sort_keys=True)
    signed = f"{PREFIX}.{_b64(payload.encode())}"
    return f"{signed}.{_mac(signed)}"


def parse(token) -> tuple[str, str, str] | None:
    """(group, WorkItem, token id) of an authentic token string, or None."""
    if not isinstance(token, str) or token.count(".") != 2 or len(token) > 2000:
        return None
    prefix, payload, mac = token.split(".")
    signed = f"{prefix}.{payload}"
    if prefix != PREFIX or not hmac.compare_digest(mac, _mac(signed)):
        return None
    try:
        claims = json.loads(_unb64(payload))
        ids = (claims["g"], claims["w"], claims["t"])
    except (ValueError, TypeError, KeyError):
        return None
    return ids if all(isinstance(i, str) for i in ids) else None


def with_bearer(group_id: str, body: dict, principal: Principal) -> dict:
    """The command answer with `capabilityToken: {id, token, scopes, expiresAt}` added
    when one of its events issued a token to the caller (the events' actor is the lease
    holder who sent the command); any other answer unchanged."""
    issued = [e for e in body.get("events", ())
              if e["type"] in ISSUING and e["actor"] == principal.id
              and isinstance(e["data"].get("capabilityToken"), dict)]
    if not issued:
        return body
    event = issued[-1]
    token = event["data"]["capabilityToken"]
    return {**body, "capabilityToken": {
        "id": token["id"], "token": bearer(group_id, event["workItemId"], token["id"]),
        "scopes": token["scopes"], "expiresAt": token["expiresAt"]}}


def introspect(token, principal: Principal, now: datetime) -> dict:
    """RFC 7662's answer: `{active: false}` for a malformed, forged, unknown, expired or
    revoked token, and for a caller that is not a member of the token's Group (so that
    the answer reveals nothing of a Group to an outsider)."""
    ids = parse(token)
    if ids is None:
        return INACTIVE
    group_id, work_item_id, token_id = ids
    try:
        principals.membership(group_id, principal)
    except ProtocolError:
        return INACTIVE
    row = models.WorkItem.objects.filter(group_id=group_id, work_item_id=work_item_id).first()
    if row is None:
        return INACTIVE
    item = state_documents.item_from_doc(row.doc)
    descriptor = capabilities.find(item, token_id)
    lease = item.live_lease
    if descriptor is None or lease is None or not capabilities.is_active(item, descriptor, now):
        return INACTIVE
    expires_at = min(parse_time(descriptor["expiresAt"]), lease.expires_at)
    return {"active": True, "scope": capabilities.scope_string(descriptor["scopes"]),
            "scopes": descriptor["scopes"], "groupId": group_id, "workItemId": item.id,
            "missionId": item.mission_id, "leaseId": lease.id,
            "ownershipEpoch": lease.ownership_epoch, "sub": f"agent:{lease.agent_id}",
            "exp": int(expires_at.timestamp()), "tokenId": token_id,
            "token_type": "mwcap"}
