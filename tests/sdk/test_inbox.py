"""The inbox without a server: dedupe by Event ID, in-order processing, buffering ahead
of a gap, a durable Cursor that never moves over a gap, restart, CURSOR_TOO_OLD, and a
stored Cursor from another log (a reset server) starting over from sequence 0."""

import asyncio
import json
import logging
import sqlite3

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from mission_weave.protocol import canonical
from mission_weave.sdk.inbox import CursorGap, CursorStore, GroupStream, Inbox, IntegrityError
from tests.sdk.feeds import AUTHORITY_KEY_ID, FakeFeed, chain

G = "grp_t"


def make_inbox(feed, store, seen: list, snapshots: list | None = None, fail_on=None,
               restarts: list | None = None):
    async def handle(event):
        if fail_on is not None and event["sequence"] == fail_on:
            raise RuntimeError("the application failed")
        seen.append(event["sequence"])

    async def on_snapshot(group_id, document):
        snapshots.append((group_id, document))

    async def on_restart(group_id):
        restarts.append((group_id, list(seen)))

    return Inbox(feed, [G], handle, store, on_snapshot if snapshots is not None else None,
                 on_restart=on_restart if restarts is not None else None, transport="http")


def push(inbox, events):
    """Deliver events as WebSocket EVENT frames (no socket: ACKs are skipped)."""
    async def go():
        for event in events:
            await inbox._frame(None, {"op": "EVENT", "event": event})
    asyncio.run(go())


def test_out_of_order_and_duplicate_frames_are_processed_once_in_order(tmp_path):
    events = chain(5)
    seen = []
    store = CursorStore(tmp_path / "c.sqlite3")
    inbox = make_inbox(FakeFeed(events), store, seen)

    push(inbox, [events[2], events[0], events[0], events[1], events[4], events[3], events[1]])

    assert seen == [1, 2, 3, 4, 5]
    assert inbox.streams[G].duplicates == 2
    assert store.get(G) == (5, events[4]["hash"])


def test_the_cursor_never_moves_over_a_gap_and_the_gap_is_filled_over_http(tmp_path):
    events = chain(6)
    seen = []
    store = CursorStore(tmp_path / "c.sqlite3")
    inbox = make_inbox(FakeFeed(events), store, seen)

    push(inbox, [events[0], events[2], events[3], events[5]])

    assert seen == [1]
    assert store.get(G)[0] == 1
    assert inbox.streams[G].has_gap
    assert sorted(inbox.streams[G].pending) == [3, 4, 6]

    asyncio.run(inbox._fill_gaps())

    assert seen == [1, 2, 3, 4, 5, 6]
    assert store.get(G)[0] == 6
    assert not inbox.streams[G].has_gap


def test_the_cursor_store_refuses_a_jump_and_survives_a_reopen(tmp_path):
    path = tmp_path / "c.sqlite3"
    store = CursorStore(path)
    store.advance(G, 1, "sha256:a")
    with pytest.raises(CursorGap):
        store.advance(G, 3, "sha256:c")
    store.close()

    assert CursorStore(path).get(G) == (1, "sha256:a")


def test_a_restarted_inbox_resumes_after_its_cursor(tmp_path):
    events = chain(8)
    path = tmp_path / "c.sqlite3"
    first = []
    asyncio.run(make_inbox(FakeFeed(events[:5]), CursorStore(path), first).catch_up(G))
    second = []
    feed = FakeFeed(events)
    asyncio.run(make_inbox(feed, CursorStore(path), second).catch_up(G))

    assert first == [1, 2, 3, 4, 5]
    assert second == [6, 7, 8]
    assert feed.requests[:2] == [4, 5]  # the event at the Cursor (checked), then after it


def test_an_event_the_application_failed_on_is_not_acknowledged_and_comes_again(tmp_path):
    events = chain(4)
    path = tmp_path / "c.sqlite3"
    seen = []
    with pytest.raises(RuntimeError):
        asyncio.run(make_inbox(FakeFeed(events), CursorStore(path), seen, fail_on=3).catch_up(G))
    assert CursorStore(path).get(G)[0] == 2

    asyncio.run(make_inbox(FakeFeed(events), CursorStore(path), seen).catch_up(G))

    assert seen == [1, 2, 3, 4]


