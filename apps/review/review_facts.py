"""What the review needs to know about a submission's artifacts (checks.ArtifactFacts),
found out by the shell, outside any Group lock: whether each blob is stored, whether its
bytes still hash to its name, its size, its JSON content where a schema or check needs
it, and the media type and sources of its published manifest in the Group.

A stored copy that no longer matches its name is reported the way the blob store does
(logged, flagged corrupted: apps/artifacts/blobs.py) and never read as content."""

import hashlib

from django.conf import settings

from apps.artifacts import storage
from apps.artifacts.blobs import CHUNK, report_corrupted
from apps.artifacts.models import Artifact, Blob
from mission_weave.core import evidence_review
from mission_weave.core.checks import ArtifactFacts


def gather(group_id: str, hashes: list, read_content: set, verify: bool, now) -> dict:
    """hash -> ArtifactFacts. With `verify`, every stored blob is hashed again; content is
    read (and so hashed) only for `read_content`, up to MW_REVIEW_MAX_JSON_BYTES (the
    content is held in memory)."""
    blobs = {b.hash: b for b in Blob.objects.filter(hash__in=hashes)}
    manifests = {a.hash: a.doc.get("manifest", a.doc)
                 for a in Artifact.objects.filter(group_id=group_id, hash__in=hashes)}
    sources = {s for m in manifests.values() for s in m.get("sources", [])}
    stored_sources = set(Blob.objects.filter(hash__in=sources, corrupted_at__isnull=True)
                         .values_list("hash", flat=True))
    facts = {}
    for name in hashes:
        manifest = manifests.get(name)
        known = {}
        if manifest is not None:
            listed = tuple(manifest.get("sources", []))
            known = {"media_type": manifest.get("mediaType"), "sources": listed,
                     "missing_sources": tuple(s for s in listed if s not in stored_sources)}
        blob = blobs.get(name)
        if blob is None:
            facts[name] = ArtifactFacts(name, present=False, **known)
            continue
        facts[name] = ArtifactFacts(name, present=True, size=blob.size, **known,
                                    **_inspect(blob, name in read_content, verify, now))
    return facts


def _inspect(blob: Blob, wants_content: bool, verify: bool, now) -> dict:
    """{intact, content, content_problem} of one stored blob."""
    if blob.corrupted_at is not None:
        return {"intact": False, "content_problem": "the stored copy is flagged corrupted"}
    limit = settings.MW_REVIEW_MAX_JSON_BYTES
    keep = wants_content and blob.size <= limit
    if not (verify or keep):
        problem = f"over {limit} bytes: not read as JSON" if wants_content else None
        return {"intact": None, "content_problem": problem}
    digest = blob.hash.split(":", 1)[1]
    try:
        actual, size, data = _read(digest, limit if keep else 0)
    except OSError as error:
        report_corrupted(blob, now, f"found by the review: the stored copy cannot be "
                                    f"opened: {error}")
        return {"intact": False, "content_problem": "the stored copy cannot be read"}
    if actual != digest or size != blob.size:
        report_corrupted(blob, now, f"found by the review: sha256:{actual} ({size} bytes) "
                                    "on disk")
        return {"intact": False, "content_problem": "the stored bytes do not match the hash"}
    if not keep or data is None:  # data is None only past `keep`, a size mismatch above
        problem = f"over {limit} bytes: not read as JSON" if wants_content else None
        return {"intact": True, "content_problem": problem}
    content, problem = evidence_review.parse_content(data)
    return {"intact": True, "content": content, "content_problem": problem}


def _read(digest: str, keep: int) -> tuple[str, int, bytes | None]:
    """(sha256 hex, size, the bytes if there are at most `keep` of them), streamed: a copy
    grown on disk past `keep` is hashed, never held."""
    hasher, size, parts = hashlib.sha256(), 0, []
    with storage.blob_storage().open(storage.blob_name(digest), "rb") as handle:
        while chunk := handle.read(CHUNK):
            hasher.update(chunk)
            size += len(chunk)
            if size <= keep:
                parts.append(chunk)
    return hasher.hexdigest(), size, b"".join(parts) if size <= keep else None
