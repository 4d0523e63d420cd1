"""The contract's requested priority as columns (mission_weave/core/priority.py rank),
filled for the existing rows from their documents, and the index an Agent's queue is
read in (workitem_queue): `order=priority` was a sort over CASE expressions on the JSON.

Not atomic: the index is built CONCURRENTLY, without blocking writes."""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models

from mission_weave.core import priority


def _case(key: str, scale: tuple) -> str:
    whens = " ".join(f"WHEN '{value}' THEN {index}" for index, value in enumerate(scale))
    return f"CASE doc->'contract'->>'{key}' {whens} ELSE {len(scale)} END"


BACKFILL = (f"UPDATE work_workitem SET urgency_rank = {_case('urgency', priority.URGENCY)}, "
            f"impact_rank = {_case('businessImpact', priority.BUSINESS_IMPACT)}, "
            f"deadline = (doc->'contract'->>'deadline')::timestamptz")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('work', '0004_distribution_keys'),
    ]

    operations = [
        migrations.AddField(model_name='workitem', name='urgency_rank',
                            field=models.SmallIntegerField(default=len(priority.URGENCY)),
                            preserve_default=False),
        migrations.AddField(model_name='workitem', name='impact_rank',
                            field=models.SmallIntegerField(
                                default=len(priority.BUSINESS_IMPACT)),
                            preserve_default=False),
        migrations.AddField(model_name='workitem', name='deadline',
                            field=models.DateTimeField(null=True)),
        migrations.RunSQL(BACKFILL, migrations.RunSQL.noop, elidable=True),
        AddIndexConcurrently(
            model_name='workitem',
            index=models.Index(fields=['group', 'owner', 'state', 'urgency_rank',
                                       'impact_rank', 'deadline', 'work_item_id'],
                               name='workitem_queue')),
    ]
