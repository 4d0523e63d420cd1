"""The primary keys of the work projections include the Group, (id, group_id), so
that they can be distributed by group_id (docs/operations.md, "Scaling"). Their other
keys lead with the Group already. Django's model state is unchanged: `id` stays the pk.

Not atomic: the new key indexes are built CONCURRENTLY (apps/ledger/migrations/
_distribution.py)."""

from django.db import migrations

from apps.ledger.migrations._distribution import primary_key_with_group


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('work', '0003_drop_redundant_indexes_partial_deadlines'),
        ('ledger', '0006_distribution_keys'),
    ]

    operations = [
        primary_key_with_group('work_mission'),
        primary_key_with_group('work_workitem'),
        primary_key_with_group('work_proposal'),
    ]
