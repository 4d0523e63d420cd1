from django.apps import AppConfig


class LedgerConfig(AppConfig):
    name = "apps.ledger"
    label = "ledger"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from django.core import checks

        from .checks import ports_plugged

        checks.register(ports_plugged)  # every port plugged in, as its Protocol describes
        # Bind Celery's current app to our settings (eager without a broker), so that a
        # task queued from a view or a management command uses them.
        import mission_weave.celery  # noqa: F401
