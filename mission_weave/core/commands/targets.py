"""What each command acts on (DESIGN.md "Authority follows the object").

Every command type declares in the command table (__init__.py) the kind of object it
acts on. `resolve` finds that object once, in the view read under the Group lock; the
authority check, the handler and the events all use it. No other field may choose it:
an envelope field that names another object than the body does is VALIDATION_ERROR,
naming both paths, and an object the Group does not have is NOT_FOUND, never a pass.

The kinds, and where the object is named:
- GROUP: nothing yet (mission.create): the envelope names no WorkItem;
- MISSION: `body.missionId`; an envelope `workItemId` must be a WorkItem of it;
- NEW_ITEM: `body.missionId`, the Mission the WorkItem is created in (work.authorize);
  an envelope `workItemId` must be the body's `workItemId`;
- ITEM: the envelope's `workItemId`; a body `workItemId` or `missionId` must agree;
- MANIFEST: an artifact manifest's `body.missionId` and `body.workItemId` (null: a
  Mission-level artifact); the envelope's `workItemId` must be the manifest's;
- PACKAGE: a Context Package's `body.scope.missionId` and `.workItemId`; an envelope
  `workItemId` must be the scope's;
- ARTIFACT: an artifact of this Group, `body.hash`; the envelope names no WorkItem.
Pure."""

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mission_weave.protocol.errors import ProtocolError

from ..json_types import JsonObject
from ..state import Mission, View, WorkItem

if TYPE_CHECKING:  # base imports this module
    from .base import Command

GROUP, MISSION, NEW_ITEM, ITEM = "group", "mission", "new_item", "item"
MANIFEST, PACKAGE, ARTIFACT = "manifest", "package", "artifact"
KINDS = frozenset({GROUP, MISSION, NEW_ITEM, ITEM, MANIFEST, PACKAGE, ARTIFACT})
# Where each kind's object is named, for docs/protocol.md (scripts/render_docs.py).
NAMED_BY = {
    GROUP: "the Group (no `workItemId`)",
    MISSION: "the Mission `body.missionId`",
    NEW_ITEM: "a new WorkItem of the Mission `body.missionId`",
    ITEM: "the WorkItem `workItemId`",
    MANIFEST: "the manifest's `body.missionId` / `body.workItemId`",
    PACKAGE: "the package's `body.scope.missionId` / `.workItemId`",
    ARTIFACT: "the artifact `body.hash` (no `workItemId`)",
}


@dataclass(frozen=True)
class Target:
    """The object a command acts on: its Mission (None for GROUP and ARTIFACT), its
    WorkItem when it acts on one, the artifact's record for ARTIFACT."""

    kind: str
    mission: Mission | None = None
    item: WorkItem | None = None
    artifact: JsonObject | None = None


def resolve(kind: str, view: View, command: "Command") -> Target:
    return _RESOLVERS[kind](view, command, command.body)


def _group(view: View, command: "Command", body: JsonObject) -> Target:
    _no_envelope_item(command, "it creates a Mission")
    return Target(GROUP)


def _mission(view: View, command: "Command", body: JsonObject) -> Target:
    mission = _known_mission(view, body["missionId"], "body.missionId")
    if command.work_item_id is not None and command.work_item_id not in mission.work_items:
        raise _disagree("workItemId", command.work_item_id, "body.missionId", mission.id,
                        f"it names no WorkItem of Mission {mission.id}")
    return Target(MISSION, mission)


def _new_item(view: View, command: "Command", body: JsonObject) -> Target:
    mission = _known_mission(view, body["missionId"], "body.missionId")
    if command.work_item_id is not None and command.work_item_id != body.get("workItemId"):
        raise _disagree("workItemId", command.work_item_id, "body.workItemId",
                        body.get("workItemId"), "the WorkItem created is the body's")
    return Target(NEW_ITEM, mission)


