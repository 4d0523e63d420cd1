"""§16 / §11.4: the stable idempotency key of an external operation.

External tool operations of one attempt must carry a key derived from the Mission ID,
the WorkItem ID, the Ownership Epoch and a logical operation ID, so that a retried or
replayed call is recognised by the tool as the same call. The server and the SDK use
this one function; changing it changes every key already handed out.
"""

import hashlib

_SEPARATOR = "\x1f"  # ASCII unit separator: no id contains it, so fields never run together


def idempotency_key(mission_id: str, work_item_id: str, ownership_epoch: int,
                    operation_id: str) -> str:
    """`idem_` + the first 32 hex digits of SHA-256 over the four fields joined by U+001F."""
    material = _SEPARATOR.join((mission_id, work_item_id, str(ownership_epoch), operation_id))
    return "idem_" + hashlib.sha256(material.encode()).hexdigest()[:32]


def attempt_operation_id(attempt: int) -> str:
    """The logical operation ID of an attempt's execution as a whole (`work.started`'s
    `idempotencyKey`); a worker derives per-call keys with its own operation IDs."""
    return f"attempt-{attempt}"
