"""The projected state as JSON documents: how the records of state.py are stored in the
projection rows and snapshots, read back from them, and compared with a replay (mw_verify).
A record's document has its field names as keys (snake_case); the offers and the lease in
a WorkItem's are written in the protocol's camelCase."""

from collections.abc import Iterable
from datetime import datetime
from typing import overload

from mission_weave.protocol.timefmt import format_time, parse_time

from .json_types import JsonObject
from .state import Lease, Mission, Offer, Proposal, WorkItem


def _time(moment: datetime | None) -> str | None:
    return format_time(moment) if moment is not None else None


@overload
def _parse(text: str) -> datetime: ...
@overload
def _parse(text: None) -> None: ...
@overload
def _parse(text: str | None) -> datetime | None: ...
def _parse(text: str | None) -> datetime | None:
    return parse_time(text) if text is not None else None


def offer_to_doc(offer: Offer) -> JsonObject:
    return {"agentId": offer.agent_id, "expiresAt": _time(offer.expires_at), "rank": offer.rank,
            "selectionBasis": offer.selection_basis, "status": offer.status,
            "decline": offer.decline}


def lease_to_doc(lease: Lease | None) -> JsonObject | None:
    if lease is None:
        return None
    return {"id": lease.id, "agentId": lease.agent_id, "sessionEpoch": lease.session_epoch,
            "ownershipEpoch": lease.ownership_epoch, "startedAt": _time(lease.started_at),
            "expiresAt": _time(lease.expires_at),
            "renewals": [{"at": _time(at), "expiresAt": _time(until)}
                         for at, until in lease.renewals],
            "closedAt": _time(lease.closed_at), "closeReason": lease.close_reason,
            # §11.5's members only when set, so that older logs replay to the documents
            # (live rows, snapshots) they gave before
            **({"revokedByReconnection": True} if lease.revoked_by_reconnection else {}),
            **({"reconciledThrough": _time(lease.reconciled_through)}
               if lease.reconciled_through else {})}


def lease_from_doc(doc: JsonObject | None) -> Lease | None:
    if doc is None:
        return None
    return Lease(id=doc["id"], agent_id=doc["agentId"], session_epoch=doc["sessionEpoch"],
                 ownership_epoch=doc["ownershipEpoch"], started_at=_parse(doc["startedAt"]),
                 expires_at=_parse(doc["expiresAt"]),
                 renewals=tuple((_parse(r["at"]), _parse(r["expiresAt"])) for r in doc["renewals"]),
                 closed_at=_parse(doc["closedAt"]), close_reason=doc["closeReason"],
                 revoked_by_reconnection=doc.get("revokedByReconnection", False),
                 reconciled_through=_parse(doc.get("reconciledThrough")))


_ITEM_TIMES = ("start_by", "blocked_until", "retry_at", "created_at", "updated_at")
_MISSION_TIMES = ("created_at", "updated_at")


def to_doc(obj: WorkItem | Mission | Proposal, fields: Iterable[str] | None = None) -> JsonObject:
    """A JSON-able document of a WorkItem, Mission or Proposal (snake_case keys); only
    the named `fields` for a partial document (a projection patch)."""
    doc: JsonObject = {}
    for name in obj.__dataclass_fields__ if fields is None else fields:
        value = getattr(obj, name)
        if isinstance(value, datetime):
            value = _time(value)
        elif name == "offers":
            value = [offer_to_doc(o) for o in value]
        elif name == "lease":
            value = lease_to_doc(value)
        elif isinstance(value, tuple):
            value = list(value)
        doc[name] = value
    return doc


def item_from_doc(doc: JsonObject) -> WorkItem:
    values = dict(doc)
    for name in _ITEM_TIMES:
        values[name] = _parse(values[name])
    values["offers"] = tuple(
        Offer(agent_id=o["agentId"], expires_at=_parse(o["expiresAt"]), rank=o["rank"],
              selection_basis=o["selectionBasis"], status=o["status"], decline=o["decline"])
        for o in values["offers"])
    values["lease"] = lease_from_doc(values["lease"])
    values["depends_on"] = tuple(values["depends_on"])
    values["offer_queue"] = tuple(values["offer_queue"])
    values["open_ambiguities"] = tuple(values["open_ambiguities"])
    values["capability_tokens"] = tuple(values.get("capability_tokens", ()))
    return WorkItem(**values)


def mission_from_doc(doc: JsonObject) -> Mission:
    values = dict(doc)
    for name in _MISSION_TIMES:
        values[name] = _parse(values[name])
    values["work_items"] = tuple(values["work_items"])
    values["delegates"] = tuple(values.get("delegates", ()))
    return Mission(**values)


def proposal_from_doc(doc: JsonObject) -> Proposal:
    return Proposal(**{**doc, "created_at": _parse(doc["created_at"])})
