import pytest

from tests.support import Scenario


@pytest.fixture
def scenario(db):
    return Scenario()
