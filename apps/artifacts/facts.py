"""The facts outside a Group's log that commands are decided against, looked up by the
shell under the Group lock and handed to the pure `decide` in `Context.facts`: for the
§13 commands the signer's public key, the producer's Agent Card versions, the blob, the
target Group of a forwarding, the Missions of a Context Package's cited events; for
mission.create the roles of the principals it names; for a command buffered offline
(§11.5) the ids of its historical and reconciliation sessions. Other commands get none
and cost no query."""

from apps.identity.models import Agent, AgentKey, AgentSession, Membership
from apps.ledger import db
from apps.ledger.history import ARCHIVE, EVENTS
from mission_weave.core.commands import Command

from .models import Artifact, Blob, BlobUpload


def other_groups(command: Command) -> set:
    """The Groups besides its own whose logs a command may append to (their locks are
    taken with its own, in id order). Only a coordinator's forwarding can: no one else
    makes another Group wait."""
    body = command.body if isinstance(command.body, dict) else {}
    target = body.get("targetGroupId")
    if (command.type == "artifact.forward" and "coordinator" in command.roles
            and isinstance(target, str)):
        return {target}
    return set()


def load(group_id: str, command: Command, head_sequence: int) -> dict:
    body = command.body if isinstance(command.body, dict) else {}
    if command.offline is not None:  # §11.5: the historical and the reconciliation session
        epochs = {command.offline["sessionEpoch"], command.session_epoch}
        return {"sessions": dict(AgentSession.objects.filter(
            agent_id=command.agent_id, epoch__in=epochs).values_list("epoch", "id"))}
    if command.type == "artifact.publish":
        return {"groupId": group_id, **_manifest_facts(command.actor, body)}
    if command.type == "context.publish":
        return {"groupId": group_id, "headSequence": head_sequence,
                "generatorKey": _key(_text(body.get("generator")), body),
                "sourceMissions": _source_missions(group_id, body, head_sequence)}
    if command.type == "artifact.approve_forwarding":
        return {"groupId": group_id}
    if command.type == "artifact.forward":
        target = _text(body.get("targetGroupId"))
        roles = _roles(target, command.actor)
        return {"groupId": group_id, "targetRoles": roles,
                # asked only of a coordinator of the target: it reveals that Group's content
                "targetHasArtifact": roles is not None and _has_artifact(target, body)}
    if command.type == "mission.create":  # those it names must be members with the roles
        delegates = body.get("delegates")
        named = [p for p in (body.get("ownerId"), body.get("coordinatorId"),
                             *(delegates if isinstance(delegates, list) else ()))
                 if isinstance(p, str)]
        members = dict(Membership.objects.filter(group_id=group_id, principal__in=named,
                                                 active=True).values_list("principal", "roles"))
        return {"roles": {p: members.get(p) for p in named}}  # one query for all of them
    return {}


# The Missions the events of a range name, each with its first sequence there: one
# statement over the archive and the online log (apps/ledger/history.py), so that an
# event being archived is seen exactly once.
_MISSIONS = (f"SELECT mission_id, min(sequence) FROM ("
             f"SELECT mission_id, sequence FROM {ARCHIVE} WHERE group_id = %s "
             f"AND sequence BETWEEN %s AND %s AND mission_id IS NOT NULL "
             f"UNION ALL SELECT mission_id, sequence FROM {EVENTS} WHERE group_id = %s "
             f"AND sequence BETWEEN %s AND %s AND mission_id IS NOT NULL) cited "
             f"GROUP BY mission_id ORDER BY 2")


def _source_missions(group_id: str, body: dict, head_sequence: int) -> list:
    """[(missionId, first sequence)] of the events in the package's `sourceEvents` that
    name a Mission; [] for a range the core refuses anyway."""
    source = body.get("sourceEvents")
    if not isinstance(source, dict):
        source = {}
    first, last = source.get("from"), source.get("to")
    if not (isinstance(first, int) and isinstance(last, int)
            and 1 <= first <= last <= head_sequence):
        return []
    params = [group_id, first, last]
    return [(mission_id, sequence) for mission_id, sequence in db.fetch(_MISSIONS,
                                                                        params + params)]


def _text(value) -> str:
    return value if isinstance(value, str) else ""


def _key(agent_id: str, document: dict) -> str | None:
    signature = document.get("signature")
    key_id = signature.get("keyId") if isinstance(signature, dict) else None
    if not agent_id or not isinstance(key_id, str):
        return None
    return AgentKey.objects.filter(key_id=key_id, agent_id=agent_id, active=True) \
        .values_list("public_key", flat=True).first()


# The producer's active key, its Agent Card's versions (the current one and those it had
# before), and the blob if the publisher or the producer uploaded it (a manifest must not
# open someone else's bytes to this Group's members): one statement, since
# artifact.publish is on every lifecycle's path.
_MANIFEST = (f"SELECT (SELECT public_key FROM {AgentKey._meta.db_table} WHERE key_id = %s "
             f"AND agent_id = %s AND active), b.size, b.corrupted_at IS NOT NULL, "
             f"a.card, a.card_versions "
             f"FROM (SELECT 1) one LEFT JOIN {Blob._meta.db_table} b ON b.hash = %s "
             f"AND EXISTS (SELECT 1 FROM {BlobUpload._meta.db_table} u "
             f"WHERE u.blob_id = b.hash AND u.principal = ANY(%s)) "
             f"LEFT JOIN {Agent._meta.db_table} a ON a.id = %s")


def _manifest_facts(actor: str, manifest: dict) -> dict:
    producer, name = _text(manifest.get("producer")), _text(manifest.get("hash"))
    signature = manifest.get("signature")
    key_id = _text(signature.get("keyId")) if isinstance(signature, dict) else ""
    [(key, size, corrupted, card, earlier)] = db.fetch(
        _MANIFEST, [key_id, producer, name, sorted({actor, f"agent:{producer}"}), producer])
    current, earlier = (db.from_json(card) or {}).get("version"), db.from_json(earlier) or []
    versions = [v for v in earlier if v != current] + ([current] if current else [])
    return {"producerKey": key, "producerCardVersions": versions,
            "blob": None if size is None else {"size": size, "corrupted": corrupted}}


def _roles(group_id: str, principal: str) -> list | None:
    if not group_id or not principal:
        return None
    return Membership.objects.filter(group_id=group_id, principal=principal, active=True) \
        .values_list("roles", flat=True).first()


def _has_artifact(group_id: str, body: dict) -> bool:
    return Artifact.objects.filter(group_id=group_id, hash=_text(body.get("hash"))).exists()
