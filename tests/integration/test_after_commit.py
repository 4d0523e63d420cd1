"""Every path that appends tells the subscribers of `ports.committed` what it committed
(apps/ledger/pipeline.py: one row builder, `_chained`, and one after-commit routine,
`_after_commit`): a command alone, commands in a group-commit batch, a forwarding's event
in the other Group's log, the system's own decisions (a session replacement's
revocations) and the sweeper's prepared batches. The sweeper's path once published its
events without telling the subscribers."""

import pytest

from apps.identity import registry
from apps.ledger import pipeline, ports
from apps.work import sweeper
from mission_weave.protocol.timefmt import parse_time
from tests.integration.artifact_helpers import published
from tests.support import Scenario, later, now


@pytest.fixture
def seen(db, clock):
    """(group id, event type) of each event a commit handed to a subscriber, in order."""
    heard = []

    def subscriber(group_id, documents):
        heard.extend((group_id, d["type"]) for d in documents)

    ports.subscribe(subscriber)
    yield heard
    ports.unsubscribe(subscriber)


def types(seen: list) -> list:
    return [type_ for _group_id, type_ in seen]


def test_a_command_a_session_replacement_and_a_sweep_each_tell_the_subscribers(
        seen, clock, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        s = Scenario()
        item_id, _started = s.running(s.w1)
    assert types(seen)[-1] == "work.started"  # a command

    with django_capture_on_commit_callbacks(execute=True):
        assert s.w1.open_session().status_code == 201
    assert types(seen)[-1] == "lease.revoked"  # the system's path

    with django_capture_on_commit_callbacks(execute=True):
        restarted = s.start(item_id, s.w1)
        later(clock, (parse_time(restarted["expiresAt"]) - now()).total_seconds())
        sweeper.sweep()
    assert types(seen)[-1] == "lease.expired"  # the sweeper's prepared batch


@pytest.mark.django_db(transaction=True)
def test_a_group_commit_batch_tells_the_subscribers(seen, settings, monkeypatch):
    # Outside a test's transaction a command goes through group commit (a batch of one
    # here, led by this thread); its events reach the subscribers once the batch commits.
    settings.MW_GROUP_COMMIT = True
    batches, together = [], pipeline._together
    monkeypatch.setattr(pipeline, "_together",
                        lambda batch: (batches.append(len(batch)), together(batch)))
    pipeline._committer.cache_clear()
    try:
        s = Scenario()
        item_id = s.authorize()
        s.offer(item_id, s.w1)
    finally:
        pipeline._committer.cache_clear()

    assert batches and set(batches) == {1}
    assert (s.world.group.id, "work.authorized") in seen
    assert seen[-1] == (s.world.group.id, "work.offered")


@pytest.mark.usefixtures("blob_root")
def test_a_forwarding_tells_the_subscribers_of_both_groups_events(
        seen, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        a, b = Scenario(), Scenario()
        item_id, _ = a.running()
        name = published(a, item_id, b"A's summary")
        registry.add_member(b.world.group, a.c.principal, ["coordinator"])
        a.owner.ok("artifact.approve_forwarding", {
            "hash": name, "targetGroupId": b.world.group.id, "comment": "ORG-APPROVAL-42"})
    del seen[:]

    with django_capture_on_commit_callbacks(execute=True):
        a.c.ok("artifact.forward", {"hash": name, "targetGroupId": b.world.group.id})

    assert sorted(seen) == sorted([(a.world.group.id, "artifact.forwarded"),
                                   (b.world.group.id, "artifact.received")])
