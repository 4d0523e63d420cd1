from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    """A Group's events, POSTed signed to the URLs its owners and coordinators chose
    (issue 28), by Celery with retries, each attempt logged. Above `notify`."""

    name = "apps.webhooks"
    label = "webhooks"
