"""Each notify table's primary key includes the Group, (id, group_id), so that they can be
distributed by group_id (docs/operations.md, "Scaling"); their unique keys have it already.
Django's model state is unchanged.

Not atomic: the new key index is built CONCURRENTLY (apps/ledger/migrations/
_distribution.py)."""

from django.db import migrations

from apps.ledger.migrations._distribution import primary_key_with_group


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('notify', '0001_initial'),
        ('ledger', '0006_distribution_keys'),
    ]

    operations = [primary_key_with_group(f'notify_{table}')
                  for table in ('cursor', 'preference', 'wait', 'mail')]
