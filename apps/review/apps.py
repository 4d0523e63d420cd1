from django.apps import AppConfig


class ReviewConfig(AppConfig):
    """The Evidence-based review of a submission (§13.2): its Celery tasks, what they find
    out about the cited artifacts, and the review as the API shows it. Above `work`, whose
    WorkItems it reads, and `artifacts`, whose blobs it checks."""

    name = "apps.review"
    label = "review"

    def ready(self):
        from apps.ledger import ports

        from . import tasks

        ports.subscribe(tasks.schedule)  # a committed submission starts its review