def _item(view: View, command: "Command", body: JsonObject) -> Target:
    if not command.work_item_id:
        raise ProtocolError("VALIDATION_ERROR", f"{command.type} needs workItemId",
                            {"path": "workItemId"})
    item = _known_item(view, command.work_item_id, "workItemId")
    if body.get("workItemId") not in (None, item.id):
        raise _disagree("body.workItemId", body["workItemId"], "workItemId", item.id,
                        "a command acts on one WorkItem")
    if body.get("missionId") not in (None, item.mission_id):
        raise _disagree("body.missionId", body["missionId"], "workItemId", item.id,
                        f"WorkItem {item.id} belongs to Mission {item.mission_id}")
    return Target(ITEM, view.missions[item.mission_id], item)


def _manifest(view: View, command: "Command", body: JsonObject) -> Target:
    # The lease holder names its WorkItem in the envelope, as every lease command does.
    return _scoped(view, command, body, "body", envelope_names_it=True)


def _package(view: View, command: "Command", body: JsonObject) -> Target:
    return _scoped(view, command, body["scope"], "body.scope", envelope_names_it=False)


def _scoped(view: View, command: "Command", scope: JsonObject, path: str,
            envelope_names_it: bool) -> Target:
    """A §13 document's own scope: its Mission and, unless null, its WorkItem. The
    envelope's workItemId is the scope's (or, where it need not name it, absent)."""
    mission = _known_mission(view, scope["missionId"], f"{path}.missionId")
    item_id = scope.get("workItemId")
    if command.work_item_id != item_id and (envelope_names_it
                                            or command.work_item_id is not None):
        raise _disagree(f"{path}.workItemId", item_id, "workItemId", command.work_item_id,
                        "a document is published for the WorkItem it names")
    if item_id is None:
        return Target(MISSION, mission)
    item = _known_item(view, item_id, f"{path}.workItemId")
    if item.mission_id != mission.id:
        raise _disagree(f"{path}.workItemId", item_id, f"{path}.missionId", mission.id,
                        f"WorkItem {item_id} belongs to Mission {item.mission_id}")
    return Target(ITEM, mission, item)


def _artifact(view: View, command: "Command", body: JsonObject) -> Target:
    _no_envelope_item(command, "it acts on an artifact of the Group")
    record = view.artifacts.get(body["hash"])
    if record is None:
        raise ProtocolError("NOT_FOUND", f"no artifact {body['hash']} in this Group",
                            {"path": "body.hash"})
    return Target(ARTIFACT, artifact=record)


_RESOLVERS = {GROUP: _group, MISSION: _mission, NEW_ITEM: _new_item, ITEM: _item,
              MANIFEST: _manifest, PACKAGE: _package, ARTIFACT: _artifact}
assert set(_RESOLVERS) == set(NAMED_BY) == KINDS


def _known_mission(view: View, mission_id: str, path: str) -> Mission:
    mission = view.missions.get(mission_id)
    if mission is None:
        raise ProtocolError("NOT_FOUND", f"no Mission {mission_id} in this Group", {"path": path})
    return mission


def _known_item(view: View, item_id: str, path: str) -> WorkItem:
    item = view.items.get(item_id)
    if item is None:
        raise ProtocolError("NOT_FOUND", f"no WorkItem {item_id} in this Group", {"path": path})
    return item


def _no_envelope_item(command: "Command", why: str) -> None:
    if command.work_item_id is not None:
        raise ProtocolError("VALIDATION_ERROR", f"{command.type} names no WorkItem ({why}): "
                            "leave out the envelope's workItemId", {"path": "workItemId"})


def _disagree(path: str, value: object, other_path: str, other: object,
              why: str) -> ProtocolError:
    """`path` is the field refused (details.path); `paths` names both."""
    return ProtocolError(
        "VALIDATION_ERROR", f"{path} {value} and {other_path} {other} name different "
        f"objects: {why}", {"path": path, "paths": [path, other_path]})
