from django.apps import AppConfig


class DeliveryConfig(AppConfig):
    name = "apps.delivery"
    label = "delivery"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from apps.ledger import ports

        from . import hub, signals

        signals.connect()
        ports.plug(local_hub=hub.HUB)  # commits reach this process's sockets without Redis
