"""The inbox without a server: dedupe by Event ID, in-order processing, buffering ahead
of a gap, a durable Cursor that never moves over a gap, restart, CURSOR_TOO_OLD."""

import asyncio
import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from mission_weave.protocol import canonical
from mission_weave.sdk.inbox import CursorGap, CursorStore, GroupStream, Inbox, IntegrityError
from tests.sdk.feeds import AUTHORITY_KEY_ID, FakeFeed, chain

G = "grp_t"


def make_inbox(feed, store, seen: list, snapshots: list | None = None, fail_on=None):
    async def handle(event):
        if fail_on is not None and event["sequence"] == fail_on:
            raise RuntimeError("the application failed")
        seen.append(event["sequence"])

    async def on_snapshot(group_id, document):
        snapshots.append((group_id, document))

    return Inbox(feed, [G], handle, store, on_snapshot if snapshots is not None else None,
                 transport="http")


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
    assert feed.requests[0] == 5


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


def test_acks_follow_processing_and_name_the_processed_cursor(tmp_path):
    events = chain(4)
    seen = []
    inbox = make_inbox(FakeFeed(events), CursorStore(":memory:"), seen)
    socket = RecordingSocket(seen)
    inbox._ws = socket

    async def go():
        for event in (events[1], events[0], events[3], events[2]):
            await inbox._frame(socket, {"op": "EVENT", "event": event})
    asyncio.run(go())

    acks = [(frame["cursors"], handled) for frame, handled in socket.frames]
    assert acks == [([{"groupId": G, "sequence": 2}], [1, 2]),
                    ([{"groupId": G, "sequence": 4}], [1, 2, 3, 4])]


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
