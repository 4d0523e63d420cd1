from django.apps import AppConfig


class NotifyConfig(AppConfig):
    """People told when something waits on them (issue 28): e-mail now and as a reminder,
    or in a daily digest, as each person chooses per Group. Above `delivery`: it reads the
    log and the projections, and nothing below it imports it."""

    name = "apps.notify"
    label = "notify"

    def ready(self):
        from apps.ledger import ports

        from . import tasks

        ports.subscribe(tasks.hint)  # a commit has its Group looked at, off the request
