"""The Celery app. Start a worker with `celery -A mission_weave.celery worker -l info`
and the scheduler with `celery -A mission_weave.celery beat -l info` (exactly one).

Not imported from mission_weave/__init__.py, which must stay free of Django and Celery.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mission_weave.settings")

app = Celery("mission_weave")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
