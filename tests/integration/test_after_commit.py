"""Every path that appends tells the subscribers of `ports.committed` what it committed
(apps/ledger/pipeline.py `_after_commit`): a command, the system's own decisions (a
session replacement's revocations) and the sweeper's prepared batches. The sweeper's path
once published its events without telling the subscribers."""

import pytest

from apps.ledger import ports
from apps.work import sweeper
from mission_weave.protocol.timefmt import parse_time
from tests.support import Scenario, later, now


@pytest.fixture
def seen(db, clock):
    """The event types each commit handed to a subscriber, in order."""
    heard = []

    def subscriber(group_id, documents):
        heard.extend(d["type"] for d in documents)

    ports.subscribe(subscriber)
    yield heard
    ports.committed.remove(subscriber)


def test_a_command_a_session_replacement_and_a_sweep_each_tell_the_subscribers(
        seen, clock, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        s = Scenario()
        item_id, started = s.running(s.w1)
    assert seen[-1] == "work.started"  # a command

    with django_capture_on_commit_callbacks(execute=True):
        assert s.w1.open_session().status_code == 201
    assert seen[-1] == "lease.revoked"  # the system's path

    with django_capture_on_commit_callbacks(execute=True):
        restarted = s.start(item_id, s.w1)
        later(clock, (parse_time(restarted["expiresAt"]) - now()).total_seconds())
        sweeper.sweep()
    assert seen[-1] == "lease.expired"  # the sweeper's prepared batch
