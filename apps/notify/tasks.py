"""The notifications' Celery tasks and the hint that starts them.

- `hint(group_id, documents)`, a `committed` subscriber (apps/ledger/ports.py): after a
  commit, off the request's thread (apps/ledger/hints.py), `notice(group_id)` is
  enqueued, once per Group for the hints that arrive together, and only for Groups with
  a human owner or coordinator (nobody else is ever waited on). A hint lost (the
  process died, Redis was away) costs at most one catch_up interval: the log is the
  record, the hint only says "look now".
- `notice(group_id)`: bring the Group's waits up to its log (waits.look) and send the
  mails that created.
- `catch_up()`, beat every MW_NOTIFY_CATCH_UP_SECONDS: look at every Group whose log is
  ahead of its Cursor, create the reminders and digests due, and send every mail not sent
  (pending, or claimed by a sender that died).

Reminders: a wait still open MW_NOTIFY_REMIND_AFTER_SECONDS after its last mail gets a
reminder, MW_NOTIFY_REMINDERS at most, for those who chose a mail for each decision.
Before that, the waits of its Mission are worked out again, so a decision taken without
an event the notifier has seen yet is not reminded of. Digests: from MW_NOTIFY_DIGEST_HOUR
(UTC) each day, one mail per person per Group for those who chose the digest and have
something waiting there; the unique (group, principal, day) makes it one."""

import logging
from datetime import timedelta

from celery import current_app, shared_task
from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models import Q
from django.utils import timezone

from apps.identity.models import Membership
from apps.ledger.hints import GroupHints
from mission_weave.core import state

from . import sending, waits
from .models import DIGEST, EVERY, Mail, Preference, Wait

log = logging.getLogger(__name__)

RETRY = {"autoretry_for": (DatabaseError,), "retry_backoff": True, "retry_backoff_max": 60,
         "max_retries": 8, "ignore_result": True}


@shared_task(name="apps.notify.tasks.notice", **RETRY)
def notice(group_id: str) -> dict:
    now = timezone.now()
    return sending.send(waits.look(group_id, now), now)


@shared_task(name="apps.notify.tasks.catch_up", **RETRY)
def catch_up(now=None) -> dict:
    """Beat. `now` is for the tests; beat leaves it out."""
    now = now or timezone.now()
    created = []
    for group_id in waits.behind():
        created += waits.look(group_id, now)
    reminded = remind(now)
    digests = digest(now)
    counts = sending.send(sending.unsent(now), now)
    return {"looked": len(created), "reminders": reminded, "digests": digests, **counts}


def remind(now) -> int:
    """Create the reminders due at `now`; how many."""
    due = Wait.objects.filter(
        resolved_at__isnull=True, reminders__lt=settings.MW_NOTIFY_REMINDERS,
        last_mailed_at__lte=now - timedelta(seconds=settings.MW_NOTIFY_REMIND_AFTER_SECONDS))
    by_group: dict[str, set] = {}
    for group_id, mission_id in due.values_list("group_id", "mission_id").distinct():
        by_group.setdefault(group_id, set()).add(mission_id)
    created = 0
    for group_id, missions in sorted(by_group.items()):
        with transaction.atomic():
            if waits.locked_cursor(group_id) is None:
                continue  # a look holds the Group: the next round reminds
            waits.recompute(group_id, missions, now)  # what is still waiting, now
            unwanted = set(Preference.objects.filter(group_id=group_id).exclude(
                choice=EVERY).values_list("principal", flat=True))
            for wait in due.filter(group_id=group_id).select_for_update():
                if wait.principal in unwanted:
                    continue
                wait.reminders += 1
                wait.last_mailed_at = now
                wait.save(update_fields=["reminders", "last_mailed_at"])
                Mail.objects.create(group_id=group_id, principal=wait.principal,
                                    kind=Mail.REMINDER, wait_id=wait.id, number=wait.reminders,
                                    created_at=now)
                created += 1
    return created


def digest(now) -> int:
    """Create today's digests once the hour has come; how many."""
    if now.hour < settings.MW_NOTIFY_DIGEST_HOUR:
        return 0
    chosen = set(Preference.objects.filter(choice=DIGEST).values_list("group_id", "principal"))
    members = chosen & set(Membership.objects.filter(
        active=True, principal__in={p for _, p in chosen}).values_list("group_id", "principal"))
    waiting = set(Wait.objects.filter(resolved_at__isnull=True).values_list(
        "group_id", "principal").distinct())
    rows = [Mail(group_id=g, principal=p, kind=Mail.DIGEST, day=now.date(), created_at=now)
            for g, p in sorted(members & waiting)]
    # One a day: the unique (group, principal, day) of digests refuses the second.
    before = Mail.objects.filter(kind=Mail.DIGEST, day=now.date()).count()
    Mail.objects.bulk_create(rows, ignore_conflicts=True)
    return Mail.objects.filter(kind=Mail.DIGEST, day=now.date()).count() - before


# --- the hint ---------------------------------------------------------------------------

# Events that never start a wait (a lease renewed, progress, a checkpoint, an artifact,
# usage): most of a busy Group's commits. They are not worth a `notice` of their own; the
# next look reads past them, and a wait they end is checked again when its mail is sent.
QUIET = frozenset({"lease.renewed", "work.progress_reported", "work.checkpointed",
                   "artifact.published", state.USAGE_RECORDED, "work.schedule_disclosed"})


def hint(group_id: str, documents: list) -> None:
    """After a commit: have the Group looked at soon. Never raises (the commit stands)."""
    if all(document["type"] in QUIET for document in documents):
        return
    try:
        if current_app.conf.task_always_eager:
            notice(group_id)  # no broker (or eager tests): now, in this thread
        else:
            HINTS.put(group_id)
    except Exception:
        log.exception("notifications for %s not looked at now; catch_up will", group_id)


def _notice_soon(group_id: str) -> None:
    try:
        notice.delay(group_id)
    except Exception:  # Redis away: catch_up looks at the Group later
        log.warning("could not enqueue notice(%s); catch_up will", group_id)


def _watched() -> frozenset:
    """The Groups where something can wait on a person: waits are only ever on a human
    owner or coordinator, so a Group of Agents alone is never looked at for a commit."""
    return frozenset(Membership.objects.filter(
        Q(roles__contains=["owner"]) | Q(roles__contains=["coordinator"]),
        active=True, principal__startswith="user:").values_list("group_id", flat=True)
        .distinct())


# A busy Group is looked at once per PAUSE_SECONDS per process, however many commits it
# makes: a look reads every event since the last, so nothing waits longer than that for
# its mail, and the review's tasks, in the same queue, are not crowded out under load.
PAUSE_SECONDS = 5.0
HINTS = GroupHints("notify-hints", _notice_soon, _watched, pause_seconds=PAUSE_SECONDS)
