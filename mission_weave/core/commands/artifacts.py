"""§13 commands: publishing an artifact's manifest, publishing a Context Package, the
Organization's approval of an artifact's forwarding (or reuse), and forwarding an
artifact to another Group. Pure: the facts outside the Group's log
(signing keys, the producer's Agent Card versions, blobs, the target Group) come in
`context.facts` (apps/artifacts/facts.py).

Who publishes a manifest: the lease holder of the WorkItem it names, naming the
current leaseId like every lease command, for a manifest it produced and signed
itself; or the Mission's Coordinator (or a delegate), who may also relay a manifest
another agent produced and signed (the producer's signature, not the sender, is what
vouches for it) and may publish a Mission-level artifact (`workItemId: null`, e.g. an
input). A coordinator of another Mission is neither (authority.py)."""

from collections.abc import Sequence
from datetime import datetime

from mission_weave.core import manifests, packages, records
from mission_weave.protocol.canonical import content_hash
from mission_weave.protocol.errors import ProtocolError

from ..json_types import JsonObject
from ..state import View
from .authority import coordinators
from .base import Command, Context, Draft, derive_id, mission_of, require_lease

# Classifications that may cross into another Group with an approval; `restricted`
# content never leaves its Group.
FORWARDABLE = frozenset({"public", "internal", "confidential"})


def artifact_publish(view: View, command: Command, context: Context) -> list[Draft]:
    manifest, facts = command.body, context.facts
    if manifest["groupId"] != facts["groupId"]:
        raise ProtocolError("VALIDATION_ERROR", "body.groupId must be this Group's id",
                            {"path": "body.groupId"})
    mission = mission_of(view, manifest["missionId"])
    # The Mission's Coordinator (or a delegate) relays; anyone else publishes under a lease.
    coordinator = command.actor in coordinators(mission)
    _check_publisher(view, command, manifest, mission.id, coordinator, context.now)
    manifests.check_signature(manifest, facts.get("producerKey"), manifest["producer"],
                              "manifest")
    _check_card_version(manifest, facts.get("producerCardVersions") or ())
    if manifest["hash"] in view.artifacts:
        raise ProtocolError("VALIDATION_ERROR",
                            f"artifact {manifest['hash']} is already in this Group; an "
                            "artifact is its content and is published once",
                            {"path": "body.hash", "hash": manifest["hash"]})
    manifests.check_blob(manifest, facts.get("blob"))
    if manifest["hash"] in manifest["sources"]:
        raise ProtocolError("VALIDATION_ERROR", "an artifact cannot be its own source",
                            {"path": "body.sources"})
    # §13.3: derived from its own Mission's artifacts, or from reusable ones
    manifests.require_in_mission(view.artifacts, manifest["sources"], "body.sources",
                                 mission.id, facts["groupId"])
    return [Draft("artifact.published", {"manifest": manifest, "by": command.actor},
                  mission.id, manifest["workItemId"])]


def _check_card_version(manifest: JsonObject, known: Sequence[str]) -> None:
    """§13.1: the manifest names the producer's Agent Card version it was made under:
    the producer's current card or one it had before (`known`, every version the
    registry recorded for the producer, apps/identity)."""
    version = manifest["agentCardVersion"]
    if version not in known:
        listed = ", ".join(known) or "none"
        raise ProtocolError("VALIDATION_ERROR",
                            f"body.agentCardVersion {version!r} is not a version of agent "
                            f"{manifest['producer']}'s Agent Card (its recorded versions: "
                            f"{listed}); name the card version the artifact was produced under",
                            {"path": "body.agentCardVersion", "knownVersions": list(known)})


def _check_publisher(view: View, command: Command, manifest: JsonObject, mission_id: str,
                     coordinator: bool, now: datetime) -> None:
    item_id = manifest["workItemId"]
    if item_id != command.work_item_id:
        raise ProtocolError("VALIDATION_ERROR",
                            "body.workItemId must equal the command's workItemId",
                            {"path": "body.workItemId"})
    if item_id is None:
        if not coordinator:
            raise ProtocolError("FORBIDDEN", "a worker publishes under the Execution Lease of "
                                "the WorkItem the manifest names")
        return
    item = view.items.get(item_id)
    if item is None:
        raise ProtocolError("NOT_FOUND", f"no WorkItem {item_id} in this Group")
    if item.mission_id != mission_id:
        raise ProtocolError("VALIDATION_ERROR",
                            f"WorkItem {item_id} belongs to Mission {item.mission_id}",
                            {"path": "body.missionId"})
    if coordinator:
        return
    require_lease(item, command, now)
    if manifest["producer"] != command.agent_id:
        raise ProtocolError("FORBIDDEN", f"a lease holder publishes its own manifests: "
                            f"body.producer must be {command.agent_id}",
                            {"path": "body.producer"})


