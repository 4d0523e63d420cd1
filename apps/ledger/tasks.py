"""Celery tasks of the ledger. Beat schedules `retention` every
MW_RETENTION_INTERVAL_SECONDS (settings.CELERY_BEAT_SCHEDULE); it is idempotent, so a
late or duplicated delivery does no harm."""

from celery import shared_task

from .retention import apply as apply_retention


@shared_task(name="apps.ledger.tasks.retention", ignore_result=True)
def retention() -> dict:
    return apply_retention()
