"""The retention policy (MW_RETENTION_ONLINE_EVENTS): keep at least the newest N events
of each Group in the online log; snapshot and archive the rest. Run by Celery beat every
MW_RETENTION_INTERVAL_SECONDS (apps/ledger/tasks.py). Idempotent and safe to run twice at
once: snapshots are unique per sequence and archiving checks the floor under the lock."""

import logging

from django.conf import settings
from django.db.models import F

from .archive import archive_through
from .models import Group
from .snapshots import take

log = logging.getLogger(__name__)


def archive_point(head: int, floor: int, keep: int) -> int | None:
    """The sequence to snapshot and archive through, or None when the Group is within the
    policy. `keep` <= 0 turns the policy off."""
    if keep <= 0 or head - keep <= floor:
        return None
    return head - keep


def apply(keep: int | None = None) -> dict:
    """Archive every Group over the limit: {groupId: new floor}; failures are logged and
    left for the next run."""
    keep = settings.MW_RETENTION_ONLINE_EVENTS if keep is None else keep
    if keep <= 0:
        return {}
    over = Group.objects.filter(head_sequence__gt=F("online_floor") + keep) \
        .values_list("id", "head_sequence", "online_floor")
    archived = {}
    for group_id, head, floor in over:
        point = archive_point(head, floor, keep)
        if point is None:
            continue
        try:
            archived[group_id] = archive_through(take(group_id, point))
        except Exception:
            log.exception("retention: archiving Group %s failed; retried next run", group_id)
    return archived