def test_a_tampered_event_or_a_broken_chain_stops_the_inbox(tmp_path):
    events = chain(3)
    tampered = {**events[1], "data": {"n": 99}}
    inbox = make_inbox(FakeFeed(events), CursorStore(tmp_path / "a.sqlite3"), [])
    with pytest.raises(IntegrityError):
        push(inbox, [tampered])

    foreign = chain(2, prev="sha256:" + "1" * 64)  # a valid event hash, the wrong prevHash
    stream = GroupStream(G, done=1, last_hash=events[0]["hash"])
    stream.add(foreign[1])
    with pytest.raises(IntegrityError):
        stream.next_ready()


def test_cursor_too_old_resumes_from_the_verified_snapshot(tmp_path):
    events = chain(15)
    feed = FakeFeed(events, floor=10)
    seen, snapshots = [], []
    store = CursorStore(tmp_path / "c.sqlite3")

    asyncio.run(make_inbox(feed, store, seen, snapshots).catch_up(G))

    assert snapshots == [(G, feed.snapshot_doc)]
    assert seen == [11, 12, 13, 14, 15]
    assert store.get(G)[0] == 15


@pytest.mark.parametrize("forge", ["signature", "hash"])
def test_a_snapshot_that_does_not_verify_is_refused_and_the_cursor_stays(tmp_path, forge):
    feed = FakeFeed(chain(12), floor=10)
    if forge == "signature":
        feed.snapshot_doc = canonical.sign(canonical.without(feed.snapshot_doc, "signature"),
                                           Ed25519PrivateKey.generate(), AUTHORITY_KEY_ID)
    else:
        feed.reference["hash"] = "sha256:" + "0" * 64
    seen, snapshots = [], []
    store = CursorStore(tmp_path / "c.sqlite3")

    with pytest.raises(IntegrityError):
        asyncio.run(make_inbox(feed, store, seen, snapshots).catch_up(G))

    assert snapshots == [] and seen == []
    assert store.get(G)[0] == 0


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_any_arrival_order_with_duplicates_is_processed_exactly_once_in_order(data):
    count = data.draw(st.integers(1, 30))
    events = chain(count)
    arrivals = data.draw(st.lists(st.sampled_from(events), max_size=3 * count))
    seen = []
    store = CursorStore(":memory:")
    inbox = make_inbox(FakeFeed(events), store, seen)

    push(inbox, arrivals)
    processed = list(seen)
    asyncio.run(inbox.catch_up(G))  # what never arrived comes over HTTP

    assert processed == list(range(1, len(processed) + 1))  # a prefix, never past a gap
    assert seen == list(range(1, count + 1))
    assert store.get(G)[0] == count


def test_events_after_a_snapshot_must_chain_to_its_hash(tmp_path):
    feed = FakeFeed(chain(12), floor=10)
    wrong = "sha256:" + "2" * 64
    feed.snapshot_doc = canonical.sign({**canonical.without(feed.snapshot_doc, "signature"),
                                        "hash": wrong}, feed.authority, AUTHORITY_KEY_ID)
    feed.reference.update(hash=wrong, signature=feed.snapshot_doc["signature"])
    seen = []

    with pytest.raises(IntegrityError):
        asyncio.run(make_inbox(feed, CursorStore(":memory:"), seen, []).catch_up(G))

    assert seen == []


class RecordingSocket:
    def __init__(self, seen):
        self.seen, self.frames = seen, []

    async def send(self, text):
        self.frames.append((json.loads(text), list(self.seen)))


