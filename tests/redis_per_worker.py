"""A pytest plugin, loaded first (pyproject's addopts: `-p tests.redis_per_worker`): each
pytest-xdist worker (`make test` runs two) gets a Redis database of its own, as
pytest-django gives it a PostgreSQL database of its own, so that one worker's channel
groups, rate-limit counters and queues never meet another's. Worker gwN uses the
database N + 1 above REDIS_URL's.

It works by import: pytest imports a `-p` plugin while it reads the command line, before
pytest-django loads the settings (in pytest_load_initial_conftests), and pytest-xdist sets
PYTEST_XDIST_WORKER in a worker's environment before it builds that worker's config
(xdist/remote.py). So REDIS_URL is changed in os.environ, where settings.py reads it and
the servers a test starts inherit it. The settings know nothing of the tests."""

import json
import os
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
# Set in a worker once its Redis database is chosen: a pytest started inside it (or this
# module imported again) keeps that database. The URL before the change, for the tests.
CHOSEN = "MW_REDIS_OF_WORKER"
BASE = "MW_REDIS_URL_OF_RUN"


def worker_redis_url(url: str, worker: str) -> str:
    """REDIS_URL for xdist worker `worker` (gw0, gw1, ...): its database N + 1 above."""
    redis = urlsplit(url)
    database = int(redis.path.strip("/") or 0) + 1 + int(worker[2:])
    return urlunsplit(redis._replace(path=f"/{database}"))


def stack_redis_url(environ) -> str:
    """The Redis settings.py falls back on when REDIS_URL is unset: the one the embedded
    stack (`make run`) runs for MW_DATA_DIR, if any."""
    data = Path(environ.get("MW_DATA_DIR") or ROOT / ".mw")
    try:
        return json.loads((data / "services.json").read_text()).get("REDIS_URL", "")
    except (OSError, ValueError):
        return ""


def give_worker_its_redis(environ) -> None:
    worker = environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw") or environ.get(CHOSEN):
        return
    url = environ.get("REDIS_URL") or stack_redis_url(environ)
    if url:
        environ[BASE] = url
        environ["REDIS_URL"] = worker_redis_url(url, worker)
        environ[CHOSEN] = worker


give_worker_its_redis(os.environ)
