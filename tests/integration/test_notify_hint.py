"""A commit of events that never start a wait (a renewal, progress) sends no `notice`:
they are most of a busy Group's commits, and the next look reads past them."""

import pytest
from celery import current_app

from apps.notify import tasks


@pytest.fixture
def with_a_broker():
    eager = current_app.conf.task_always_eager
    current_app.conf.task_always_eager = False
    yield
    current_app.conf.task_always_eager = eager


def test_a_commit_that_cannot_start_a_wait_is_no_hint(monkeypatch, with_a_broker):
    hinted = []
    monkeypatch.setattr(tasks.HINTS, "put", hinted.append)
    tasks.hint("g1", [{"type": "lease.renewed"}, {"type": "work.progress_reported"}])
    assert hinted == []
    tasks.hint("g1", [{"type": "lease.renewed"}, {"type": "work.blocked"}])
    assert hinted == ["g1"]
