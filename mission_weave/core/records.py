"""How the §13 events change a Group's projected state: `evolve`'s mutators for
them (mission_weave/core/evolve.py lists them in MUTATORS). Pure: plain JSON documents and the
event's own time. A record is replaced, never changed in place, so that
store.changes writes exactly the records that are not the same object as before.

view.artifacts: content hash -> {hash, origin, manifest, by, at, receivedFrom, forwardedTo,
                                 forwardingApprovals (only once there is one)}
view.packages:  (package id, version) -> {id, version, hash, previousHash, package,
                                         publisher, at}
"""

from collections.abc import Callable

from mission_weave.protocol.timefmt import format_time

from .json_types import JsonObject
from .state import Event, View

PUBLISHED, RECEIVED = "published", "received"


def artifact_record(manifest: JsonObject, origin: str, by: str, at: str,
                    received_from: JsonObject | None = None) -> JsonObject:
    return {"hash": manifest["hash"], "origin": origin, "manifest": manifest, "by": by,
            "at": at, "receivedFrom": received_from, "forwardedTo": []}


def _published(view: View, event: Event, data: JsonObject) -> None:
    manifest = data["manifest"]
    view.artifacts[manifest["hash"]] = artifact_record(
        manifest, PUBLISHED, data["by"], format_time(event.occurred_at))


def approvals(record: JsonObject) -> list[JsonObject]:
    """The Organization's recorded approvals of the artifact, oldest first:
    [{id, targetGroupId, by, at, comment}]. A record written before the first approval
    has no `forwardingApprovals` member, so that older rows still equal their replay."""
    recorded: list[JsonObject] = record.get("forwardingApprovals", [])
    return recorded


def approval_for(record: JsonObject, group_id: str) -> JsonObject | None:
    """The recorded approval to forward the artifact to `group_id` (or, for the
    artifact's own Group, to reuse it in that Group's other Missions), or None."""
    return next((a for a in approvals(record) if a["targetGroupId"] == group_id), None)


def _forwarding_approved(view: View, event: Event, data: JsonObject) -> None:
    record = view.artifacts[data["hash"]]
    entry = {"id": data["approvalId"], "targetGroupId": data["targetGroupId"], "by": data["by"],
             "at": format_time(event.occurred_at), "comment": data.get("comment")}
    view.artifacts[data["hash"]] = {**record, "forwardingApprovals": [*approvals(record), entry]}


def _forwarded(view: View, event: Event, data: JsonObject) -> None:
    record = view.artifacts[data["hash"]]
    entry = {"groupId": data["targetGroupId"], "approval": data["approval"], "by": data["by"],
             "at": format_time(event.occurred_at)}
    view.artifacts[data["hash"]] = {**record, "forwardedTo": record["forwardedTo"] + [entry]}


def _received(view: View, event: Event, data: JsonObject) -> None:
    view.artifacts[data["hash"]] = artifact_record(
        data["manifest"], RECEIVED, data["by"], format_time(event.occurred_at),
        {"groupId": data["sourceGroupId"], "approval": data["approval"]})


def _package_published(view: View, event: Event, data: JsonObject) -> None:
    package = data["package"]
    view.packages[(package["id"], package["version"])] = {
        "id": package["id"], "version": package["version"], "hash": data["hash"],
        "previousHash": data["previousHash"], "package": package, "publisher": data["by"],
        "at": format_time(event.occurred_at)}


MUTATORS: dict[str, Callable[[View, Event, JsonObject], None]] = {
    "artifact.published": _published,
    "artifact.forwarding_approved": _forwarding_approved,
    "artifact.forwarded": _forwarded,
    "artifact.received": _received,
    "context.package_published": _package_published,
}
