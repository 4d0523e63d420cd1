"""Archiving while commands append and readers page, with real threads on PostgreSQL:
the move takes the Group lock the pipeline takes, so the chain stays whole, sequences
stay gapless, and a reader never sees a hole (an event is in the archive or the online
log, never in neither)."""

import threading

import pytest
from django.db import connection

from apps.ledger import archive, feed, history, snapshots
from apps.ledger.models import ArchivedEvent, Event, Group
from apps.ledger.verify import verify_group
from mission_weave.core import chain
from mission_weave.protocol.errors import ProtocolError
from tests.support import World

pytestmark = pytest.mark.django_db(transaction=True)

WRITERS, COMMANDS, ARCHIVINGS = 3, 15, 6


def run_together(calls, timeout=120) -> None:
    barrier = threading.Barrier(len(calls))
    errors = []

    def run(call):
        try:
            barrier.wait(timeout=timeout)
            call()
        except BaseException as error:  # re-raised in the test's thread below
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(call,)) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    assert not any(t.is_alive() for t in threads), "a thread did not finish"
    if errors:
        raise errors[0]


def test_archiving_during_appends_and_reads_keeps_the_chain_whole():
    world = World("archive-race")
    group_id = world.group.id
    writers = [world.agent(f"c{n}-archive-race", roles=("coordinator",))
               for n in range(WRITERS)]
    owner = world.human("owner-archive-race")  # the MissionOwner of every Mission here
    writers[0].ok("mission.create", {"title": "seed", "ownerId": owner.principal,
                                     "coordinatorId": writers[0].principal})
    done = threading.Event()
    floors, pages = [], []

    def write(actor):
        def call():
            for n in range(COMMANDS):
                actor.ok("mission.create", {"title": f"m{n}", "ownerId": owner.principal,
                                            "coordinatorId": actor.principal})
        return call

    def archive_repeatedly():
        for _ in range(ARCHIVINGS):
            snapshot = snapshots.take(group_id)
            floors.append(archive.archive_through(snapshot, chunk=3))
        done.set()

    def read_whole_history():
        while not done.is_set():
            documents = list(history.history(group_id, chunk=4))
            assert [d["sequence"] for d in documents] == list(range(1, len(documents) + 1))
            assert chain.check_chain(documents) == []

    def page_the_feed():
        after = 0
        while not done.is_set() or after < feed.head(group_id):
            try:
                events = feed.events_after(group_id, after, 5)
            except ProtocolError as error:
                assert error.code == "CURSOR_TOO_OLD"
                after = error.details["snapshot"]["sequence"]  # resume from the snapshot
                continue
            assert [e["sequence"] for e in events] == list(range(after + 1,
                                                                 after + 1 + len(events)))
            pages.append(len(events))
            after = events[-1]["sequence"] if events else after

    run_together([write(actor) for actor in writers]
                 + [archive_repeatedly, read_whole_history, page_the_feed])

    group = Group.objects.get(id=group_id)
    assert group.head_sequence == 1 + WRITERS * COMMANDS
    assert floors == sorted(floors) and floors[-1] == group.online_floor > 0
    assert floors[0] < group.head_sequence  # archived while the writers were appending
    sequences = sorted(list(ArchivedEvent.objects.filter(group_id=group_id)
                            .values_list("sequence", flat=True))
                       + list(Event.objects.filter(group_id=group_id)
                              .values_list("sequence", flat=True)))
    assert sequences == list(range(1, group.head_sequence + 1))
    assert verify_group(group_id) == []
    assert sum(pages) > 0
