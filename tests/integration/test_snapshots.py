"""Snapshots and the archive (PROTOCOL §4, §7 "Snapshots"): a signed snapshot equals
the replayed projections; archiving moves events out of the online log without losing
any; a cursor below the floor gets CURSOR_TOO_OLD with a snapshot it can fetch and check;
nothing but archiving can delete an event."""

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, connection, transaction
from django.test import Client

from apps.ledger import archive, history, retention, snapshots, tasks, verify
from apps.ledger.models import ArchivedEvent, Event, Group, Snapshot
from apps.work import work_store
from mission_weave.core import chain
from mission_weave.protocol import canonical
from tests.support import Scenario, World, assert_error

pytestmark = pytest.mark.django_db


def mw_snapshot(*args) -> dict:
    out = StringIO()
    call_command("mw_snapshot", *args, stdout=out)
    return json.loads(out.getvalue())


def authority_key():
    keys = Client().get("/api/v1/authority").json()["keys"]
    return {k["keyId"]: canonical.public_key_from_b64url(k["publicKey"]) for k in keys}


def busy(s: Scenario) -> str:
    """Some history: an item offered, accepted, started, plus a second authorized item."""
    item_id, _ = s.running()
    s.authorize()
    return item_id


def test_a_snapshot_is_signed_by_the_authority_and_equals_the_replayed_projections(scenario):
    s = scenario
    busy(s)
    group_id, head = s.world.group.id, s.world.head

    result = mw_snapshot(group_id)

    assert result["sequence"] == head
    response = s.w1.get(f"snapshots/{result['snapshotId']}")
    assert response.status_code == 200
    document = response.json()
    assert set(document) == {"id", "groupId", "sequence", "hash", "state", "createdAt",
                             "signature"}
    signature = document["signature"]
    assert signature["alg"] == "Ed25519"
    assert canonical.verify(document, authority_key()[signature["keyId"]])
    tampered = {**document, "sequence": head - 1}
    assert not canonical.verify(tampered, authority_key()[signature["keyId"]])
    assert document["hash"] == Event.objects.get(group_id=group_id, sequence=head).hash
    assert document["state"] == verify.state_document(work_store.load_all(group_id))
    assert document["state"] == verify.state_document(verify.replay(group_id)[0])
    assert len(document["state"]["workItems"]) == 2
    assert mw_snapshot(group_id)["snapshotId"] == result["snapshotId"]  # same sequence: same one


def test_a_snapshot_at_an_earlier_sequence_is_the_state_then(scenario):
    s = scenario
    group_id = s.world.group.id
    s.authorize()
    early = mw_snapshot(group_id)
    before = Snapshot.objects.get(id=early["snapshotId"])
    busy(s)

    later = snapshots.take(group_id)  # builds on the earlier snapshot, not from sequence 1

    assert later.sequence == s.world.head > before.sequence
    replayed = verify.state_document(work_store.load_all(group_id))
    assert snapshots.document(later)["state"] == replayed
    assert len(snapshots.document(before)["state"]["workItems"]) == 1
    assert verify.verify_group(group_id) == []  # each snapshot checked against the replay


def test_archiving_moves_events_and_an_old_cursor_gets_the_snapshot(scenario):
    s = scenario
    busy(s)
    group_id, head = s.world.group.id, s.world.head

    result = mw_snapshot(group_id, "--archive")

    assert result["onlineFloor"] == head == result["sequence"]
    assert Event.objects.filter(group_id=group_id).count() == 0
    archived = list(history.archived_after(group_id, 0, 1000))
    assert [e["sequence"] for e in archived] == list(range(1, head + 1))
    assert history.floor(group_id) == head

    error = assert_error(s.w1.get("events?after=0"), 410, "CURSOR_TOO_OLD")
    reference = error["details"]["snapshot"]
    assert set(reference) == {"id", "groupId", "sequence", "hash", "url", "signature"}
    assert (reference["id"], reference["sequence"]) == (result["snapshotId"], head)
    assert reference["url"] == f"/api/v1/groups/{group_id}/snapshots/{result['snapshotId']}"
    assert_error(s.w1.get(f"events?after={head - 1}"), 410, "CURSOR_TOO_OLD")

    document = s.w1.client.get(reference["url"],
                               HTTP_AUTHORIZATION=f"Bearer {s.w1.token}").json()
    assert document["signature"] == reference["signature"]
    assert document["hash"] == reference["hash"] == archived[-1]["hash"]
    assert canonical.verify(document, authority_key()[document["signature"]["keyId"]])

    page = s.w1.get(f"events?after={head}")
    assert page.status_code == 200
    assert page.json() == {"events": [], "headSequence": head}


def test_an_outsider_gets_not_a_member_for_snapshots_the_archive_and_old_cursors(scenario):
    s = scenario
    busy(s)
    group_id = s.world.group.id
    snapshot_id = mw_snapshot(group_id, "--archive")["snapshotId"]
    outsider = World().agent("outsider")

    for path in (f"snapshots/{snapshot_id}", "archive?after=0", "events?after=0",
                 "snapshots/snap_nonexistent"):
        response = outsider.client.get(f"/api/v1/groups/{group_id}/{path}",
                                       HTTP_AUTHORIZATION=f"Bearer {outsider.token}")
        error = assert_error(response, 403, "NOT_A_MEMBER")
        assert error["details"] == {}
    assert_error(s.w1.get("snapshots/snap_nonexistent"), 404, "NOT_FOUND")


