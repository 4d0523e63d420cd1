"""A Cursor's primary key includes the Group, (id, group_id), so that cursors can be
distributed by group_id (docs/operations.md, "Scaling"); one_cursor_per_member
(principal, group_id) has it already. Django's model state is unchanged.

Not atomic: the new key index is built CONCURRENTLY (apps/ledger/migrations/
_distribution.py)."""

from django.db import migrations

from apps.ledger.migrations._distribution import primary_key_with_group


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('delivery', '0001_cursor'),
        ('ledger', '0006_distribution_keys'),
    ]

    operations = [
        primary_key_with_group('delivery_cursor'),
    ]
