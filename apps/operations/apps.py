from django.apps import AppConfig


class OperationsConfig(AppConfig):
    """Probes, metrics and the request and command logs (docs/operations.md)."""

    name = "apps.operations"
    label = "operations"

    def ready(self):
        from django.conf import settings

        from apps.ledger import ports

        from . import metric_files, metrics_access

        metrics_access.networks(tuple(settings.MW_METRICS_ALLOW))  # a bad network refuses to start
        # Before the first metric is created: the mode is chosen then.
        metric_files.start(settings.MW_METRICS_DIR)
        from .observer import Observer

        ports.plug(observer=Observer())
