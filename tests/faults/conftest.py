"""The fault tests: processes killed, paused and restarted under load (`make test-faults`).

They start and stop their own processes (daphne, Celery workers, SDK workers, a private
PostgreSQL and Redis) and take minutes, so `make test` leaves them out: only with
MW_FAULT_TESTS=1 (which `make test-faults` sets) are the modules below collected.
`test_scale_out_short.py`, the short scale-out run, is the one that stays in `make test`
(and is left out here when the long one runs).

Each test reports its figure through the `figure` fixture: printed at once, and all of
them again at the end of the run (pytest's terminal summary)."""

import os

import pytest

HEAVY = ["test_worker_faults.py", "test_web_kills.py", "test_postgres_restart.py",
         "test_redis_restart.py", "test_celery_kills.py", "test_scale_out.py",
         "test_notify_kills.py", "test_sentinel_failover.py"]

if os.environ.get("MW_FAULT_TESTS") == "1":
    collect_ignore = ["test_scale_out_short.py"]  # the long run covers it
else:
    collect_ignore = HEAVY

FIGURES: list[tuple[str, str]] = []


@pytest.fixture
def figure(request):
    """`figure("one line")`: this test's measured figure, shown now and in the summary."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")

    def say(text: str) -> None:
        FIGURES.append((request.node.name, text))
        if reporter is not None:
            reporter.write_line(f"\nFIGURE {request.node.name}: {text}")
    return say


def pytest_terminal_summary(terminalreporter):
    if FIGURES:
        terminalreporter.section("fault test figures")
        for name, text in FIGURES:
            terminalreporter.write_line(f"{name}: {text}")
