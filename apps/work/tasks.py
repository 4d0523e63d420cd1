"""Celery tasks of the work app. Beat schedules `sweep` every MW_SWEEP_INTERVAL_SECONDS
(settings.CELERY_BEAT_SCHEDULE); it is idempotent and safe to run on several workers
at once, so a late or duplicated delivery does no harm."""

from celery import shared_task

from . import sweeper


@shared_task(name="apps.work.tasks.sweep", ignore_result=True)
def sweep() -> dict:
    return sweeper.sweep()
