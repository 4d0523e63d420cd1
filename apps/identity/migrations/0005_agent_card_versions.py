"""The versions each Agent Card has had (§13.1: a manifest names the producer's Agent Card
version; it may be an earlier one). Agents registered before are known by their current
card's version only: earlier ones were not recorded."""

from django.db import migrations, models


def record_current_versions(apps, schema_editor):
    Agent = apps.get_model("identity", "Agent")
    for agent in Agent.objects.filter(card_versions=[]).iterator():
        version = (agent.card or {}).get("version")
        if version:
            agent.card_versions = [version]
            agent.save(update_fields=["card_versions"])


class Migration(migrations.Migration):

    dependencies = [
        ('identity', '0004_membership_distribution_key'),
    ]

    operations = [
        migrations.AddField(
            model_name='agent',
            name='card_versions',
            field=models.JSONField(default=list),
        ),
        migrations.RunPython(record_current_versions, migrations.RunPython.noop),
    ]
