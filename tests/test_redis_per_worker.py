"""tests/redis_per_worker.py: each pytest-xdist worker gets a Redis database of its own,
set in the environment before the settings are loaded."""

import os
from urllib.parse import urlsplit

import pytest
from django.conf import settings

from tests.redis_per_worker import BASE, CHOSEN, give_worker_its_redis, worker_redis_url


def test_worker_n_uses_the_database_n_plus_one_above_the_runs():
    assert worker_redis_url("redis://127.0.0.1:6379/9", "gw0") == "redis://127.0.0.1:6379/10"
    assert worker_redis_url("redis://127.0.0.1:6379/9", "gw1") == "redis://127.0.0.1:6379/11"
    assert worker_redis_url("redis://:pw@h:1", "gw2") == "redis://:pw@h:1/3"


def test_the_environment_of_a_worker_is_changed_once(tmp_path):
    environ = {"PYTEST_XDIST_WORKER": "gw1", "REDIS_URL": "redis://h:6379/9",
               "MW_DATA_DIR": str(tmp_path)}
    give_worker_its_redis(environ)
    give_worker_its_redis(environ)  # a pytest inside the worker keeps its database
    assert environ == {"PYTEST_XDIST_WORKER": "gw1", "REDIS_URL": "redis://h:6379/11",
                       "MW_DATA_DIR": str(tmp_path), CHOSEN: "gw1", BASE: "redis://h:6379/9"}


def test_outside_xdist_or_without_redis_nothing_changes(tmp_path):
    alone = {"REDIS_URL": "redis://h:6379/9"}
    give_worker_its_redis(alone)
    assert alone == {"REDIS_URL": "redis://h:6379/9"}
    without = {"PYTEST_XDIST_WORKER": "gw0", "MW_DATA_DIR": str(tmp_path)}
    give_worker_its_redis(without)
    assert without == {"PYTEST_XDIST_WORKER": "gw0", "MW_DATA_DIR": str(tmp_path)}


def test_the_embedded_stacks_redis_is_given_out_per_worker_too(tmp_path):
    (tmp_path / "services.json").write_text('{"REDIS_URL": "redis://127.0.0.1:7000/0"}')
    environ = {"PYTEST_XDIST_WORKER": "gw0", "MW_DATA_DIR": str(tmp_path)}
    give_worker_its_redis(environ)
    assert environ["REDIS_URL"] == "redis://127.0.0.1:7000/1"


def test_under_xdist_the_settings_of_this_worker_name_its_own_database():
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker or not settings.REDIS_URL:
        pytest.skip("for a run on pytest-xdist workers, with Redis")
    assert os.environ[CHOSEN] == worker
    assert settings.REDIS_URL == os.environ["REDIS_URL"] == worker_redis_url(
        os.environ[BASE], worker)
    own = int(urlsplit(settings.REDIS_URL).path.strip("/"))
    assert own == int(urlsplit(os.environ[BASE]).path.strip("/") or 0) + 1 + int(worker[2:])
    assert settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"] == [settings.REDIS_URL]
    assert settings.CACHES["default"]["LOCATION"] == settings.REDIS_URL
    assert settings.CELERY_BROKER_URL == settings.REDIS_URL
