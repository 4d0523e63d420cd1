"""The authoritative record: Groups, their append-only Event log, and CommandRecords.

Distributable by Group (docs/operations.md, "Scaling"): every key of a table of Group
data includes group_id, so that it can be sharded by group_id (Citus, co-located with
ledger_group by its id) or split into per-tenant databases. In the database the primary
key of each such table is (id, group_id) (migration 0006); Django's state keeps `id` as
the pk, unique by its sequence. tests/integration/test_distribution_keys.py holds every
table to this."""

from django.db import models
from django.db.models.functions import Concat


class Group(models.Model):
    """A Group Authority's unit of serialization: one row lock orders its log."""

    id = models.CharField(primary_key=True, max_length=100)
    # Unique through the primary key: the id is "grp_" + slug (group_id_names_slug). A
    # UNIQUE (slug) of its own could not be enforced once Groups are spread over shards.
    slug = models.SlugField(max_length=100)
    name = models.CharField(max_length=200, blank=True)
    head_sequence = models.BigIntegerField(default=0)
    head_hash = models.CharField(max_length=71, default="sha256:" + "0" * 64)
    # Events at or below this sequence were moved to the archive (apps/ledger/archive.py);
    # the online log holds the rest. Only rises.
    online_floor = models.BigIntegerField(default=0, db_default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.CheckConstraint(
            condition=models.Q(id=Concat(models.Value("grp_"), "slug")),
            name="group_id_names_slug")]

    def __str__(self):
        return self.slug


class AppendOnlyQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise TypeError("the event log is append-only: events are never updated")

    def delete(self):
        raise TypeError("the event log is append-only: events are never deleted")


class LoggedEvent(models.Model):
    """The columns of a logged event (PROTOCOL §3), online or archived; append-only."""

    sequence = models.BigIntegerField()
    # Unique within its Group (a constraint in each table's Meta), and distinct across
    # Groups too: an event id is a digest of its Group's id and command id (derive_id).
    event_id = models.CharField(max_length=100)
    type = models.CharField(max_length=100)
    occurred_at = models.DateTimeField()
    actor = models.CharField(max_length=200)
    command_id = models.CharField(max_length=200)
    mission_id = models.CharField(max_length=100, null=True)
    work_item_id = models.CharField(max_length=100, null=True)
    revision = models.IntegerField(null=True)
    data = models.JSONField()
    prev_hash = models.CharField(max_length=71)
    hash = models.CharField(max_length=71)

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        abstract = True

    def __str__(self):
        return f"{self.group_id} #{self.sequence} {self.type}"

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise TypeError("the event log is append-only: events are never updated")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise TypeError("the event log is append-only: events are never deleted")


class Event(LoggedEvent):
    """One entry of a Group's log: gapless sequence from 1, hash-chained (PROTOCOL §3)."""

    # No index of its own: event_sequence_unique (group, sequence) leads with it.
    group = models.ForeignKey(Group, on_delete=models.PROTECT, related_name="events",
                              db_index=False)

    class Meta:
        # A constraint rather than unique=True, which adds a LIKE index nothing uses.
        constraints = [models.UniqueConstraint(fields=["group", "sequence"],
                                               name="event_sequence_unique"),
                       models.UniqueConstraint(fields=["event_id", "group"],
                                               name="event_id_unique")]
        indexes = [models.Index(fields=["group", "work_item_id", "sequence"])]


class ArchivedEvent(LoggedEvent):
    """An event moved out of the online log by archiving (PROTOCOL §4: archiving never
    deletes history). The same columns and chain as Event, and as append-only."""

    group = models.ForeignKey(Group, on_delete=models.PROTECT, related_name="archived_events",
                              db_index=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["group", "sequence"],
                                               name="archived_event_sequence_unique"),
                       models.UniqueConstraint(fields=["event_id", "group"],
                                               name="archived_event_id_unique")]
        indexes = [models.Index(fields=["group", "work_item_id", "sequence"])]


class Snapshot(models.Model):
    """The projected state of a Group at a sequence, signed by the authority
    (apps/ledger/snapshots.py). `document` is the signed JSON exactly as served."""

    id = models.CharField(primary_key=True, max_length=100)
    group = models.ForeignKey(Group, on_delete=models.PROTECT, related_name="snapshots")
    sequence = models.BigIntegerField()
    hash = models.CharField(max_length=71)
    document = models.TextField()
    created_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["group", "sequence"],
                                               name="snapshot_sequence_unique")]

    def __str__(self):
        return f"{self.id} ({self.group_id} at #{self.sequence})"


class CommandRecord(models.Model):
    """The answer given to a command id, accepted or rejected, so a retry gets it again."""

    # No index of its own: command_id_unique (group, command_id) leads with it.
    group = models.ForeignKey(Group, on_delete=models.PROTECT, related_name="commands",
                              db_index=False)
    command_id = models.CharField(max_length=200)
    content_hash = models.CharField(max_length=71)
    type = models.CharField(max_length=100)
    actor = models.CharField(max_length=200)
    work_item_id = models.CharField(max_length=100, null=True)
    accepted = models.BooleanField()
    status = models.PositiveSmallIntegerField()
    # A rejection: its error; an acceptance: {sequences: [first, last]}.
    response = models.JSONField()
    envelope = models.JSONField(null=True)  # kept for rejections: the audit trail of late results
    created_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["group", "command_id"],
                                               name="command_id_unique")]
        # Only refusals are listed by WorkItem (its audit); acceptances skip the upkeep.
        indexes = [models.Index(fields=["group", "work_item_id", "created_at"],
                                name="command_refused_by_item",
                                condition=models.Q(accepted=False))]

    def __str__(self):
        return f"{self.command_id} ({self.type}, {'accepted' if self.accepted else 'refused'})"
