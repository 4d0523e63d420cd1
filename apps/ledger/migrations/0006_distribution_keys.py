"""Every key of the ledger's Group data includes the Group (docs/operations.md,
"Scaling"), so that the tables can be distributed by group_id (ledger_group by its id)
without a redesign:
- the primary keys of the event log, its archive, the snapshots and the command
  records become (id, group_id);
- an event id is unique within its Group (it is a digest of the Group's id, so distinct
  across Groups as well);
- a Group's slug is unique through the primary key: its id is "grp_" + slug, as
  apps/identity/registry.py names every Group, now a CHECK; the slug keeps a plain index.

Not atomic: the new key indexes are built CONCURRENTLY (see _distribution.py)."""

import django.db.models.functions.text
from django.db import migrations, models

from apps.ledger.migrations._distribution import primary_key_with_group, unique_with_group


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('ledger', '0005_drop_redundant_indexes'),
    ]

    operations = [
        # First, so that a Group named otherwise stops the migration before any change.
        migrations.AddConstraint(
            model_name='group',
            constraint=models.CheckConstraint(condition=models.Q(('id', django.db.models.functions.text.Concat(models.Value('grp_'), 'slug'))), name='group_id_names_slug'),
        ),
        migrations.AlterField(
            model_name='group',
            name='slug',
            field=models.SlugField(max_length=100),
        ),
        migrations.SeparateDatabaseAndState(
            database_operations=[
                unique_with_group('ledger_event', 'event_id_unique', 'event_id'),
                unique_with_group('ledger_archivedevent', 'archived_event_id_unique', 'event_id'),
            ],
            state_operations=[
                migrations.RemoveConstraint(
                    model_name='archivedevent',
                    name='archived_event_id_unique',
                ),
                migrations.RemoveConstraint(
                    model_name='event',
                    name='event_id_unique',
                ),
                migrations.AddConstraint(
                    model_name='archivedevent',
                    constraint=models.UniqueConstraint(fields=('event_id', 'group'), name='archived_event_id_unique'),
                ),
                migrations.AddConstraint(
                    model_name='event',
                    constraint=models.UniqueConstraint(fields=('event_id', 'group'), name='event_id_unique'),
                ),
            ],
        ),
        primary_key_with_group('ledger_event'),
        primary_key_with_group('ledger_archivedevent'),
        primary_key_with_group('ledger_snapshot'),
        primary_key_with_group('ledger_commandrecord'),
    ]
