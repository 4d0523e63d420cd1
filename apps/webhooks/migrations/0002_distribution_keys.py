"""The webhooks' primary keys include the Group, (id, group_id), so that they can be
distributed by group_id like the rest of a Group's data (docs/operations.md,
"Scaling"); their unique constraints lead with the Group already. Django's model state
is unchanged: `id` stays the pk.

Not atomic: the key indexes are built CONCURRENTLY (apps/ledger/migrations/
_distribution.py)."""

from django.db import migrations

from apps.ledger.migrations._distribution import primary_key_with_group


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('webhooks', '0001_initial'),
        ('ledger', '0006_distribution_keys'),
    ]

    operations = [
        primary_key_with_group('webhooks_webhook'),
        primary_key_with_group('webhooks_delivery'),
        primary_key_with_group('webhooks_attempt'),
    ]