def test_acks_follow_processing_coalesced_and_name_the_processed_cursor(tmp_path):
    from mission_weave.sdk.inbox import ACK_SECONDS

    events = chain(5)
    seen = []
    inbox = make_inbox(FakeFeed(events), CursorStore(":memory:"), seen)
    socket = RecordingSocket(seen)
    inbox._ws = socket

    async def go():
        for event in (events[1], events[0], events[3], events[2]):
            await inbox._frame(socket, {"op": "EVENT", "event": event})
        await asyncio.sleep(ACK_SECONDS * 3)
        await inbox._frame(socket, {"op": "EVENT", "event": events[4]})
        await asyncio.sleep(ACK_SECONDS * 3)
    asyncio.run(go())

    # One frame for the burst, after all of it was processed; then one for the next.
    acks = [(frame["cursors"], handled) for frame, handled in socket.frames]
    assert acks == [([{"groupId": G, "sequence": 4}], [1, 2, 3, 4]),
                    ([{"groupId": G, "sequence": 5}], [1, 2, 3, 4, 5])]


def test_a_cursor_too_old_error_frame_resumes_from_the_snapshot_and_resubscribes(tmp_path):
    events = chain(12)
    feed = FakeFeed(events, floor=10)
    seen, snapshots = [], []
    inbox = make_inbox(feed, CursorStore(":memory:"), seen, snapshots)
    socket = RecordingSocket(seen)
    inbox._ws = socket

    async def go():
        await inbox._frame(socket, {"op": "ERROR", "code": "CURSOR_TOO_OLD", "groupId": G,
                                    "message": "too old",
                                    "details": {"snapshot": feed.reference}})
        for event in events[10:]:
            await inbox._frame(socket, {"op": "EVENT", "event": event})
    asyncio.run(go())

    assert snapshots == [(G, feed.snapshot_doc)]
    assert socket.frames[0][0] == {"op": "SUBSCRIBE", "groupId": G, "afterSequence": 10}
    assert seen == [11, 12]


# --- a stored Cursor from another log (the server's database was reset) ------------------

def warnings_of(caplog) -> list:
    return [r.getMessage() for r in caplog.records
            if r.name == "mission_weave.sdk.inbox" and r.levelno == logging.WARNING]


def test_a_cursor_past_the_head_starts_over_from_sequence_0_with_one_warning(tmp_path, caplog):
    caplog.set_level(logging.INFO, "mission_weave.sdk.inbox")
    path = tmp_path / "agent.cursors.sqlite3"
    old = chain(91, prev="sha256:" + "9" * 64)  # the log before the reset
    store = CursorStore(path)
    store.reset(G, 91, old[-1]["hash"])
    store.close()
    events = chain(12)  # the Group's log after the reset
    seen, restarts = [], []
    store = CursorStore(path)

    asyncio.run(make_inbox(FakeFeed(events), store, seen, restarts=restarts).catch_up(G))

    assert restarts == [(G, [])]  # the application dropped its state before the replay
    assert seen == list(range(1, 13))
    assert store.get(G) == (12, events[-1]["hash"])
    [warning] = warnings_of(caplog)
    assert f"Group {G}" in warning and "sequence 91" in warning and "head is 12" in warning
    assert "starting over from the log at sequence 0" in warning
    assert str(path) in warning


def test_a_cursor_whose_event_has_another_hash_starts_over(tmp_path, caplog):
    path = tmp_path / "c.sqlite3"
    before = chain(12)
    asyncio.run(make_inbox(FakeFeed(before), CursorStore(path), []).catch_up(G))
    # After the reset the log is longer than the Cursor, but it is another log.
    after = [{**e, "data": {"reset": True, "n": e["sequence"]}} for e in chain(20)]
    after = rechain(after)
    seen, restarts = [], []

    asyncio.run(make_inbox(FakeFeed(after), CursorStore(path), seen, restarts=restarts)
                .catch_up(G))

    assert len(restarts) == 1
    assert seen == list(range(1, 21))
    assert CursorStore(path).get(G) == (20, after[-1]["hash"])
    [warning] = warnings_of(caplog)
    assert "sequence 12" in warning and "head is 20" in warning and "hash" in warning


def test_a_matching_cursor_resumes_without_a_warning(tmp_path, caplog):
    path = tmp_path / "c.sqlite3"
    events = chain(10)
    asyncio.run(make_inbox(FakeFeed(events[:6]), CursorStore(path), []).catch_up(G))
    seen, restarts = [], []

    asyncio.run(make_inbox(FakeFeed(events), CursorStore(path), seen, restarts=restarts)
                .catch_up(G))

    assert seen == [7, 8, 9, 10] and restarts == []
    assert warnings_of(caplog) == []


