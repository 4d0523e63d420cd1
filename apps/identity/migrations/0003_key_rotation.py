# Key rotation: when a key was revoked, and which key opened a session. Keys registered
# before public keys were checked for small order and canonical encoding
# (mission_weave/protocol/canonical.py, public_key_problem) and that fail the check now
# are revoked here, so that no lookup of an active key ever meets one.

from django.db import migrations, models
from django.utils import timezone


def revoke_refused_keys(apps, schema_editor):
    from mission_weave.protocol.canonical import public_key_from_b64url

    AgentKey = apps.get_model("identity", "AgentKey")
    refused = []
    for key_id, public_key in AgentKey.objects.filter(active=True) \
            .values_list("key_id", "public_key").iterator():
        try:
            public_key_from_b64url(public_key)
        except ValueError:
            refused.append(key_id)
    AgentKey.objects.filter(key_id__in=refused).update(active=False, revoked_at=timezone.now())


class Migration(migrations.Migration):

    dependencies = [
        ('identity', '0002_presence'),
    ]

    operations = [
        migrations.AddField(
            model_name='agentkey',
            name='revoked_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='agentsession',
            name='key_id',
            field=models.CharField(blank=True, max_length=120, null=True),
        ),
        migrations.RunPython(revoke_refused_keys, migrations.RunPython.noop, elidable=True),
    ]
