"""Webhook deliveries as Celery tasks.

    commit -> hint (this process's thread) -> fan_out_group -> send, send, ...
    beat   -> catch_up: webhooks behind their Group's head, deliveries whose send was lost

A commit tells `hint` (a `committed` subscriber, apps/ledger/ports.py), which only puts
the Group on a queue: the request neither queries nor waits for the broker. A thread of
the process (HINTS) sends `fan_out_group` for the Groups that have webhooks, as far as
it knows (it re-reads that set at most every WATCHED_SECONDS; a webhook made in this
process is known at once). `fan_out_group` makes the deliveries (outbox.fan_out) and
sends each (`send`), which retries with backoff through Celery until delivered or
MW_WEBHOOK_MAX_ATTEMPTS.

Redis is a hint here too: a hint lost (the process died before its thread sent it,
another process's webhook not yet known, Redis down) leaves the webhook's cursor behind
its Group's head, and a retry lost leaves a delivery past its due time; `catch_up`
finds both every MW_WEBHOOK_CATCH_UP_SECONDS. Every task is safe to run twice: the
cursor and the unique delivery key make each delivery once, the claim sends it once at
a time.

Without a broker (eager Celery) the thread runs the tasks itself, one attempt per
delivery; retries then wait for a `catch_up` (beat needs a broker)."""

import logging
from datetime import timedelta
from functools import partial

from celery import shared_task
from django.conf import settings
from django.db import DatabaseError
from django.db.models import Q
from django.utils import timezone

from apps.ledger.hints import GroupHints

from . import outbox, sending
from .models import Delivery, Webhook

log = logging.getLogger(__name__)

WATCHED_SECONDS = 5.0
# After a round that sent something, the thread waits this long, so that the commits of
# a busy Group make one fan-out per pause rather than one each (at most 20 a second).
PAUSE_SECONDS = 0.05
FAN_OUT_ROUNDS = 20  # batches one fan_out_group takes per webhook; catch_up does the rest


def hint(group_id: str, documents: list) -> None:
    """After a commit (the `committed` port): never queries, never raises."""
    HINTS.put(group_id)


@shared_task(name="apps.webhooks.tasks.fan_out_group", ignore_result=True,
             autoretry_for=(DatabaseError,), retry_backoff=True, max_retries=5)
def fan_out_group(group_id: str) -> int:
    """Make and send the deliveries of each of the Group's webhooks: how many made."""
    return sum(_fan_out(group_id, w) for w in Webhook.objects.filter(group_id=group_id)
               .values_list("id", flat=True))


def _fan_out(group_id: str, webhook_id: str) -> int:
    made_total = 0
    for _ in range(FAN_OUT_ROUNDS):
        made, more = outbox.fan_out(group_id, webhook_id, timezone.now())
        for delivery_id in made:
            _enqueue(send, delivery_id)
        made_total += len(made)
        # `more` is read after the commit: events that committed while this held the
        # webhook (their own fan-out skipped it) are taken in the next round.
        if not more:
            break
    return made_total


@shared_task(bind=True, name="apps.webhooks.tasks.send", ignore_result=True,
             max_retries=None)
def send(self, delivery_id: str) -> str:
    """One attempt; another after the backoff (Celery's retry with a countdown) while it
    is neither delivered nor out of attempts. The count of attempts lives in the row,
    so a retry that catch_up re-sends counts the same."""
    outcome = sending.attempt(delivery_id, timezone.now())
    if outcome.retry_in is not None and not self.request.is_eager:
        # Eagerly Celery would run the retry at once, ignoring the countdown.
        raise self.retry(countdown=outcome.retry_in)
    return outcome.state


@shared_task(name="apps.webhooks.tasks.catch_up", ignore_result=True)
def catch_up(limit: int = 1000) -> dict:
    """Beat: webhooks behind their Group's head are fanned out; deliveries due for a while
    (their send or retry lost) or claimed by a worker that died are sent again; finished
    deliveries older than MW_WEBHOOK_KEEP_DAYS are forgotten."""
    behind = outbox.behind(limit)
    for group_id, webhook_id in behind:
        _fan_out(group_id, webhook_id)
    now = timezone.now()
    late = now - timedelta(seconds=settings.MW_WEBHOOK_CATCH_UP_SECONDS)
    stale = list(Delivery.objects.filter(Q(state="pending", next_attempt_at__lte=late)
                                         | Q(state="sending", claimed_until__lt=now))
                 .order_by("next_attempt_at").values_list("id", flat=True)[:limit])
    for delivery_id in stale:
        _enqueue(send, delivery_id)
    keep = settings.MW_WEBHOOK_KEEP_DAYS
    pruned = outbox.prune(now - timedelta(days=keep), limit * 10) if keep > 0 else 0
    return {"webhooks": len(behind), "deliveries": len(stale), "pruned": pruned}


def send_soon(delivery_id: str) -> None:
    """A delivery made due outside the fan-out (a person's "Send again")."""
    _enqueue(send, delivery_id)


def _enqueue(task, *args) -> None:
    try:
        task.apply_async(args, queue=settings.MW_WEBHOOK_QUEUE)
    except Exception:  # catch_up finds it again
        log.exception("could not send %s%r; catch_up will", task.name, args)


def _watched() -> frozenset:
    """The Groups that have webhooks."""
    return frozenset(Webhook.objects.values_list("group_id", flat=True).distinct())


HINTS = GroupHints("webhook-hints", partial(_enqueue, fan_out_group), _watched,
                   WATCHED_SECONDS, PAUSE_SECONDS)
