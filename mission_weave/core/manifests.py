"""Pure checks of §13 documents beyond their JSON Schema (mission_weave/core/schemas.py:
MANIFEST, CONTEXT_PACKAGE, EVIDENCE): signatures, blobs, the artifacts a document
cites, and which projected objects a command needs loaded. No Django, no clock.

Identity is the content hash: an artifact is found by its hash in its Group, never
by its `uri` (a mutable retrieval hint, §13.1)."""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mission_weave.protocol.canonical import public_key_from_b64url, verify
from mission_weave.protocol.errors import ProtocolError

from . import records
from .json_types import JsonObject
from .state import View

if TYPE_CHECKING:  # commands imports this module
    from .commands.base import Command


def check_signature(document: JsonObject, public_key: str | None, signer: str, what: str) -> None:
    """`document.signature` must verify with an active key of agent `signer`
    (`public_key` is the one its keyId names, looked up by the shell, or None)."""
    key_id = document["signature"]["keyId"]
    if (public_key is None or not key_id.startswith(f"{signer}#")
            or not verify(document, public_key_from_b64url(public_key))):
        raise ProtocolError("INVALID_SIGNATURE",
                            f"the {what}'s signature does not verify with an active key of "
                            f"agent {signer}", {"keyId": key_id, "path": "body.signature"})


def check_blob(manifest: JsonObject, blob: JsonObject | None) -> None:
    """The bytes the manifest names must be stored, intact, with the size it states.
    `blob` is {size, corrupted} for a blob the publisher may read, else None: a blob
    someone else uploaded is as unknown as one never uploaded."""
    name = manifest["hash"]
    if blob is None:
        raise ProtocolError("NOT_FOUND", f"no blob {name} was uploaded by the producer or the "
                            f"publisher; PUT /api/v1/blobs/{name} first",
                            {"path": "body.hash", "hash": name})
    if blob["corrupted"]:
        raise ProtocolError("NOT_FOUND", f"blob {name} failed its integrity check; upload it "
                            "again", {"path": "body.hash", "hash": name})
    if blob["size"] != manifest["size"]:
        raise ProtocolError("VALIDATION_ERROR",
                            f"body.size {manifest['size']} differs from the size of blob {name} "
                            f"({blob['size']} bytes)",
                            {"path": "body.size", "blobSize": blob["size"]})


# --- which artifacts the work of one Mission may cite (§13.3) --------------------------------
# "Group content MUST NOT enter another Mission's context by default. Reusable knowledge
# must be explicitly published as an Organization-approved, classified,
# provenance-bearing Artifact." Evidence (work.submit, work.accept_result, work.fail,
# evidence.record), a manifest's `sources` and a Context Package cite the artifacts of
# their own Mission, and besides them only reusable ones.

REUSABLE = "public"  # the manifest classification of an artifact published for reuse


def reusable(record: JsonObject, group_id: str) -> bool:
    """An artifact any Mission of the Group may cite: received by a forwarding that named
    the source Group's recorded approval; or published here as reusable: classified
    `public`, bearing provenance (its manifest names its sources) and approved for this
    Group by a MissionOwner (`artifact.approve_forwarding` with this Group as target)."""
    if record["origin"] == records.RECEIVED:
        approval = (record.get("receivedFrom") or {}).get("approval") or {}
        return "id" in approval  # a forwarding before approvals were recorded names none
    manifest = record["manifest"]
    return (manifest["classification"] == REUSABLE and bool(manifest["sources"])
            and records.approval_for(record, group_id) is not None)


def outside_mission(record: JsonObject, mission_id: str, group_id: str | None = None) -> str | None:
    """Why the work of Mission `mission_id` may not cite this artifact, or None when it
    may: it was published here for that Mission, or it is reusable. `group_id` is this
    Group's id (by default the one the artifact's own manifest names, which
    artifact.publish holds to this Group)."""
    manifest = record["manifest"]
    if record["origin"] == records.PUBLISHED and manifest["missionId"] == mission_id:
        return None
    if reusable(record, group_id or manifest.get("groupId")):
        return None
    if record["origin"] == records.RECEIVED:
        whose = (f"was received from Group {record['receivedFrom']['groupId']} by a "
                 "forwarding that names no recorded approval")
    else:
        whose = f"belongs to Mission {manifest['missionId']}"
    return (f"artifact {record['hash']} {whose}, not to Mission {mission_id}; the work of a "
            "Mission cites its own Mission's artifacts, and besides them only reusable ones "
            f"(classified {REUSABLE}, naming their sources and approved for this Group by a "
            "MissionOwner with artifact.approve_forwarding, or forwarded from another Group "
            "with a recorded approval)")


