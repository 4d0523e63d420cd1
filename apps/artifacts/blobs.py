"""The blob store (PROTOCOL §5): bytes outside the event log, named by their SHA-256.

An upload is streamed into a temporary file while it is hashed and counted; it is kept
only if the digest equals the name, and nothing is left behind otherwise. Every
retrieval hashes the stored bytes again before any of them is sent: a copy that no
longer matches its name is never served, is logged at ERROR and flagged on its row.

Blobs are content, not facts about a Group, so they do not go through the ledger
pipeline; an artifact that refers to one does (artifact.publish)."""

import hashlib
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from django.conf import settings
from django.db import IntegrityError, transaction

from apps.identity.models import Membership
from mission_weave.protocol.errors import ProtocolError

from . import storage
from .models import Artifact, Blob, BlobUpload

log = logging.getLogger(__name__)

CHUNK = 1024 * 1024
# Blobs up to this size are verified and served from one read; larger ones are read
# twice (verify, then stream) so that memory stays flat in the blob size.
SINGLE_READ_MAX = 4 * CHUNK

_NAME = re.compile(r"sha256:([0-9a-f]{64})")


def parse_name(name: str) -> str:
    """The 64-hex digest of a blob name `sha256:<64 lowercase hex>`; nothing else is
    accepted, so no other client text can reach a storage path."""
    match = _NAME.fullmatch(name)
    if match is None:
        raise ProtocolError("VALIDATION_ERROR",
                            "a blob is named sha256:<64 lowercase hex digits>",
                            {"name": name[:100]})
    return match.group(1)


def check_declared_size(content_length: int | None) -> None:
    """Refuse before reading a byte when the declared size is already over the limit."""
    if content_length is not None and content_length > settings.MW_BLOB_MAX_BYTES:
        raise _too_large()


def _too_large() -> ProtocolError:
    limit = settings.MW_BLOB_MAX_BYTES
    return ProtocolError("PAYLOAD_TOO_LARGE", f"a blob may hold at most {limit} bytes",
                         {"maxBytes": limit})


@dataclass(frozen=True)
class Stored:
    name: str
    size: int
    created: bool  # False: the blob was already there, intact, and was not rewritten

    def as_json(self) -> dict:
        return {"hash": self.name, "size": self.size}


def put(digest: str, chunks: Iterable[bytes], principal: str, now) -> Stored:
    """Store the streamed bytes under `sha256:<digest>` for `principal`, or raise
    HASH_MISMATCH / PAYLOAD_TOO_LARGE having kept nothing."""
    name = f"sha256:{digest}"
    existing = Blob.objects.filter(hash=name, corrupted_at__isnull=True).first()
    if existing is not None:
        # Idempotent: the bytes are hashed (the uploader proves it holds them, which is
        # what earns read access) but the stored copy is not rewritten. "Already there"
        # (200) only to whoever could read it before: to anyone else the answer is a new
        # blob's (201), so holding some content never tells whether it was stored (§5).
        size = _verify_stream(digest, chunks, sink=None)
        readable = can_read(name, principal)
        _record_upload(name, size, principal, now)
        return Stored(name, size, created=not readable)
    incoming = storage.new_incoming()
    try:
        with incoming:
            size = _verify_stream(digest, chunks, sink=incoming)
        storage.keep(digest, incoming.name)
    finally:
        if os.path.exists(incoming.name):
            os.unlink(incoming.name)
    _record_upload(name, size, principal, now)
    return Stored(name, size, created=True)


def _verify_stream(digest: str, chunks: Iterable[bytes], sink) -> int:
    hasher = hashlib.sha256()
    size = 0
    limit = settings.MW_BLOB_MAX_BYTES
    for chunk in chunks:
        size += len(chunk)
        if size > limit:  # a body longer than its Content-Length, or none declared
            raise _too_large()
        hasher.update(chunk)
        if sink is not None:
            sink.write(chunk)
    if hasher.hexdigest() != digest:
        raise ProtocolError("HASH_MISMATCH",
                            "the bytes do not hash to the blob's name; nothing was kept",
                            {"expected": f"sha256:{digest}",
                             "actual": f"sha256:{hasher.hexdigest()}"})
    return size


