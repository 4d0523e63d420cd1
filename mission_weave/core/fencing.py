"""Ownership and lease fencing (§11.3, §11.5). Pure: `now` is always an argument."""

from datetime import datetime

from mission_weave.protocol.errors import ProtocolError
from mission_weave.protocol.timefmt import format_time

from .state import ACTIVE, BLOCKED, QUEUED, WorkItem


def owner_is_live(item: WorkItem, now: datetime) -> bool:
    """Whether the WorkItem's ownership still holds at `now`."""
    if item.owner is None:
        return False
    if item.state == QUEUED:
        return item.start_by is not None and now < item.start_by
    if item.state == ACTIVE:
        lease = item.live_lease
        return lease is not None and now < lease.expires_at
    if item.state == BLOCKED:
        return item.blocked_until is not None and now < item.blocked_until
    return False


def check_ownership(item: WorkItem, agent_id: str | None, ownership_epoch: int | None,
                    now: datetime) -> None:
    """The actor must be the live owner at the current Ownership Epoch."""
    if item.owner != agent_id:
        raise ProtocolError("STALE_OWNERSHIP", f"agent {agent_id} does not own WorkItem {item.id}",
                            {"ownershipEpoch": item.ownership_epoch})
    if ownership_epoch != item.ownership_epoch:
        raise ProtocolError(
            "STALE_OWNERSHIP",
            f"ownershipEpoch {ownership_epoch} is not the current epoch {item.ownership_epoch}",
            {"ownershipEpoch": item.ownership_epoch})
    if not owner_is_live(item, now):
        raise ProtocolError("STALE_OWNERSHIP",
                            f"ownership of WorkItem {item.id} expired; it must be offered again",
                            {"ownershipEpoch": item.ownership_epoch})


def check_lease(item: WorkItem, agent_id: str | None, lease_id: str | None,
                ownership_epoch: int | None, session_epoch: int | None, now: datetime) -> None:
    """A lease-carrying command must name the current, open, unexpired Lease ID of its
    own session; an older Lease ID is refused even when the Ownership Epoch is unchanged."""
    if ownership_epoch != item.ownership_epoch:
        raise ProtocolError(
            "STALE_OWNERSHIP",
            f"ownershipEpoch {ownership_epoch} is not the current epoch {item.ownership_epoch}",
            {"ownershipEpoch": item.ownership_epoch})
    lease = item.lease
    if lease is None or lease.id != lease_id or lease.agent_id != agent_id:
        raise ProtocolError("STALE_LEASE",
                            f"lease {lease_id} is not the current Execution Lease of {item.id}")
    if not lease.is_open:
        code = "LEASE_EXPIRED" if lease.close_reason == "expired" else "STALE_LEASE"
        raise ProtocolError(code, f"lease {lease_id} was {lease.close_reason}",
                            {"closeReason": lease.close_reason})
    if now >= lease.expires_at:
        raise ProtocolError("LEASE_EXPIRED", f"lease {lease_id} expired; renew before expiry",
                            {"expiredAt": format_time(lease.expires_at)})
    if lease.session_epoch != session_epoch:
        raise ProtocolError(
            "STALE_LEASE",
            f"lease {lease_id} is bound to session epoch {lease.session_epoch}, "
            f"not {session_epoch}")
