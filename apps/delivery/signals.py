"""A membership change reaches open WebSocket connections at once: after the change
commits, a notice on `mw:members:<groupId>` makes the member's connections in that
Group re-check (apps/delivery/hub.py). The periodic re-check in the consumer is the
backstop if a notice is lost."""

from django.db import transaction
from django.db.models.signals import post_save

from apps.identity.models import Membership
from apps.ledger import publish


def _membership_saved(sender, instance: Membership, created: bool, **kwargs) -> None:
    if created:
        return  # nobody was subscribed as this member yet
    group_id, principal = instance.group_id, instance.principal
    transaction.on_commit(lambda: publish.membership_changed(group_id, principal))


def connect() -> None:
    post_save.connect(_membership_saved, sender=Membership,
                      dispatch_uid="delivery.membership_changed")