def _record_upload(name: str, size: int, principal: str, now) -> None:
    """The row (created, or repaired if it was flagged corrupted) and the uploader."""
    with transaction.atomic():
        blob, _ = Blob.objects.select_for_update().get_or_create(
            hash=name, defaults={"size": size, "created_at": now})
        if blob.corrupted_at is not None:
            blob.corrupted_at = None
            blob.save(update_fields=["corrupted_at"])
            log.warning("blob %s was repaired by an upload from %s", name, principal)
        try:
            with transaction.atomic():
                BlobUpload.objects.get_or_create(blob=blob, principal=principal,
                                                 defaults={"uploaded_at": now})
        except IntegrityError:  # the same principal uploading twice at once
            pass


# --- Access --------------------------------------------------------------------------------


def can_read(name: str, principal: str) -> bool:
    """The uploader, or a member of a Group that holds an artifact for the blob
    (published there, or forwarded into it with permission)."""
    if BlobUpload.objects.filter(blob_id=name, principal=principal).exists():
        return True
    groups = Membership.objects.filter(principal=principal, active=True).values("group_id")
    return Artifact.objects.filter(hash=name, group_id__in=groups).exists()


def _refuse_outsider() -> ProtocolError:
    # The same answer whether the blob exists or not: an outsider learns nothing.
    return ProtocolError("NOT_A_MEMBER", "this blob is not readable by you")


# --- Retrieval -----------------------------------------------------------------------------


@dataclass
class Verified:
    name: str
    size: int
    chunks: Iterator[bytes]
    close: Callable[[], None]


def open_verified(digest: str, principal: str, now) -> Verified:
    """The blob's bytes, checked against the name before the first byte is handed out."""
    name = f"sha256:{digest}"
    if not can_read(name, principal):
        raise _refuse_outsider()
    blob = Blob.objects.filter(hash=name).first()
    if blob is None:  # readable through an artifact whose bytes were never uploaded
        raise ProtocolError("NOT_FOUND", "no bytes have been uploaded for this blob")
    if blob.corrupted_at is not None:
        log.error("blob %s is flagged corrupted since %s; refused to %s",
                  name, blob.corrupted_at.isoformat(), principal)
        raise _corrupted(name)
    try:
        handle = storage.blob_storage().open(storage.blob_name(digest), "rb")
    except (FileNotFoundError, OSError) as error:
        report_corrupted(blob, now, f"the stored copy cannot be opened: {error}")
        raise _corrupted(name) from error
    try:
        if blob.size <= SINGLE_READ_MAX:
            data = handle.read(blob.size + 1)
            actual, size = hashlib.sha256(data).hexdigest(), len(data)
            chunks = iter([data])
            handle.close()
        else:
            actual, size = _hash_file(handle)
            handle.seek(0)
            chunks = _read_chunks(handle, size)
    except BaseException:
        handle.close()
        raise
    if actual != digest or size != blob.size:
        handle.close()
        report_corrupted(blob, now, f"sha256:{actual} ({size} bytes) on disk, expected "
                                     f"{name} ({blob.size} bytes)")
        raise _corrupted(name)
    return Verified(name, size, chunks, handle.close)


def _hash_file(handle) -> tuple[str, int]:
    hasher = hashlib.sha256()
    size = 0
    while chunk := handle.read(CHUNK):
        hasher.update(chunk)
        size += len(chunk)
    return hasher.hexdigest(), size


def _read_chunks(handle, size: int) -> Iterator[bytes]:
    # The same open handle that was just verified: a file renamed over it meanwhile
    # does not change what is read. Exactly `size` bytes, whatever is appended later.
    left = size
    try:
        while left > 0 and (chunk := handle.read(min(CHUNK, left))):
            left -= len(chunk)
            yield chunk
    finally:
        handle.close()


def report_corrupted(blob: Blob, now, why: str) -> None:
    """Logged and flagged (by a retrieval or by the review): never served again until an
    upload of the right bytes repairs it."""
    log.error("blob %s is corrupted and will not be served: %s", blob.hash, why)
    Blob.objects.filter(hash=blob.hash, corrupted_at__isnull=True).update(corrupted_at=now)


def _corrupted(name: str) -> ProtocolError:
    # A server fault, not the client's: 500, with the PROTOCOL code that says what failed.
    return ProtocolError("HASH_MISMATCH",
                         "the stored copy of this blob no longer matches its hash; it is "
                         "not served and has been reported (uploading the bytes again "
                         "repairs it)", {"hash": name}, http_status=500)
