"""Projections of the log: each row holds the document `evolve` produced
(`doc`) plus the columns that queries and the sweeper filter on. Written only by
the append pipeline (apps/work/work_store.py); rebuilt and compared by mw_verify.

Every key includes the Group, so that the tables can be distributed by group_id: in the
database each primary key is (id, group_id) (migration 0004; Django's state keeps `id`
as the pk, unique by its sequence). tests/integration/test_distribution_keys.py holds
every table to this."""

from django.db import models
from django.db.models import Q


class Mission(models.Model):
    group = models.ForeignKey("ledger.Group", on_delete=models.PROTECT)
    mission_id = models.CharField(max_length=100)
    state = models.CharField(max_length=20)
    title = models.CharField(max_length=10000)
    parent_work_item_id = models.CharField(max_length=100, null=True)
    revision = models.IntegerField()
    doc = models.JSONField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["group", "mission_id"],
                                               name="mission_unique")]

    def __str__(self):
        return f"{shorten(self.title)} ({self.mission_id})"


class WorkItemQuerySet(models.QuerySet):
    def in_priority_order(self):
        """The requested priority of mission_weave/core/priority.py, from the rank columns
        written with the current contract: a revision reorders at once, and an Agent's
        queue (Group, owner, state) is read in the order of workitem_queue."""
        return self.order_by(*PRIORITY_ORDER)


PRIORITY_ORDER = ("urgency_rank", "impact_rank", "deadline", "work_item_id")


class WorkItem(models.Model):
    # No index of its own: work_item_unique (group, work_item_id) leads with it.
    group = models.ForeignKey("ledger.Group", on_delete=models.PROTECT, db_index=False)
    work_item_id = models.CharField(max_length=100)
    mission_id = models.CharField(max_length=100)
    state = models.CharField(max_length=20)
    owner = models.CharField(max_length=100, null=True)
    ownership_epoch = models.IntegerField()
    revision = models.IntegerField()
    lease_id = models.CharField(max_length=100, null=True)  # the open lease, if any
    lease_expires_at = models.DateTimeField(null=True)
    start_by = models.DateTimeField(null=True)
    blocked_until = models.DateTimeField(null=True)
    offers_expire_at = models.DateTimeField(null=True)  # the last live offer's expiry
    retry_at = models.DateTimeField(null=True)  # a failed item may be retried from then
    # The contract's requested priority (core/priority.py rank): ascending is first.
    urgency_rank = models.SmallIntegerField()
    impact_rank = models.SmallIntegerField()
    deadline = models.DateTimeField(null=True)  # ascending puts a missing one last
    doc = models.JSONField()
    updated_at = models.DateTimeField()

    objects = WorkItemQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["group", "work_item_id"],
                                               name="work_item_unique")]
        # Every index is upkeep on each write that is not a HOT update (a deadline or
        # state changed: most of them). The deadline indexes hold only the rows that
        # apps/work/sweeper.py due() looks for (its RULES imply each condition), so a
        # swept or finished WorkItem leaves them; the owner index only the live work
        # that recovery and candidate load count. workitem_queue serves an Agent's poll
        # (state=queued&owner=me&order=priority) as an index scan that stops at the
        # page's end; not partial, so that a generic plan of the prepared statement
        # (state a parameter) uses it too.
        indexes = [
            models.Index(fields=["group", "owner", "state", *PRIORITY_ORDER],
                         name="workitem_queue"),
            models.Index(fields=["group", "mission_id"]),
            models.Index(fields=["owner", "state"], name="workitem_owner_live",
                         condition=Q(state__in=["queued", "active"], owner__isnull=False)),
            models.Index(fields=["lease_expires_at"], name="workitem_lease_due",
                         condition=Q(state="active", lease_expires_at__isnull=False)),
            models.Index(fields=["start_by"], name="workitem_start_due",
                         condition=Q(state="queued", owner__isnull=False,
                                     start_by__isnull=False)),
            models.Index(fields=["blocked_until"], name="workitem_blocked_due",
                         condition=Q(state="blocked", owner__isnull=False,
                                     blocked_until__isnull=False)),
            models.Index(fields=["offers_expire_at"], name="workitem_offers_due",
                         condition=Q(state="offered", offers_expire_at__isnull=False)),
            models.Index(fields=["retry_at"], name="workitem_retry_due",
                         condition=Q(state="failed", retry_at__isnull=False))]

    def __str__(self):
        return f"{self.work_item_id}: {shorten(_goal(self.doc))}"


class Proposal(models.Model):
    group = models.ForeignKey("ledger.Group", on_delete=models.PROTECT)
    proposal_id = models.CharField(max_length=100)
    mission_id = models.CharField(max_length=100)
    status = models.CharField(max_length=20)
    doc = models.JSONField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["group", "proposal_id"],
                                               name="proposal_unique")]

    def __str__(self):
        return f"{self.proposal_id}: {shorten(_goal(self.doc))}"


def shorten(text: str, limit: int = 60) -> str:
    """A title or goal as a name in the admin's lists, headings and links: one line."""
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _goal(doc) -> str:
    contract = doc.get("contract") if isinstance(doc, dict) else None
    return contract.get("goal", "") if isinstance(contract, dict) else ""
