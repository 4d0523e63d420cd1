from django.apps import AppConfig


class ArtifactsConfig(AppConfig):
    name = "apps.artifacts"
    label = "artifacts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from apps.ledger import ports

        from . import facts

        ports.plug(facts=facts)  # signer keys, blobs, other Groups, for decisions
