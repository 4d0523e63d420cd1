from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    """A Group's events, POSTed signed to the URLs its owners and coordinators chose
    (issue 28), by Celery with retries, each attempt logged. Above `notify`."""

    name = "apps.webhooks"
    label = "webhooks"

    def ready(self):
        from apps.ledger import ports

        from . import tasks

        ports.subscribe(tasks.hint)  # a commit is a hint to fan its events out
