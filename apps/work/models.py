"""Projections of the log: each row holds the document `state.evolve` produced
(`doc`) plus the columns that queries and the sweeper filter on. Written only by
the append pipeline (apps/work/store.py); rebuilt and compared by mw_verify."""

from django.db import models
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast

from . import priority


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


class WorkItemQuerySet(models.QuerySet):
    def in_priority_order(self):
        """The requested priority of apps/work/priority.py, computed from the current
        contract in SQL so that a revision reorders at once and paging stays correct."""
        def scale(key, values):
            return models.Case(*(models.When(models.Q(**{f"doc__contract__{key}": v}), then=i)
                                 for i, v in enumerate(values)),
                               default=len(values), output_field=models.IntegerField())
        return self.alias(
            urgency_rank=scale("urgency", priority.URGENCY),
            impact_rank=scale("businessImpact", priority.BUSINESS_IMPACT),
            deadline=Cast(KeyTextTransform(
                "deadline", KeyTextTransform("contract", "doc")), models.DateTimeField()),
        ).order_by("urgency_rank", "impact_rank", models.F("deadline").asc(nulls_last=True),
                   "work_item_id")


class WorkItem(models.Model):
    objects = WorkItemQuerySet.as_manager()

    group = models.ForeignKey("ledger.Group", on_delete=models.PROTECT)
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
    doc = models.JSONField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["group", "work_item_id"],
                                               name="work_item_unique")]
        indexes = [models.Index(fields=["group", "mission_id"]),
                   models.Index(fields=["owner", "state"]),
                   models.Index(fields=["lease_expires_at"]),
                   models.Index(fields=["start_by"]),
                   models.Index(fields=["blocked_until"]),
                   models.Index(fields=["offers_expire_at"]),
                   models.Index(fields=["retry_at"])]


class Proposal(models.Model):
    group = models.ForeignKey("ledger.Group", on_delete=models.PROTECT)
    proposal_id = models.CharField(max_length=100)
    mission_id = models.CharField(max_length=100)
    status = models.CharField(max_length=20)
    doc = models.JSONField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["group", "proposal_id"],
                                               name="proposal_unique")]
