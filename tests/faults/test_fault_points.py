"""apps/ledger/faults.py without killing anything: `die` is replaced by a recorder, so
that what `reach` would kill, and when, can be seen (the kills themselves are
test_web_kills.py's)."""

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction

from apps.ledger import faults


@pytest.fixture
def deaths(monkeypatch) -> list:
    died = []
    monkeypatch.setattr(faults, "die", lambda: died.append("SIGKILL"))
    return died


def test_unset_nothing_dies(settings, deaths):
    settings.MW_FAULT_POINT = ""
    for point in faults.POINTS:
        faults.reach(point)
    assert deaths == []


def test_the_armed_point_kills_and_no_other(settings, deaths):
    settings.MW_FAULT_POINT, settings.MW_FAULT_RATE = "after_append", 1.0
    faults.reach("before_append")
    assert deaths == []
    faults.reach("after_append")
    assert deaths == ["SIGKILL"]
    faults.reach("before_commit")
    assert deaths == ["SIGKILL"]


def test_a_rate_of_zero_never_kills(settings, deaths):
    settings.MW_FAULT_POINT, settings.MW_FAULT_RATE = "before_append", 0.0
    for _ in range(50):
        faults.reach("before_append")
    assert deaths == []


def test_after_commit_kills_once_the_transaction_committed(settings, deaths, db,
                                                           django_capture_on_commit_callbacks):
    settings.MW_FAULT_POINT, settings.MW_FAULT_RATE = "after_commit", 1.0
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        faults.reach("before_append")
        faults.reach("after_append")
        faults.reach("before_commit")
        assert deaths == []  # not before the commit
    assert deaths == ["SIGKILL"]


def test_an_unknown_point_is_refused_by_name(settings, deaths):
    settings.MW_FAULT_POINT = "before_lunch"
    with pytest.raises(ImproperlyConfigured, match="MW_FAULT_POINT must be one of "
                                                   "before_append, after_append"):
        faults.reach("before_append")
