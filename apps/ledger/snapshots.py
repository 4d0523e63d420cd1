"""Snapshots (PROTOCOL §4, §7): the projected state of a Group at a sequence, signed by
the authority key, so that an agent whose cursor fell below the online floor can resume
from it. The state is the replay of the log through the same `evolve` mw_verify uses.

The document: {id, groupId, sequence, hash (of the event at `sequence`), state:
{missions, workItems, proposals}, createdAt, signature}; the signature is Ed25519 over
the RFC 8785 form of the document without `signature` (PROTOCOL §1), by the authority's
current key. Its `keyId` names that key, which GET /api/v1/authority keeps listing after
a rotation, so a snapshot stays verifiable for as long as it is stored
(signing_keys.verify)."""

import json
import uuid
from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from mission_weave.protocol.errors import ProtocolError
from mission_weave.protocol.timefmt import format_time

from . import signing_keys, verify
from .models import Group, Snapshot


def url(snapshot: Snapshot) -> str:
    return f"/api/v1/groups/{snapshot.group_id}/snapshots/{snapshot.id}"


def document(snapshot: Snapshot) -> dict:
    return json.loads(snapshot.document)


def reference(snapshot: Snapshot) -> dict:
    """What CURSOR_TOO_OLD carries: `details.snapshot` (PROTOCOL §7)."""
    return {"id": snapshot.id, "groupId": snapshot.group_id, "sequence": snapshot.sequence,
            "hash": snapshot.hash, "url": url(snapshot),
            "signature": document(snapshot)["signature"]}


def cursor_too_old(group_id: str, after: int, floor: int) -> ProtocolError:
    """The error for a replay from below the online floor, pointing at the newest
    snapshot at or above it (archiving always takes one first)."""
    snapshot = Snapshot.objects.filter(group_id=group_id, sequence__gte=floor) \
        .order_by("-sequence").first()
    details = {"snapshot": reference(snapshot)} if snapshot is not None else {}
    return ProtocolError("CURSOR_TOO_OLD", f"events after {after} are no longer in the online "
                         f"log (it starts after {floor}); resume from the snapshot", details)


def take(group_id: str, sequence: int | None = None, now: datetime | None = None) -> Snapshot:
    """The Group's snapshot at `sequence` (default: its head), made and signed now unless
    one exists already. Needs no lock: events up to a committed head never change."""
    group = Group.objects.filter(id=group_id).values("head_sequence").first()
    if group is None:
        raise ProtocolError("NOT_FOUND", f"no Group {group_id}")
    head = group["head_sequence"]
    sequence = head if sequence is None else sequence
    if head == 0:
        raise ProtocolError("VALIDATION_ERROR", f"Group {group_id} has no events to snapshot")
    if not 1 <= sequence <= head:
        raise ProtocolError("VALIDATION_ERROR", f"the sequence must be between 1 and the "
                            f"Group's head {head}")
    existing = Snapshot.objects.filter(group_id=group_id, sequence=sequence).first()
    if existing is not None:
        return existing
    view, problems, last, last_hash = verify.replay_through(group_id, sequence,
                                                            start=_start(group_id, sequence))
    if problems or last != sequence:
        raise RuntimeError(f"Group {group_id} does not replay to {sequence}: "
                           f"{problems[:3] or 'events missing'}; run mw_verify")
    now = now or timezone.now()
    signed = signing_keys.sign({
        "id": f"snap_{uuid.uuid4().hex}", "groupId": group_id, "sequence": sequence,
        "hash": last_hash, "state": verify.state_document(view), "createdAt": format_time(now)})
    try:
        with transaction.atomic():
            return Snapshot.objects.create(
                id=signed["id"], group_id=group_id, sequence=sequence, hash=last_hash,
                document=json.dumps(signed, separators=(",", ":"), ensure_ascii=False),
                created_at=now)
    except IntegrityError:  # another process snapshotted the same sequence just now
        return Snapshot.objects.get(group_id=group_id, sequence=sequence)


def _start(group_id: str, sequence: int):
    """Resume from the newest earlier snapshot rather than replay from the first event:
    the retention job snapshots large Groups again and again."""
    earlier = Snapshot.objects.filter(group_id=group_id, sequence__lt=sequence) \
        .order_by("-sequence").first()
    if earlier is None:
        return None
    return verify.view_of(document(earlier)["state"]), earlier.sequence, earlier.hash
