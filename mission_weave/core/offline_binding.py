"""Bounded offline execution (§11.5): the checks a command buffered while the Group service
was unreachable must pass before it is reconciled. Pure: `now` is an argument.

The command arrives rebased onto the Agent's current session (its envelope's `issuedAt`,
`sessionEpoch`, `membershipEpoch` and signature are new) and carries the binding with the
historical values unchanged. The binding is a claim: every time it is checked against is
the server's own record of the lease, never the binding's.
"""

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from mission_weave.core import jsonschema_check
from mission_weave.protocol.errors import ProtocolError
from mission_weave.protocol.timefmt import format_time, parse_time

from .json_types import JsonObject
from .schemas import SIX_DIMENSIONS
from .state import (
    ACTIVE,
    CANCELLED,
    FAILED,
    MISSION_ACTIVE,
    QUEUED,
    VERIFIED,
    Lease,
    Mission,
    WorkItem,
)

if TYPE_CHECKING:  # commands imports this module
    from .commands.base import Command

URN = "urn:missionweaveprotocol:extension:bounded-offline-execution"
# What may be buffered: reports of work already under way. Nothing that starts work,
# submits it or has an effect outside (§11.5: "reconcile on reconnect before submission").
BUFFERABLE = frozenset({"work.progress", "work.checkpoint", "work.block", "conversation.post"})

_TIME = {"type": "string", "format": "date-time"}
_ID = {"type": "string", "minLength": 1, "maxLength": 100}
_EPOCH = {"type": "integer", "minimum": 0}
BINDING = jsonschema_check.compile_schema({
    "type": "object", "additionalProperties": False,
    "required": ["critical", "agentId", "groupId", "workItemId", "sessionEpoch",
                 "ownershipEpoch", "leaseId", "disconnectedAt", "bufferedAt", "graceDeadline",
                 "leaseExpiresAt", "usage"],
    "properties": {
        "critical": {"const": True}, "agentId": _ID, "groupId": _ID, "workItemId": _ID,
        "sessionEpoch": {"type": "integer", "minimum": 1}, "ownershipEpoch": _EPOCH,
        "leaseId": _ID, "disconnectedAt": _TIME, "bufferedAt": _TIME, "graceDeadline": _TIME,
        "leaseExpiresAt": _TIME, "usage": SIX_DIMENSIONS}})


def check_binding(binding: JsonObject, command_type: str, group_id: str) -> None:
    """What the envelope alone shows: the binding's shape, a command type that may be
    buffered, this Group. VALIDATION_ERROR otherwise."""
    if command_type not in BUFFERABLE:
        raise ProtocolError("VALIDATION_ERROR", f"{command_type} cannot be buffered offline: "
                            f"only {', '.join(sorted(BUFFERABLE))} may carry {URN}",
                            {"path": f"extensions.{URN}", "bufferable": sorted(BUFFERABLE)})
    jsonschema_check.check(BINDING, binding, "VALIDATION_ERROR",
                           "the bounded-offline-execution binding", prefix=f"extensions.{URN}")
    if binding["groupId"] != group_id:
        raise _invalid("groupId", f"names Group {binding['groupId']}, not this one")
    if parse_time(binding["disconnectedAt"]) > parse_time(binding["bufferedAt"]):
        raise _invalid("bufferedAt", "is before disconnectedAt")


def check(mission: Mission, item: WorkItem, command: "Command", now: datetime,
          grace_seconds: int) -> Lease:
    """The historical lease the buffered `command` (its `offline` member the binding) is
    reconciled against, or the ProtocolError that refuses it."""
    binding = command.offline
    assert binding is not None, "a buffered command carries its binding"
    _check_names(item, command)
    if item.state in (VERIFIED, FAILED, CANCELLED) or mission.state != MISSION_ACTIVE:
        ended = item.state if item.state in (VERIFIED, FAILED, CANCELLED) else mission.state
        what = f"WorkItem {item.id}" if ended == item.state else f"its Mission {mission.id}"
        raise ProtocolError("TRANSITION_NOT_PERMITTED",
                            f"{what} is {ended}: work buffered offline for it cannot be "
                            "reconciled", {"state": item.state, "missionState": mission.state})
    if item.owner != command.agent_id or item.ownership_epoch != binding["ownershipEpoch"]:
        raise ProtocolError("OWNER_CHANGED",
                            f"WorkItem {item.id} has moved on from agent {command.agent_id} at "
                            f"ownership epoch {binding['ownershipEpoch']}",
                            {"ownershipEpoch": item.ownership_epoch})
    lease = _historical_lease(item, binding)
    buffered_at = parse_time(binding["bufferedAt"])
    _check_window(lease, binding, buffered_at, now, grace_seconds)
    if lease.closed_at is not None and not lease.revoked_by_reconnection \
            and lease.closed_at <= buffered_at:
        raise ProtocolError("STALE_LEASE", f"lease {lease.id} was {lease.close_reason} at "
                            f"{format_time(lease.closed_at)}, before the command was buffered",
                            {"closeReason": lease.close_reason,
                             "closedAt": format_time(lease.closed_at)})
    if lease.reconciled_through is not None and buffered_at < lease.reconciled_through:
        raise ProtocolError("STALE_LEASE", f"a command buffered later under lease {lease.id} "
                            "was reconciled already: buffered commands go in bufferedAt order",
                            {"reconciledThrough": format_time(lease.reconciled_through)})
    _check_table(item, lease)
    return lease


