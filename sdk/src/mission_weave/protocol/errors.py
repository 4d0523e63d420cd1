"""PROTOCOL.md's error codes, one exception type, one table mapping codes to HTTP."""

from .json_types import JsonObject

HTTP_STATUS = {
    "VALIDATION_ERROR": 400,
    "INVALID_CONTRACT": 400,
    "UNAUTHENTICATED": 401,
    "INVALID_SIGNATURE": 401,
    "STALE_SESSION": 401,
    "CLOCK_SKEW": 401,
    "NONCE_REUSED": 401,
    "FORBIDDEN": 403,
    "NOT_A_MEMBER": 403,
    "STALE_MEMBERSHIP": 403,
    "NOT_FOUND": 404,
    "TRANSITION_NOT_PERMITTED": 409,
    "REVISION_CONFLICT": 409,
    "STALE_OWNERSHIP": 409,
    "STALE_LEASE": 409,
    "LEASE_EXPIRED": 409,
    "OFFER_NOT_LIVE": 409,
    "CONTRACT_REVISION_MISMATCH": 409,
    "DEPENDENCY_CYCLE": 409,
    "DEPENDENCIES_NOT_MET": 409,
    "EVIDENCE_INCOMPLETE": 409,
    "REVIEW_PENDING": 409,
    "APPROVAL_REQUIRED": 409,
    "BUDGET_EXCEEDED": 409,
    "OUTSIDE_GRACE_WINDOW": 409,
    "OWNER_CHANGED": 409,
    "IDEMPOTENCY_MISMATCH": 409,
    "CURSOR_TOO_OLD": 410,
    "PAYLOAD_TOO_LARGE": 413,
    "HASH_MISMATCH": 422,
    "UNKNOWN_CRITICAL_EXTENSION": 422,
    "RATE_LIMITED": 429,
    "INTERNAL_ERROR": 500,
}


class ProtocolError(Exception):
    """A rejection: a PROTOCOL code, a message a person understands, details."""

    def __init__(self, code: str, message: str, details: JsonObject | None = None,
                 http_status: int | None = None):
        if code not in HTTP_STATUS:
            raise ValueError(f"unknown protocol error code {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details or {}
        # HTTP says more than the code in a few places (405 for a wrong method).
        self.http_status = http_status or HTTP_STATUS[code]

    def as_json(self) -> JsonObject:
        return {"error": {"code": self.code, "message": self.message, "details": self.details}}

    def __repr__(self) -> str:
        return f"ProtocolError({self.code!r}, {self.message!r})"