def require_in_mission(artifacts: Mapping[str, JsonObject], hashes: Iterable[str], path: str,
                       mission_id: str,
                       group_id: str | None = None) -> None:
    """Every hash of the list at `path` is an artifact of this Group that Mission
    `mission_id` may cite (require_citable)."""
    require_citable(artifacts, [(name, f"{path}[{i}]") for i, name in enumerate(hashes)],
                    mission_id, group_id)


def require_citable(artifacts: Mapping[str, JsonObject], cited_at: Sequence[tuple[str, str]],
                    mission_id: str | None,
                    group_id: str | None = None) -> None:
    """Every (hash, path) is an artifact of this Group (NOT_FOUND otherwise) that Mission
    `mission_id` may cite (VALIDATION_ERROR otherwise; not asked without a Mission),
    `details.path` naming the entry."""
    for name, path in cited_at:
        if name not in artifacts:
            raise ProtocolError("NOT_FOUND", f"{path}: no artifact {name} in this Group",
                                {"path": path, "hash": name})
    if mission_id is None:
        return
    for name, path in cited_at:
        why = outside_mission(artifacts[name], mission_id, group_id)
        if why is not None:
            raise ProtocolError("VALIDATION_ERROR", f"{path}: {why}", {"path": path, "hash": name})


def cited(body: object) -> list[tuple[str, str]]:
    """(hash, path) of every artifact a command body cites besides a §13 document's own
    members: its Evidence's (`body.evidence`, a list or one record) and a checkpoint's state
    artifact (`work.checkpoint`, and `work.block`'s checkpoint). Strings only: the body's
    schema has refused anything else by the time it is checked."""
    if not isinstance(body, dict):
        return []
    evidence = body.get("evidence")
    records_at: list[tuple[object, str]]
    if isinstance(evidence, dict):
        records_at = [(evidence, "body.evidence")]
    elif isinstance(evidence, list):
        records_at = [(record, f"body.evidence[{i}]") for i, record in enumerate(evidence)]
    else:
        records_at = []
    found = [(name, f"{path}.artifacts[{j}]") for record, path in records_at
             if isinstance(record, dict) and isinstance(record.get("artifacts"), list)
             for j, name in enumerate(record["artifacts"]) if isinstance(name, str)]
    checkpoint = body.get("checkpoint")
    for holder, path in ((body, "body.stateArtifact"),
                         (checkpoint, "body.checkpoint.stateArtifact")):
        if isinstance(holder, dict) and isinstance(holder.get("stateArtifact"), str):
            found.append((holder["stateArtifact"], path))
    return found


def require_cited(view: View, command: "Command") -> None:
    """§13.2, §13.3: what a command body cites (`cited`) is an artifact of this Group
    that the Mission of the object the command acts on may cite."""
    assert command.target is not None, "decide resolves the target first"
    mission = command.target.mission
    require_citable(view.artifacts, cited(command.body), mission.id if mission else None)


@dataclass(frozen=True)
class Refs:
    """What a command cites, for the shell to load before `decide` (store.load)."""

    missions: frozenset[str] = frozenset()
    items: frozenset[str] = frozenset()
    artifacts: frozenset[str] = frozenset()
    packages: frozenset[str] = frozenset()  # package ids whose latest version is needed


def _strings(values: object) -> set[str]:
    return {v for v in values if isinstance(v, str)} if isinstance(values, list) else set()


def _string(value: object) -> set[str]:
    return {value} if isinstance(value, str) else set()


def references(command_type: str, body: object) -> Refs:
    """The Missions, WorkItems, artifacts and packages a (not yet validated) body names."""
    if not isinstance(body, dict):
        return Refs()
    named = {name for name, _ in cited(body)}
    if command_type == "artifact.publish":
        return Refs(frozenset(_string(body.get("missionId"))),
                    frozenset(_string(body.get("workItemId"))),
                    frozenset(_string(body.get("hash")) | _strings(body.get("sources"))))
    if command_type == "context.publish":
        scope = body.get("scope")
        if not isinstance(scope, dict):
            scope = {}
        return Refs(frozenset(_string(scope.get("missionId"))),
                    frozenset(_string(scope.get("workItemId"))),
                    frozenset(_strings(body.get("artifacts"))),
                    frozenset(_string(body.get("id"))))
    if command_type in ("artifact.forward", "artifact.approve_forwarding"):
        return Refs(artifacts=frozenset(_string(body.get("hash"))))
    if command_type == "work.submit":  # its deliverables, besides what its Evidence cites
        named |= _strings(body.get("artifacts"))
    return Refs(artifacts=frozenset(named))
