"""A Group's webhooks as configuration: made, listed, rotated and removed by the
dashboard's views and `mw_webhook`, which check who may (owners and coordinators of the
Group, or the operator). Not part of the log, like the Group's memberships.

A new webhook's secret is made here and returned once; the caller shows it once."""

import secrets
from datetime import timedelta

from django.db import transaction

from apps.ledger.models import Group
from mission_weave.core.evolve import MUTATORS
from mission_weave.protocol.errors import ProtocolError

from . import addresses, signing, tasks
from .models import Attempt, Delivery, Webhook

EVENT_TYPES = tuple(sorted(MUTATORS))  # every event type the log may hold
ROTATION_OVERLAP = timedelta(hours=24)  # the old secret still signs this long


def check_types(types) -> list[str]:
    chosen = sorted({t.strip() for t in types if t and t.strip()})
    unknown = [t for t in chosen if t not in MUTATORS]
    if unknown:
        raise ProtocolError("VALIDATION_ERROR",
                            f"unknown event type{'s' if len(unknown) > 1 else ''}: "
                            f"{', '.join(unknown)} (known: {', '.join(EVENT_TYPES)})",
                            {"unknown": unknown})
    return chosen


def check_format(format_: str) -> str:
    if format_ not in Webhook.FORMATS:
        raise ProtocolError("VALIDATION_ERROR", f"the format must be one of "
                                                f"{', '.join(Webhook.FORMATS)}, not {format_!r}")
    return format_


def create(group_id: str, url: str, event_types, format_: str, created_by: str,
           now) -> tuple[Webhook, str]:
    """(the webhook, its secret). It starts at the Group's head: what happens from now."""
    url = addresses.check_url(url)
    types, format_ = check_types(event_types), check_format(format_)
    addresses.check_destination(url)
    # The head as committed now: an event still being appended gets a higher sequence,
    # so it comes after the cursor and is delivered; nothing needs the Group's lock.
    group = Group.objects.filter(id=group_id).first()
    if group is None:
        raise ProtocolError("NOT_FOUND", f"no Group {group_id}")
    secret = signing.new_secret()
    webhook = Webhook.objects.create(
        id="wh_" + secrets.token_hex(8), group=group, url=url, format=format_,
        event_types=types, secret=secret, cursor=group.head_sequence,
        created_by=created_by, created_at=now)
    tasks.HINTS.forget()  # this process's hints learn at once that the Group is watched
    return webhook, secret


def of_group(group_id: str) -> list[Webhook]:
    return list(Webhook.objects.filter(group_id=group_id).order_by("created_at", "id"))


def listing(group_id: str | None = None) -> list[dict]:
    """What `mw_webhook list` prints (never the secret)."""
    found = Webhook.objects.order_by("group_id", "created_at", "id")
    if group_id:
        found = found.filter(group_id=group_id)
    return [describe(w) for w in found]


def describe(webhook: Webhook) -> dict:
    return {"id": webhook.id, "groupId": webhook.group_id, "url": webhook.url,
            "format": webhook.format, "events": webhook.event_types or "all",
            "cursor": webhook.cursor, "createdBy": webhook.created_by,
            "createdAt": webhook.created_at.isoformat()}


def get(webhook_id: str, group_id: str | None = None) -> Webhook:
    found = Webhook.objects.filter(id=webhook_id)
    if group_id is not None:
        found = found.filter(group_id=group_id)
    webhook = found.first()
    if webhook is None:
        raise ProtocolError("NOT_FOUND", f"no webhook {webhook_id}"
                                         + (f" in {group_id}" if group_id else ""))
    return webhook


def remove(webhook_id: str, group_id: str | None = None) -> Webhook:
    """The webhook, its deliveries and their attempts. A delivery being sent right now
    finds its webhook gone and records nothing."""
    webhook = get(webhook_id, group_id)
    with transaction.atomic():
        deliveries = Delivery.objects.filter(group_id=webhook.group_id, webhook_id=webhook.id)
        Attempt.objects.filter(group_id=webhook.group_id,
                               delivery_id__in=deliveries.values("id")).delete()
        deliveries.delete()
        Webhook.objects.filter(id=webhook.id, group_id=webhook.group_id).delete()
    return webhook  # as it was (a Model.delete() would have cleared its id)


def send_again(webhook_id: str, group_id: str, delivery_id: str, now) -> Delivery:
    """A `failed` delivery gets one more attempt, now (a person's retry, once the receiver
    is back): pending and due; its attempts stay logged and counted, so a failure of this
    one leaves it `failed` again."""
    changed = Delivery.objects.filter(id=delivery_id, group_id=group_id, webhook_id=webhook_id,
                                      state="failed").update(state="pending",
                                                             next_attempt_at=now)
    if not changed:
        raise ProtocolError("NOT_FOUND", f"no failed delivery {delivery_id} of {webhook_id}")
    tasks.send_soon(delivery_id)
    return Delivery.objects.get(id=delivery_id, group_id=group_id)


def rotate(webhook_id: str, group_id: str, now) -> tuple[Webhook, str]:
    """A new secret, returned once; the old one still signs for ROTATION_OVERLAP (each
    delivery then carries both signatures), so a receiver can switch without a gap."""
    webhook = get(webhook_id, group_id)
    secret = signing.new_secret()
    Webhook.objects.filter(id=webhook.id, group_id=group_id).update(
        secret=secret, previous_secret=webhook.secret,
        previous_secret_until=now + ROTATION_OVERLAP)
    webhook.refresh_from_db()
    return webhook, secret