def context_publish(view: View, command: Command, context: Context) -> list[Draft]:
    package, facts = command.body, context.facts
    if command.agent_id is None or package["generator"] != command.agent_id:
        raise ProtocolError("FORBIDDEN", "a Context Package is published by the Agent that "
                            "generated and signed it: body.generator must be the actor",
                            {"path": "body.generator"})
    manifests.check_signature(package, facts.get("generatorKey"), package["generator"],
                              "Context Package")
    scope = package["scope"]
    mission = mission_of(view, scope["missionId"])
    item_id = scope.get("workItemId")
    if item_id is not None:
        item = view.items.get(item_id)
        if item is None or item.mission_id != mission.id:
            raise ProtocolError("NOT_FOUND",
                                f"no WorkItem {item_id} in Mission {mission.id} of this Group",
                                {"path": "body.scope.workItemId"})
    packages.check_source_events(package, facts["headSequence"])
    # §13.3: Missions are separate contexts, even within the Group
    packages.check_source_missions(package, facts["sourceMissions"])
    packages.check_cited_artifacts(package, view.artifacts, facts["groupId"])
    previous = packages.latest(view.packages, package["id"])
    packages.check_version(package, previous)
    return [Draft("context.package_published", {
        "package": package, "hash": content_hash(package),
        "previousHash": previous["hash"] if previous else None, "by": command.actor},
        mission.id, item_id)]


def artifact_approve_forwarding(view: View, command: Command, context: Context) -> list[Draft]:
    """The Organization's approval (§13.3): a human MissionOwner (role owner) of this
    Group approves forwarding one artifact to one Group, recorded as an event of this
    Group's log and on the artifact's record. Approving this Group itself approves the
    artifact for reuse in this Group's other Missions (packages.check_cited_artifacts)."""
    body, facts = command.body, context.facts
    record = _forwardable(view, body["hash"])
    classification = record["manifest"]["classification"]
    target = body["targetGroupId"]
    given = records.approval_for(record, target)
    if given is not None:
        raise ProtocolError("VALIDATION_ERROR",
                            f"artifact {body['hash']} is already approved for Group {target} "
                            f"(approval {given['id']} by {given['by']})",
                            {"path": "body.targetGroupId", "approvalId": given["id"]})
    if target == facts["groupId"] and classification != manifests.REUSABLE:
        raise ProtocolError("FORBIDDEN", f"only a {manifests.REUSABLE} artifact is approved for "
                            "reuse in this Group's other Missions",
                            {"path": "body.targetGroupId", "classification": classification})
    if target == facts["groupId"] and not record["manifest"]["sources"]:
        raise ProtocolError("FORBIDDEN", "an artifact reused beyond its Mission must bear its "
                            "provenance: its manifest names no sources",
                            {"path": "body.hash", "hash": body["hash"]})
    return [Draft("artifact.forwarding_approved", {
        "hash": body["hash"], "targetGroupId": target,
        "approvalId": derive_id("fwa", command.id), "by": command.actor,
        "comment": body.get("comment")})]


def _forwardable(view: View, name: str) -> JsonObject:
    """The record of artifact `name` of this Group, which may be approved for and
    forwarded beyond its Mission: NOT_FOUND or FORBIDDEN (restricted) otherwise."""
    record = view.artifacts.get(name)
    if record is None:
        raise ProtocolError("NOT_FOUND", f"no artifact {name} in this Group",
                            {"path": "body.hash"})
    classification = record["manifest"]["classification"]
    if classification not in FORWARDABLE:
        raise ProtocolError("FORBIDDEN", f"a {classification} artifact never leaves its Group "
                            "nor its Mission", {"classification": classification})
    return record


def artifact_forward(view: View, command: Command, context: Context) -> list[Draft]:
    """Reusable knowledge crosses into another Group only as an explicitly forwarded,
    approved, classified, provenance-bearing artifact: `artifact.forwarded` here and
    `artifact.received` there, in one transaction under both Groups' locks. The approval
    is the recorded `artifact.forwarding_approved` for this artifact and target."""
    body, facts = command.body, context.facts
    target = body["targetGroupId"]
    if target == facts["groupId"]:
        raise ProtocolError("VALIDATION_ERROR", "body.targetGroupId must be another Group",
                            {"path": "body.targetGroupId"})
    record = _forwardable(view, body["hash"])
    approval = records.approval_for(record, target)
    if approval is None:
        raise ProtocolError("FORBIDDEN",
                            f"artifact {body['hash']} has no recorded Organization approval to "
                            f"be forwarded to Group {target}: a MissionOwner (role owner) of "
                            "this Group gives it with artifact.approve_forwarding first",
                            {"path": "body.targetGroupId",
                             "missing": "artifact.forwarding_approved",
                             "hash": body["hash"], "targetGroupId": target})
    roles = facts["targetRoles"]
    if roles is None:
        raise ProtocolError("NOT_A_MEMBER", "you are not a member of the target Group",
                            {"path": "body.targetGroupId"})
    if "coordinator" not in roles:
        raise ProtocolError("FORBIDDEN", "forwarding needs the coordinator role in the "
                            "target Group too", {"path": "body.targetGroupId"})
    if facts["targetHasArtifact"]:
        raise ProtocolError("VALIDATION_ERROR",
                            f"the target Group already has artifact {body['hash']}",
                            {"path": "body.hash"})
    named = {"id": approval["id"], "approvedBy": approval["by"], "approvedAt": approval["at"]}
    common = {"hash": body["hash"], "approval": named, "by": command.actor}
    return [Draft("artifact.forwarded", {**common, "targetGroupId": target}),
            Draft("artifact.received", {**common, "manifest": record["manifest"],
                                        "sourceGroupId": facts["groupId"]}, group_id=target)]
