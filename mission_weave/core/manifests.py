"""Pure checks of §13 documents beyond their JSON Schema (mission_weave/core/schemas.py:
MANIFEST, CONTEXT_PACKAGE, EVIDENCE): signatures, blobs, the artifacts a document
cites, and which projected objects a command needs loaded. No Django, no clock.

Identity is the content hash: an artifact is found by its hash in its Group, never
by its `uri` (a mutable retrieval hint, §13.1)."""

from dataclasses import dataclass

from mission_weave.protocol.canonical import public_key_from_b64url, verify
from mission_weave.protocol.errors import ProtocolError


def check_signature(document: dict, public_key: str | None, signer: str, what: str) -> None:
    """`document.signature` must verify with an active key of agent `signer`
    (`public_key` is the one its keyId names, looked up by the shell, or None)."""
    key_id = document["signature"]["keyId"]
    if (public_key is None or not key_id.startswith(f"{signer}#")
            or not verify(document, public_key_from_b64url(public_key))):
        raise ProtocolError("INVALID_SIGNATURE",
                            f"the {what}'s signature does not verify with an active key of "
                            f"agent {signer}", {"keyId": key_id, "path": "body.signature"})


def check_blob(manifest: dict, blob: dict | None) -> None:
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


def require_artifacts(artifacts: dict, hashes, path: str) -> None:
    """Every hash must be an artifact of this Group (published or received); another
    Group's artifacts are as unknown here as ones that do not exist."""
    for index, name in enumerate(hashes):
        if name not in artifacts:
            raise ProtocolError("NOT_FOUND", f"{path}[{index}]: no artifact {name} in this Group",
                                {"path": f"{path}[{index}]", "hash": name})


def require_evidence_artifacts(artifacts: dict, evidence: list, path: str = "body.evidence"):
    """§13.2: Evidence references artifacts, and only published ones of this Group."""
    for index, record in enumerate(evidence):
        require_artifacts(artifacts, record.get("artifacts", ()), f"{path}[{index}].artifacts")


def require_cited_evidence(artifacts: dict, body) -> None:
    """The Evidence a command carries (`body.evidence`: a list, or one record) cites
    only artifacts of this Group."""
    evidence = body.get("evidence") if isinstance(body, dict) else None
    if isinstance(evidence, dict):
        require_artifacts(artifacts, evidence.get("artifacts", ()), "body.evidence.artifacts")
    elif isinstance(evidence, list):
        require_evidence_artifacts(artifacts, evidence)


@dataclass(frozen=True)
class Refs:
    """What a command cites, for the shell to load before `decide` (store.load)."""

    missions: frozenset = frozenset()
    items: frozenset = frozenset()
    artifacts: frozenset = frozenset()
    packages: frozenset = frozenset()  # package ids whose latest version is needed


def _strings(values) -> set:
    return {v for v in values if isinstance(v, str)} if isinstance(values, list) else set()


def _string(value) -> set:
    return {value} if isinstance(value, str) else set()


def references(command_type: str, body) -> Refs:
    """The Missions, WorkItems, artifacts and packages a (not yet validated) body names."""
    if not isinstance(body, dict):
        return Refs()
    evidence = body.get("evidence")
    records = evidence if isinstance(evidence, list) else [evidence]
    cited = {h for r in records if isinstance(r, dict) for h in _strings(r.get("artifacts"))}
    if command_type == "artifact.publish":
        return Refs(frozenset(_string(body.get("missionId"))),
                    frozenset(_string(body.get("workItemId"))),
                    frozenset(_string(body.get("hash")) | _strings(body.get("sources"))))
    if command_type == "context.publish":
        scope = body.get("scope") if isinstance(body.get("scope"), dict) else {}
        return Refs(frozenset(_string(scope.get("missionId"))),
                    frozenset(_string(scope.get("workItemId"))),
                    frozenset(_strings(body.get("artifacts"))),
                    frozenset(_string(body.get("id"))))
    if command_type in ("artifact.forward", "artifact.approve_forwarding"):
        return Refs(artifacts=frozenset(_string(body.get("hash"))))
    if command_type == "work.submit":  # its deliverables, besides what its Evidence cites
        cited |= _strings(body.get("artifacts"))
    return Refs(artifacts=frozenset(cited))
