from django.apps import AppConfig


class ArtifactsConfig(AppConfig):
    name = "apps.artifacts"
    label = "artifacts"
    default_auto_field = "django.db.models.BigAutoField"
