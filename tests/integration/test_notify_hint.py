"""A commit of events that never start a wait (a renewal, progress) sends no `notice`:
they are most of a busy Group's commits, and the next look reads past them."""

from apps.notify import tasks
from mission_weave.core.evolve import MUTATORS


def test_a_commit_that_cannot_start_a_wait_is_no_hint(monkeypatch, broker):
    hinted = []
    monkeypatch.setattr(tasks.HINTS, "put", hinted.append)
    tasks.hint("g1", [{"type": "lease.renewed"}, {"type": "work.progress_reported"}])
    assert hinted == []
    tasks.hint("g1", [{"type": "lease.renewed"}, {"type": "work.blocked"}])
    assert hinted == ["g1"]


def test_every_quiet_type_is_an_event_type():
    assert tasks.QUIET - set(MUTATORS) == set()
