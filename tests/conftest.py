import pytest
import time_machine

from mission_weave.celery import app as celery_app
from tests import citus
from tests.support import Scenario, now

if citus.URL:
    @pytest.fixture(scope="session")
    def django_db_setup(django_db_setup, django_db_blocker):
        """On a Citus cluster (`make test-citus`): the migrated test database distributed
        as a deployment's is (tests/citus.py)."""
        with django_db_blocker.unblock():
            citus.prepare()
        yield
        with django_db_blocker.unblock():
            citus.forget()


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


@pytest.fixture(autouse=True)
def blob_root(settings, tmp_path):
    """Blobs in this test's own directory, on the filesystem storage: every test that
    submits work uploads its deliverable, and none may write into the checkout's .mw/."""
    settings.MW_BLOB_ROOT = tmp_path / "blobs"
    settings.MW_BLOB_STORAGE = "filesystem"
    return settings.MW_BLOB_ROOT


@pytest.fixture
def eager():
    """Celery runs each task in the calling process as it is scheduled (the embedded
    mode's behaviour), even though the tests have a broker configured."""
    previous = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = previous


@pytest.fixture
def broker():
    """Celery as in production: tasks go to a broker, not run inline."""
    previous = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = False
    yield
    celery_app.conf.task_always_eager = previous


# --- totals a test reports at the end of the run ------------------------------------------
# A test's own print is lost under pytest-xdist (a worker's output is captured); what it
# hands to `report` travels with its result to the controller, which prints it last.
REPORTED = "mw-report"


@pytest.fixture
def report(request):
    """report(text): a line printed in the run's summary (e.g. how many cases were tried)."""
    return lambda text: request.node.user_properties.append((REPORTED, text))


def pytest_terminal_summary(terminalreporter):
    lines = [value for reports in terminalreporter.stats.values() for r in reports
             for key, value in getattr(r, "user_properties", ()) if key == REPORTED
             and getattr(r, "when", "call") == "call"]
    if lines:
        terminalreporter.section("reported by the tests")
        for line in lines:
            terminalreporter.write_line(line)
