import pytest

from tests.integration.wslive import live_server


@pytest.fixture(scope="module")
def port(django_db_setup, django_db_blocker):
    """The port of a real server (wslive.live_server) on the test database, one per module."""
    with live_server() as port:
        yield port
