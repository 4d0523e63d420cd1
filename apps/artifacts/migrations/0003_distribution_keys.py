"""The primary keys of the artifact projections include the Group, (id, group_id), so
that they can be distributed by group_id (docs/operations.md, "Scaling"). Their other
keys lead with the Group already; blobs and their uploads are no Group's data
(reference tables) and stay as they are. Django's model state is unchanged.

Not atomic: the new key indexes are built CONCURRENTLY (apps/ledger/migrations/
_distribution.py)."""

from django.db import migrations

from apps.ledger.migrations._distribution import primary_key_with_group


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('artifacts', '0002_artifacts_evidence_packages'),
        ('ledger', '0006_distribution_keys'),
    ]

    operations = [
        primary_key_with_group('artifacts_artifact'),
        primary_key_with_group('artifacts_artifactedge'),
        primary_key_with_group('artifacts_contextpackage'),
    ]