def test_an_old_store_without_hashes_is_checked_by_the_head_and_takes_the_servers_hash(
        tmp_path, caplog):
    path = tmp_path / "old.cursors.sqlite3"
    db = sqlite3.connect(path)  # the schema before the hash was kept beside the Cursor
    db.execute("CREATE TABLE cursors (group_id TEXT PRIMARY KEY, sequence INTEGER NOT NULL)")
    db.execute("INSERT INTO cursors VALUES (?, 5)", (G,))
    db.commit()
    db.close()
    events = chain(8)
    store = CursorStore(path)
    assert store.get(G) == (5, None)
    seen = []
    inbox = make_inbox(FakeFeed(events), store, seen)

    asyncio.run(inbox.check_cursor(G))
    assert store.get(G) == (5, events[4]["hash"])  # now the chain check has a start
    asyncio.run(inbox.catch_up(G))

    assert seen == [6, 7, 8] and warnings_of(caplog) == []

    db = sqlite3.connect(path)  # and an old store past the head starts over
    db.execute("UPDATE cursors SET sequence = 91, hash = NULL")
    db.commit()
    db.close()
    seen.clear()
    asyncio.run(make_inbox(FakeFeed(events), CursorStore(path), seen).catch_up(G))
    assert seen == list(range(1, 9))
    assert len(warnings_of(caplog)) == 1


class ResettingFeed(FakeFeed):
    """A server that goes away once (every request fails) and comes back with a new log."""

    def __init__(self, before, after):
        super().__init__(before)
        self.after, self.down = after, 0

    def go_down_and_reset(self):
        self.down = 2  # the next two requests fail, then the new log answers

    async def events(self, group_id, after, limit):
        if self.down:
            self.down -= 1
            if not self.down:
                self.log = self.after
            raise OSError("connection refused")
        return await super().events(group_id, after, limit)


def test_a_server_reset_while_the_inbox_runs_is_found_after_the_outage(tmp_path, caplog):
    before = chain(12)
    after = rechain([{**e, "data": {"reset": True}} for e in chain(30)])
    feed = ResettingFeed(before, after)
    seen, restarts = [], []
    inbox = make_inbox(feed, CursorStore(tmp_path / "c.sqlite3"), seen, restarts=restarts)
    inbox.poll_seconds = 0.01

    async def scenario():
        stop = asyncio.Event()
        task = asyncio.create_task(inbox.run(stop))
        await asyncio.wait_for(inbox.caught_up.wait(), 5)
        assert seen == list(range(1, 13))
        feed.go_down_and_reset()
        while inbox.cursor(G) != 30 or not restarts:
            await asyncio.sleep(0.01)
        stop.set()
        await asyncio.wait_for(task, 5)
    asyncio.run(asyncio.wait_for(scenario(), 10))

    assert restarts == [(G, list(range(1, 13)))]
    assert seen == list(range(1, 13)) + list(range(1, 31))
    assert len(warnings_of(caplog)) == 1


def test_a_shorter_log_seen_while_polling_starts_over_without_an_outage(tmp_path):
    store = CursorStore(tmp_path / "c.sqlite3")
    feed = FakeFeed(chain(12))
    seen, restarts = [], []
    inbox = make_inbox(feed, store, seen, restarts=restarts)
    asyncio.run(inbox.catch_up(G))
    feed.log = rechain([{**e, "data": {"reset": True}} for e in chain(3)])

    asyncio.run(inbox.catch_up(G))  # no check due: the page's head gives it away

    assert len(restarts) == 1
    assert seen == [*list(range(1, 13)), 1, 2, 3]


def rechain(events: list) -> list:
    """The same events with their hash chain recomputed (after editing their data)."""
    prev, out = canonical.ZERO_HASH, []
    for event in events:
        event = {**canonical.without(event, "hash"), "prevHash": prev}
        event["hash"] = prev = canonical.content_hash(event)
        out.append(event)
    return out
