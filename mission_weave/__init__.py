"""MissionWeave: a Group Authority server for the MissionWeave protocol.

This package must stay importable without Django or Celery (the Agent SDK lives in
mission_weave.sdk), so nothing is imported here. The Celery app is in
mission_weave.celery; start a worker with `celery -A mission_weave.celery worker`.
"""

__version__ = "0.1.0"
