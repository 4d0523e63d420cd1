"""What the notifications remember (issue 28). The log is the outbox: nothing here is
written by a command's transaction. `notice` (waits.py) reads a Group's events after its
Cursor, works out what now waits on whom, and records each new wait with its first mail in
one transaction; the mails are then sent, each claimed by compare-and-set (sending.py).

Group data: in the database each primary key is (id, group_id) (migration 0002), and every
unique key includes group_id, so that they can be distributed by group_id
(tests/integration/test_distribution_keys.py). A wait is referred to by its id alone
(`Mail.wait_id`, no foreign key): a foreign key would have to carry the Group too."""

from django.db import models
from django.db.models import Q

EVERY, DIGEST, NOTHING = "every", "digest", "nothing"


class Cursor(models.Model):
    """The last sequence of the Group's log that `notice` has looked at. Only rises."""

    group = models.ForeignKey("ledger.Group", on_delete=models.CASCADE, related_name="+")
    sequence = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["group"], name="one_notify_cursor")]

    def __str__(self):
        return f"{self.group_id}:{self.sequence}"


class Preference(models.Model):
    """How a person hears about one Group: every event (the default, with no row), a daily
    digest, or nothing."""

    CHOICES = [(EVERY, "a mail for each decision, and a reminder"),
               (DIGEST, "one mail a day with what waits"), (NOTHING, "no mail")]

    group = models.ForeignKey("ledger.Group", on_delete=models.CASCADE, related_name="+")
    principal = models.CharField(max_length=200)  # user:<username>
    choice = models.CharField(max_length=10, choices=CHOICES, default=EVERY)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["group", "principal"],
                                               name="one_notify_preference")]

    def __str__(self):
        return f"{self.principal} in {self.group_id}: {self.choice}"


class Wait(models.Model):
    """One decision waiting on one person, from the look that found it (`opened_at`) to the
    one that found it gone (`resolved_at`). At most one open wait per (person, kind,
    Mission, WorkItem): the one that started waiting is the one mailed and reminded of."""

    group = models.ForeignKey("ledger.Group", on_delete=models.CASCADE, related_name="+")
    principal = models.CharField(max_length=200)
    kind = models.CharField(max_length=40)  # core/waiting.py's kinds
    mission_id = models.CharField(max_length=100)
    work_item_id = models.CharField(max_length=100, default="")  # "" for the Mission's own
    what = models.TextField()  # the sentence the home page shows (may quote an agent)
    title = models.TextField()  # the Mission's title, written by an agent or a human
    since = models.DateTimeField(null=True)
    opened_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True)
    reminders = models.PositiveIntegerField(default=0)  # reminder mails created so far
    last_mailed_at = models.DateTimeField(null=True)  # when its latest mail was created

    class Meta:
        constraints = [models.UniqueConstraint(
            fields=["group", "principal", "kind", "mission_id", "work_item_id"],
            condition=Q(resolved_at__isnull=True), name="one_open_wait")]
        indexes = [models.Index(fields=["group", "mission_id"], name="notify_wait_mission",
                                condition=Q(resolved_at__isnull=True))]

    def __str__(self):
        return f"{self.kind} {self.mission_id}/{self.work_item_id} on {self.principal}"


class Mail(models.Model):
    """One mail to send, the outbox's row: a wait's first mail (number 0), a reminder
    (1, 2, ...) or a person's digest of a Group for one day. Its id is in the Message-ID,
    so a mail sent again after a lost answer is recognisably the same message."""

    PENDING, SENDING, SENT, DROPPED = "pending", "sending", "sent", "dropped"
    NOTICE, REMINDER, DIGEST = "notice", "reminder", "digest"

    group = models.ForeignKey("ledger.Group", on_delete=models.CASCADE, related_name="+")
    principal = models.CharField(max_length=200)
    kind = models.CharField(max_length=10)  # notice, reminder, digest
    wait_id = models.BigIntegerField(null=True)  # a notice's or reminder's Wait
    number = models.PositiveIntegerField(default=0)  # 0: the notice; n: the n-th reminder
    day = models.DateField(null=True)  # a digest's day (UTC)
    state = models.CharField(max_length=10, default=PENDING)
    reason = models.TextField(blank=True)  # why it was dropped
    address = models.CharField(max_length=254, blank=True)  # where it went
    created_at = models.DateTimeField()
    claimed_at = models.DateTimeField(null=True)  # a sender took it (sending)
    sent_at = models.DateTimeField(null=True)
    attempts = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["group", "wait_id", "number"],
                                    condition=Q(wait_id__isnull=False), name="one_mail_per_turn"),
            models.UniqueConstraint(fields=["group", "principal", "day"],
                                    condition=Q(kind="digest"), name="one_digest_a_day"),
        ]
        indexes = [models.Index(fields=["state", "created_at"], name="notify_mail_unsent",
                                condition=Q(state__in=["pending", "sending"]))]

    def __str__(self):
        return f"{self.kind} #{self.id} to {self.principal}: {self.state}"
