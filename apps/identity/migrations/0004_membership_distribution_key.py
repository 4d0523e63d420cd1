"""Membership's primary key includes the Group, (id, group_id), so that it can be
distributed by group_id with the other Group tables (docs/operations.md, "Scaling").
Django's model state is unchanged: `id` stays the pk.

Not atomic: the new key index is built CONCURRENTLY (apps/ledger/migrations/
_distribution.py)."""

from django.db import migrations

from apps.ledger.migrations._distribution import primary_key_with_group


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('identity', '0003_key_rotation'),
        ('ledger', '0006_distribution_keys'),
    ]

    operations = [
        primary_key_with_group('identity_membership'),
    ]