def test_after_archiving_commands_append_gaplessly_and_mw_verify_passes(scenario):
    s = scenario
    item_id = busy(s)
    group_id = s.world.group.id
    renew = s.w1.envelope("lease.renew", {}, **s.lease_fields(item_id))
    first_answer = s.w1.post(renew).json()
    floor = mw_snapshot(group_id, "--archive")["onlineFloor"]

    s.authorize()
    s.c.ok("work.cancel", {"reason": "no longer needed"}, workItemId=s.authorize())

    online = list(Event.objects.filter(group_id=group_id).order_by("sequence")
                  .values_list("sequence", flat=True))
    assert online == list(range(floor + 1, s.world.head + 1))
    assert [e["sequence"] for e in s.w1.get(f"events?after={floor}").json()["events"]] == online
    assert verify.verify_group(group_id) == []
    out = StringIO()
    call_command("mw_verify", group_id, stdout=out)
    report = json.loads(out.getvalue())
    assert (report["ok"], report["events"], report["archivedEvents"]) == (True, s.world.head,
                                                                          floor)
    # A command repeated after its events were archived still gets its first answer.
    again = s.w1.post(renew).json()
    assert again["duplicate"] is True and again["events"] == first_answer["events"]
    # The audit trail reaches into the archive.
    audit = s.c.get(f"work-items/{item_id}/audit").json()["events"]
    assert [e["type"] for e in audit][:2] == ["work.authorized", "work.offered"]
    assert all(e["sequence"] <= floor for e in audit)


def test_the_archive_is_hash_chained_and_paged(scenario):
    s = scenario
    busy(s)
    group_id, head = s.world.group.id, s.world.head
    mw_snapshot(group_id, "--archive")

    first = s.c.get("archive?after=0&limit=3").json()
    rest = s.c.get("archive?after=3&limit=1000").json()

    assert first["onlineFloor"] == head
    events = first["events"] + rest["events"]
    assert [e["sequence"] for e in events] == list(range(1, head + 1))
    assert chain.check_chain(events) == []
    assert_error(s.c.get("archive?after=-1"), 400, "VALIDATION_ERROR")


def test_a_plain_delete_or_update_of_the_log_is_still_refused(scenario):
    s = scenario
    busy(s)
    group_id = s.world.group.id
    statements = [
        ("DELETE FROM ledger_event WHERE group_id = %s", [group_id]),
        ("UPDATE ledger_event SET type = 'x' WHERE group_id = %s", [group_id]),
    ]
    for sql, params in statements:
        with pytest.raises(DatabaseError, match="append-only"):
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(sql, params)
    # Asking for the archiving path is not enough: the rows must be in the archive, under
    # the floor.
    with pytest.raises(DatabaseError, match="append-only"):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT set_config('mw.archiving', 'on', true)")
            cursor.execute("UPDATE ledger_group SET online_floor = head_sequence WHERE id = %s",
                           [group_id])
            cursor.execute("DELETE FROM ledger_event WHERE group_id = %s", [group_id])
    assert Event.objects.filter(group_id=group_id).count() == s.world.head

    mw_snapshot(group_id, "--archive")
    for sql in ("DELETE FROM ledger_archivedevent WHERE group_id = %s",
                "UPDATE ledger_archivedevent SET type = 'x' WHERE group_id = %s"):
        with pytest.raises(DatabaseError, match="append-only"):
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(sql, [group_id])
    assert ArchivedEvent.objects.filter(group_id=group_id).count() == s.world.head
    with pytest.raises(TypeError):
        ArchivedEvent.objects.filter(group_id=group_id).delete()


def test_mw_snapshot_refuses_bad_input_and_changes_nothing(scenario):
    s = scenario
    group_id, head = s.world.group.id, s.world.head
    empty = World().group.id

    for args, words in (((f"grp_nope_{head}",), "NOT_FOUND"), ((empty,), "no events"),
                        ((group_id, "--sequence", str(head + 1)), "between 1"),
                        ((group_id, "--sequence", "0"), "between 1")):
        with pytest.raises(CommandError, match=words):
            mw_snapshot(*args)
    assert not Snapshot.objects.exists()
    assert Group.objects.get(id=group_id).online_floor == 0


def test_archiving_in_chunks_raises_the_floor_step_by_step_and_is_idempotent(scenario):
    s = scenario
    busy(s)
    group_id, head = s.world.group.id, s.world.head
    snapshot = snapshots.take(group_id, head - 2)

    assert archive.archive_through(snapshot, chunk=2) == head - 2
    assert archive.archive_through(snapshot, chunk=2) == head - 2

    assert Event.objects.filter(group_id=group_id).count() == 2
    assert verify.verify_group(group_id) == []


def test_the_retention_policy_archives_only_groups_over_the_limit(scenario, settings):
    s = scenario
    busy(s)
    small = Scenario()
    big_id, small_id = s.world.group.id, small.world.group.id
    big_head, small_head = s.world.head, small.world.head
    settings.MW_RETENTION_ONLINE_EVENTS = small_head  # the small Group is exactly at it

    archived = tasks.retention()

    assert archived == {big_id: big_head - small_head}
    assert Event.objects.filter(group_id=big_id).count() == small_head
    assert history.floor(small_id) == 0 and not Snapshot.objects.filter(group_id=small_id)
    assert tasks.retention() == {}  # within the policy now
    s.authorize()
    assert tasks.retention() == {big_id: s.world.head - small_head}
    assert verify.verify_group(big_id) == [] and verify.verify_group(small_id) == []
    settings.MW_RETENTION_ONLINE_EVENTS = 0  # off
    s.authorize()
    assert tasks.retention() == {}
    assert settings.CELERY_BEAT_SCHEDULE["retention"]["task"] == tasks.retention.name


def test_the_archive_point_keeps_the_newest_events():
    assert retention.archive_point(head=150, floor=0, keep=100) == 50
    assert retention.archive_point(head=150, floor=50, keep=100) is None
    assert retention.archive_point(head=100, floor=0, keep=100) is None
    assert retention.archive_point(head=150, floor=0, keep=0) is None
