from django.apps import AppConfig


class WorkConfig(AppConfig):
    name = "apps.work"
    label = "work"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from apps.ledger import ports

        from . import capability_bearer, work_store

        # The pipeline loads and writes the projections through the store, and answers
        # carry their capability token's bearer string.
        ports.plug(projections=work_store, answers=capability_bearer)
