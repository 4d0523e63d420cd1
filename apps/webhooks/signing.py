"""The signature of a webhook delivery, in Stripe's style:

    MissionWeave-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>

The timestamp is signed with the body, so a receiver that refuses old timestamps
refuses a replay; the delivery's id (MissionWeave-Webhook-Id) lets it drop a resend it
already took. After a rotation the header carries one v1 per secret still valid.
docs/operations.md ("Webhooks") shows a receiver's check; `verify` below is the same
check, used by the tests."""

import hashlib
import hmac
import secrets

SIGNATURE = "MissionWeave-Signature"
ID = "MissionWeave-Webhook-Id"
TIMESTAMP = "MissionWeave-Webhook-Timestamp"
TOLERANCE_SECONDS = 300  # what the docs advise a receiver to accept


def new_secret() -> str:
    return "whsec_" + secrets.token_urlsafe(32)


def digest(secret: str, timestamp: int, body: bytes) -> str:
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body,
                    hashlib.sha256).hexdigest()


def header(secrets_: list[str], timestamp: int, body: bytes) -> str:
    return ",".join([f"t={timestamp}", *(f"v1={digest(s, timestamp, body)}"
                                          for s in secrets_)])


def verify(secret: str, header_value: str, body: bytes, now: float,
           tolerance: int = TOLERANCE_SECONDS) -> bool:
    """A receiver's check: a v1 matches, and the timestamp is within `tolerance`."""
    fields = [part.split("=", 1) for part in header_value.split(",") if "=" in part]
    stamps = [v for k, v in fields if k == "t"]
    if len(stamps) != 1 or not stamps[0].isdigit():
        return False
    timestamp = int(stamps[0])
    if abs(now - timestamp) > tolerance:
        return False
    expected = digest(secret, timestamp, body)
    return any(hmac.compare_digest(expected, v) for k, v in fields if k == "v1")
