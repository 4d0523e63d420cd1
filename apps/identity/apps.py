from django.apps import AppConfig


class IdentityConfig(AppConfig):
    name = "apps.identity"
    label = "identity"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from apps.ledger import ports

        from . import principals

        ports.plug(members=principals)  # who sent a command, and with which roles
