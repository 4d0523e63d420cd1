"""Context Packages (§13.3): signed, versioned, scoped summaries, never a replacement
for history. Pure checks of a new version against the Group's state.

Versions of one package id count 1, 2, 3...; a new version names the latest one as
`previousVersion`, and its event records that version's content hash, so the chain of
versions is provenance-bearing. A stale `previousVersion` (another version was
published meanwhile) is REVISION_CONFLICT, like any optimistic concurrency check."""

from collections.abc import Iterable, Mapping

from mission_weave.protocol.errors import ProtocolError

from . import manifests
from .json_types import JsonObject

# §13.3 "Group content MUST NOT enter another Mission's context by default": a package
# scoped to Mission M cites only M's events and artifacts, and besides them only reusable
# artifacts, by the rule Evidence and manifest sources follow (manifests.outside_mission).


def latest(packages: Mapping[tuple[str, str], JsonObject],
           package_id: str) -> JsonObject | None:
    """The latest version of `package_id` among the loaded versions, or None."""
    versions = [record for (pid, _), record in packages.items() if pid == package_id]
    return max(versions, key=lambda record: record["version"], default=None)


def check_version(package: JsonObject, previous: JsonObject | None) -> None:
    version, named = package["version"], package.get("previousVersion")
    if previous is None:
        if version != 1 or named is not None:
            raise ProtocolError("VALIDATION_ERROR",
                                f"Context Package {package['id']} has no version yet: publish "
                                "version 1 without previousVersion",
                                {"path": "body.version", "latestVersion": None})
        return
    if named != previous["version"]:
        raise ProtocolError("REVISION_CONFLICT",
                            f"body.previousVersion must name the latest version "
                            f"{previous['version']} of Context Package {package['id']}",
                            {"path": "body.previousVersion", "latestVersion": previous["version"]})
    if version != previous["version"] + 1:
        raise ProtocolError("VALIDATION_ERROR",
                            f"body.version must be {previous['version'] + 1}",
                            {"path": "body.version", "latestVersion": previous["version"]})
    if package["scope"]["missionId"] != previous["package"]["scope"]["missionId"]:
        raise ProtocolError("VALIDATION_ERROR",
                            "a new version keeps its package's Mission scope "
                            f"{previous['package']['scope']['missionId']}",
                            {"path": "body.scope.missionId"})


def check_source_events(package: JsonObject, head_sequence: int) -> None:
    """The cited range must be events of this Group's log."""
    source = package["sourceEvents"]
    if not 1 <= source["from"] <= source["to"] <= head_sequence:
        raise ProtocolError("VALIDATION_ERROR",
                            f"body.sourceEvents must be a range within 1..{head_sequence}, the "
                            "Group's log", {"path": "body.sourceEvents",
                                            "headSequence": head_sequence})


def check_source_missions(package: JsonObject,
                          source_missions: Iterable[tuple[str, int]]) -> None:
    """Every event of the cited range that names a Mission names the package's.
    `source_missions` is the shell's fact: [(missionId, first sequence in the range)] of
    the events in the range that name a Mission, archive included."""
    mission_id = package["scope"]["missionId"]
    for other, sequence in sorted(source_missions, key=lambda pair: pair[1]):
        if other != mission_id:
            raise ProtocolError("FORBIDDEN",
                                f"body.sourceEvents: event {sequence} belongs to Mission {other}; "
                                f"a package of Mission {mission_id} cites only its own Mission's "
                                "events", {"path": "body.sourceEvents", "sequence": sequence,
                                           "missionId": other})


def check_cited_artifacts(package: JsonObject, artifacts: Mapping[str, JsonObject],
                          group_id: str) -> None:
    """The package cites artifacts of this Group (NOT_FOUND otherwise) of its own Mission
    (published here with that `missionId`) or reusable ones (VALIDATION_ERROR otherwise,
    `details: {path: "body.artifacts[i]", hash}`)."""
    manifests.require_in_mission(artifacts, package["artifacts"], "body.artifacts",
                                 package["scope"]["missionId"], group_id)
