"""A Group's outgoing webhooks, their deliveries and every attempt to send one.

Not part of the log: a webhook is configuration, like a Membership, written by the
dashboard's forms and `mw_webhook` (apps/webhooks/registry.py). The log is the outbox:
each webhook keeps a cursor into its Group's log, and `outbox.fan_out` turns the events
after it into Delivery rows (one per webhook and event, unique) in the transaction that
moves the cursor. See docs/operations.md, "Webhooks".

Every table carries its Group and every key includes it (docs/operations.md,
"Scaling"; migration 0002). No foreign key between two of them: Citus could enforce
one only through (id, group_id), which Django's ForeignKey cannot name, so a delivery's
webhook and an attempt's delivery are plain columns, and removing a webhook removes its
deliveries and attempts explicitly (registry.remove)."""

from django.db import models


class Webhook(models.Model):
    FORMATS = ("json", "slack")

    id = models.CharField(primary_key=True, max_length=40)  # "wh_" + random hex
    group = models.ForeignKey("ledger.Group", on_delete=models.CASCADE, related_name="+")
    url = models.CharField(max_length=2000)
    format = models.CharField(max_length=10, default="json")
    # Event types it gets; empty: every event of the Group.
    event_types = models.JSONField(default=list)
    # Kept in clear: it has to sign (HMAC), so it cannot be stored as a hash. Shown once.
    secret = models.CharField(max_length=100)
    # After a rotation, the old secret still signs (a second v1) until this moment.
    previous_secret = models.CharField(max_length=100, blank=True, default="")
    previous_secret_until = models.DateTimeField(null=True)
    # The last sequence of the Group's log already turned into deliveries (or skipped).
    cursor = models.BigIntegerField()
    created_by = models.CharField(max_length=200)
    created_at = models.DateTimeField()

    def __str__(self):
        return f"{self.id} ({self.group_id} -> {self.url})"


class Delivery(models.Model):
    """One event, for one webhook. Its id is what the receiver deduplicates on: the same
    on every attempt. `body` is the exact bytes POSTed, fixed when the delivery is made."""

    STATES = ("pending", "sending", "delivered", "failed")

    id = models.CharField(primary_key=True, max_length=40)  # "whd_" + digest(webhook, event)
    group = models.ForeignKey("ledger.Group", on_delete=models.CASCADE, related_name="+",
                              db_index=False)
    webhook_id = models.CharField(max_length=40)
    event_id = models.CharField(max_length=100)
    sequence = models.BigIntegerField()
    event_type = models.CharField(max_length=100)
    body = models.TextField()
    state = models.CharField(max_length=10, default="pending")
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    # The claim of the worker sending it (compare-and-set), and until when it holds.
    claim = models.CharField(max_length=40, blank=True, default="")
    claimed_until = models.DateTimeField(null=True)
    delivered_at = models.DateTimeField(null=True)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["group", "webhook_id", "event_id"],
                                               name="webhook_delivery_once")]
        indexes = [models.Index(fields=["group", "webhook_id", "sequence"],
                                name="delivery_by_webhook"),
                   # What beat looks for: deliveries not finished, by when they are due.
                   models.Index(fields=["next_attempt_at"], name="delivery_due",
                                condition=models.Q(state__in=["pending", "sending"])),
                   # What catch_up prunes: finished deliveries, the oldest first.
                   models.Index(fields=["created_at"], name="delivery_finished",
                                condition=models.Q(state__in=["delivered", "failed"]))]

    def __str__(self):
        return f"{self.id} ({self.event_type} #{self.sequence}, {self.state})"


class Attempt(models.Model):
    """One POST of a delivery: when, how long, and what came back."""

    group = models.ForeignKey("ledger.Group", on_delete=models.CASCADE, related_name="+",
                              db_index=False)
    delivery_id = models.CharField(max_length=40)
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    duration_ms = models.PositiveIntegerField()
    status_code = models.PositiveSmallIntegerField(null=True)  # None: no HTTP answer
    error = models.CharField(max_length=500, blank=True, default="")
    response_excerpt = models.CharField(max_length=500, blank=True, default="")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["group", "delivery_id", "number"],
                                               name="attempt_number_once")]

    def __str__(self):
        return f"{self.delivery_id} attempt {self.number}: {self.status_code or self.error}"