def _check_table(item: WorkItem, lease: Lease) -> None:
    """§10.2 holds for buffered work too: it lands only on the work it reports on, still
    `active` under that lease, or `queued` because the Agent's own reconnection revoked
    the lease (§11.3). An item submitted, blocked or checkpointed since is not taken back."""
    if item.state == ACTIVE or (item.state == QUEUED and lease.revoked_by_reconnection):
        return
    raise ProtocolError(
        "TRANSITION_NOT_PERMITTED",
        f"WorkItem {item.id} is {item.state}: work buffered offline is reconciled only into "
        f"an active WorkItem, or one that the Agent's reconnection returned to queued",
        {"state": item.state, "leaseId": lease.id})


def window(lease: Lease, grace_seconds: int, now: datetime) -> tuple[datetime, datetime]:
    """(first, last) moment a command may have been buffered under `lease`: from its start
    to its expiry plus the grace period, but never after the reconnection that revoked it
    and never after `now`."""
    last = min(grace_deadline(lease, grace_seconds), now)
    if lease.revoked_by_reconnection:
        assert lease.closed_at is not None, "a revocation closed it"
        last = min(last, lease.closed_at)
    return lease.started_at, last


def grace_deadline(lease: Lease, grace_seconds: int) -> datetime:
    """The server's lease expiry plus grace: the latest `graceDeadline` a binding may give."""
    return lease.expires_at + timedelta(seconds=grace_seconds)


def record(binding: JsonObject, sessions: Mapping[int, str],
           reconciliation_epoch: int | None) -> JsonObject:
    """What the events of a reconciled command say of it: the lease, when it was buffered,
    and the historical and reconciliation sessions (`sessions`: epoch -> session id)."""
    return {"leaseId": binding["leaseId"], "bufferedAt": binding["bufferedAt"],
            "historicalSession": {"sessionId": sessions.get(binding["sessionEpoch"]),
                                  "sessionEpoch": binding["sessionEpoch"]},
            "reconciliationSession": {"sessionId": None if reconciliation_epoch is None
                                      else sessions.get(reconciliation_epoch),
                                      "sessionEpoch": reconciliation_epoch}}


def _check_names(item: WorkItem, command: "Command") -> None:
    """The binding names the sender, the envelope's WorkItem, and the lease and epoch the
    envelope names, if it names them."""
    binding = command.offline
    assert binding is not None, "a buffered command carries its binding"
    if binding["agentId"] != command.agent_id:
        raise _invalid("agentId", f"names agent {binding['agentId']}, not the sender")
    if binding["workItemId"] != item.id:
        raise _invalid("workItemId", f"names WorkItem {binding['workItemId']}, not {item.id}")
    for name, value in (("leaseId", command.lease_id), ("ownershipEpoch", command.ownership_epoch)):
        if value is not None and value != binding[name]:
            raise _invalid(name, f"differs from the envelope's {name} {value}")


def _historical_lease(item: WorkItem, binding: JsonObject) -> Lease:
    """The binding's lease: the item's latest one (the Agent reconciles before it starts
    again, §11.5), whose record must agree with the binding."""
    lease = item.lease
    if lease is None or lease.id != binding["leaseId"]:
        raise ProtocolError("STALE_LEASE", f"lease {binding['leaseId']} is not the latest "
                            f"Execution Lease of {item.id}: reconcile before starting again")
    for name, recorded in (("sessionEpoch", lease.session_epoch),
                           ("ownershipEpoch", lease.ownership_epoch)):
        if binding[name] != recorded:
            raise _invalid(name, f"is {binding[name]}, but lease {lease.id} was issued under "
                           f"{name} {recorded}")
    if lease.agent_id != binding["agentId"]:
        raise _invalid("agentId", f"lease {lease.id} is not this agent's")
    return lease


def _check_window(lease: Lease, binding: JsonObject, buffered_at: datetime, now: datetime,
                  grace_seconds: int) -> None:
    first, last = window(lease, grace_seconds, now)
    deadline = grace_deadline(lease, grace_seconds)
    details = {"bufferedAt": binding["bufferedAt"], "from": format_time(first),
               "until": format_time(last), "graceDeadline": format_time(deadline)}
    if not first <= buffered_at <= last:
        raise ProtocolError("OUTSIDE_GRACE_WINDOW",
                            f"bufferedAt {binding['bufferedAt']} is outside lease {lease.id}'s "
                            f"life and grace ({details['from']} to {details['until']})", details)
    if parse_time(binding["graceDeadline"]) > deadline:
        raise ProtocolError("OUTSIDE_GRACE_WINDOW",
                            f"graceDeadline {binding['graceDeadline']} is later than the "
                            f"lease's expiry plus grace, {details['graceDeadline']}", details)
    if buffered_at > parse_time(binding["graceDeadline"]):
        raise ProtocolError("OUTSIDE_GRACE_WINDOW",
                            f"bufferedAt {binding['bufferedAt']} is after the binding's own "
                            f"graceDeadline {binding['graceDeadline']}", details)


def _invalid(member: str, problem: str) -> ProtocolError:
    path = f"extensions.{URN}.{member}"
    return ProtocolError("VALIDATION_ERROR", f"{path} {problem}", {"path": path})
