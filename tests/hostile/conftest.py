"""Fixtures of the hostile tests: one committed Cast per module (tests/hostile/cast.py).

Each module builds its world once, committed, so that hundreds of matrix cases need not
build it again each; a test that uses the `db` fixture then runs in a transaction rolled
back after it, so a case that wrongly succeeded cannot leak into the next. At the end of
the module the database is flushed, as a `transaction=True` test would leave it."""

import pytest
from django.core.management import call_command
from django.test import override_settings

from tests.hostile.cast import Cast

FAST_HASHER = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(scope="session")
def hostile_blobs(tmp_path_factory):
    return tmp_path_factory.mktemp("hostile-blobs")


@pytest.fixture(autouse=True)
def blob_root(settings, hostile_blobs):
    """The blob store of the module's Cast, not a fresh one per test (tests/conftest.py's):
    the Cast's artifacts must stay readable."""
    settings.MW_BLOB_ROOT = hostile_blobs
    settings.MW_BLOB_STORAGE = "filesystem"
    return hostile_blobs


def flush() -> None:
    call_command("flush", verbosity=0, interactive=False)


@pytest.fixture(scope="module")
def cast(django_db_setup, django_db_blocker, hostile_blobs):
    with django_db_blocker.unblock(), override_settings(
            MW_BLOB_ROOT=hostile_blobs, MW_BLOB_STORAGE="filesystem",
            PASSWORD_HASHERS=FAST_HASHER):
        try:
            yield Cast()
        finally:
            flush()
