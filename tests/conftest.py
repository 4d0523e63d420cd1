import pytest
import time_machine

from tests.support import Scenario, now


@pytest.fixture(autouse=True)
def fast_passwords(settings):
    # The demo humans' passwords need no strength here; hashing them must not be slow.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def clock():
    """Time stopped now; move it with clock.shift(timedelta(...))."""
    with time_machine.travel(now(), tick=False) as traveller:
        yield traveller


@pytest.fixture
def scenario(db):
    return Scenario()
