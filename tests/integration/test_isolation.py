"""§13.3 isolation: a Group's artifacts, Context Packages and events never reach a
member of another Group by default, and reusable knowledge crosses only by an
explicit, approved, permission-checked forwarding that leaves an event in both logs. The
approval is the Organization's recorded `artifact.approve_forwarding`, by a human owner of
the source Group."""

import threading

import pytest
from django.db import connection

from apps.identity import registry
from apps.ledger.models import Event
from mission_weave.protocol.timefmt import format_time
from tests.integration.artifact_helpers import (
    assert_verified,
    digest,
    package,
    publish,
    published,
)
from tests.support import Scenario, assert_error, now

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("blob_root")]


@pytest.fixture
def two(db):
    """Group A with a published artifact and a Context Package; Group B beside it."""
    a, b = Scenario(), Scenario()
    item_id, _ = a.running()
    a.artifact = published(a, item_id, b"A's confidential summary")
    a.w1.ok("context.publish", package(a.w1, a.mission_id, artifacts=[a.artifact]))
    return a, b


def get_in(actor, group_id: str, path: str):
    return actor.client.get(f"/api/v1/groups/{group_id}/{path}",
                            HTTP_AUTHORIZATION=f"Bearer {actor.token}")


def approve(source, target_group_id: str, name: str | None = None) -> dict:
    """The source Group's human owner approves the forwarding: its recorded event."""
    [event] = source.owner.ok("artifact.approve_forwarding", {
        "hash": name or source.artifact, "targetGroupId": target_group_id,
        "comment": "ORG-APPROVAL-42"})
    return event


def forward(actor, source, target_group_id: str, name: str | None = None, **fields):
    return actor.send("artifact.forward", {"hash": name or source.artifact,
                                           "targetGroupId": target_group_id}, **fields)


READS = ["artifacts/{h}", "artifacts/{h}/provenance", "context-packages/pkg-1",
         "context-packages/pkg-1/events", "events", "work-items", "missions"]


@pytest.mark.parametrize("path", READS)
def test_a_member_of_another_group_reads_nothing(two, path):
    a, b = two
    existing = get_in(b.w1, a.world.group.id, path.format(h=a.artifact))
    unknown = get_in(b.w1, a.world.group.id, path.format(h=digest(b"nothing")).replace(
        "pkg-1", "pkg-none"))

    error = assert_error(existing, 403, "NOT_A_MEMBER")
    assert existing.content == unknown.content  # the same answer: nothing is revealed
    assert a.artifact not in error["message"] and "pkg-1" not in error["message"]


def test_another_groups_artifacts_and_packages_are_unknown_in_ones_own(two):
    a, b = two

    artifact = b.w1.get(f"artifacts/{a.artifact}")
    provenance = b.w1.get(f"artifacts/{a.artifact}/provenance")
    packages = b.w1.get("context-packages/pkg-1")

    assert_error(artifact, 404, "NOT_FOUND")
    assert_error(provenance, 404, "NOT_FOUND")
    assert_error(packages, 404, "NOT_FOUND")


def test_a_package_or_manifest_citing_another_groups_artifact_is_refused(two):
    a, b = two
    item_id, _ = b.running()
    head = b.world.head

    cited_package = b.w1.send("context.publish", package(b.w1, b.mission_id,
                                                         artifacts=[a.artifact]))
    derived = publish(b, item_id, b"derived from A", sources=[a.artifact])

    assert_error(cited_package, 404, "NOT_FOUND")
    assert_error(derived, 404, "NOT_FOUND")
    assert b.world.head == head


def test_commands_naming_another_group_are_refused(two):
    a, b = two

    envelope = b.w1.envelope("context.publish", package(b.w1, b.mission_id))
    response = b.w1.post({**envelope, "groupId": a.world.group.id}, a.world.group.id)

    assert_error(response, 403, "NOT_A_MEMBER")


def test_forwarding_appends_an_event_in_both_groups(two):
    a, b = two
    registry.add_member(b.world.group, a.c.principal, ["coordinator"])
    approved = approve(a, b.world.group.id)
    before = b.world.head

    response = forward(a.c, a, b.world.group.id)

    assert response.status_code == 200, response.json()
    [sent] = response.json()["events"]
    assert sent["type"] == "artifact.forwarded" and sent["groupId"] == a.world.group.id
    assert sent["data"]["targetGroupId"] == b.world.group.id
    named = {"id": approved["data"]["approvalId"], "approvedBy": a.owner.principal,
             "approvedAt": approved["occurredAt"]}
    assert sent["data"]["approval"] == named
    [received] = Event.objects.filter(group_id=b.world.group.id, sequence__gt=before)
    assert received.type == "artifact.received" and received.command_id == sent["commandId"]
    assert received.actor == a.c.principal
    assert received.data["sourceGroupId"] == a.world.group.id
    assert received.data["manifest"]["hash"] == a.artifact
    assert received.data["approval"] == named
    assert received.prev_hash != "sha256:" + "0" * 64 and b.world.head == before + 1
    in_b = b.w1.get(f"artifacts/{a.artifact}").json()
    assert in_b["origin"] == "received" and in_b["receivedFrom"]["groupId"] == a.world.group.id
    in_a = a.w1.get(f"artifacts/{a.artifact}").json()
    assert in_a["forwardedTo"][0]["groupId"] == b.world.group.id
    blob = b.w1.client.get(f"/api/v1/blobs/{a.artifact}",
                           HTTP_AUTHORIZATION=f"Bearer {b.w1.token}")
    assert blob.status_code == 200 and b"".join(blob.streaming_content) == \
        b"A's confidential summary"
    assert_verified(a.world.group, b.world.group)


def test_a_forwarded_artifact_can_be_a_source_in_the_target(two):
    a, b = two
    registry.add_member(b.world.group, a.c.principal, ["coordinator"])
    approve(a, b.world.group.id)
    assert forward(a.c, a, b.world.group.id).status_code == 200
    item_id, _ = b.running()

    derived = published(b, item_id, b"built on A's summary", [a.artifact])
    graph = b.w1.get(f"artifacts/{derived}/provenance").json()

    assert [x["hash"] for x in graph["ancestors"]] == [a.artifact]
    assert graph["ancestors"][0]["origin"] == "received"
    assert_verified(b.world.group)


def test_forwarding_without_permission_is_refused_and_appends_nothing(two):
    a, b = two
    approve(a, b.world.group.id)
    approve(a, "grp_does_not_exist")
    heads = (a.world.head, b.world.head)
    unknown_group = forward(a.c, a, "grp_does_not_exist")
    not_a_member = forward(a.c, a, b.world.group.id)
    registry.add_member(b.world.group, a.c.principal, ["worker"])
    worker_there = forward(a.c, a, b.world.group.id)
    registry.add_member(b.world.group, a.c.principal, ["coordinator"])
    by_a_worker = forward(a.w1, a, b.world.group.id)
    unapproved = forward(a.c, a, "grp_elsewhere")
    free_text = a.c.send("artifact.forward", {
        "hash": a.artifact, "targetGroupId": b.world.group.id,
        "approval": {"approvedBy": a.owner.principal, "approvedAt": format_time(now())}})
    same_group = forward(a.c, a, a.world.group.id)
    unknown_artifact = forward(a.c, a, b.world.group.id, digest(b"nothing"))

    assert assert_error(unknown_group, 403, "NOT_A_MEMBER")["message"] == \
        assert_error(not_a_member, 403, "NOT_A_MEMBER")["message"]
    assert_error(worker_there, 403, "FORBIDDEN")
    assert_error(by_a_worker, 403, "FORBIDDEN")
    assert assert_error(unapproved, 403, "FORBIDDEN")["details"] == {
        "path": "body.targetGroupId", "missing": "artifact.forwarding_approved",
        "hash": a.artifact, "targetGroupId": "grp_elsewhere"}
    assert "approval" in assert_error(free_text, 400, "VALIDATION_ERROR")["message"]
    assert_error(same_group, 400, "VALIDATION_ERROR")
    assert_error(unknown_artifact, 404, "NOT_FOUND")
    assert (a.world.head, b.world.head) == heads


def test_restricted_artifacts_never_leave_their_group(two):
    a, b = two
    registry.add_member(b.world.group, a.c.principal, ["coordinator"])
    item_id, _ = a.running()
    secret = publish(a, item_id, b"restricted", classification="restricted")
    assert secret.status_code == 200

    response = forward(a.c, a, b.world.group.id, digest(b"restricted"))

    assert assert_error(response, 403, "FORBIDDEN")["details"]["classification"] == \
        "restricted"


def test_a_repeated_forwarding_is_answered_once_and_a_second_one_refused(two):
    a, b = two
    registry.add_member(b.world.group, a.c.principal, ["coordinator"])
    approve(a, b.world.group.id)
    envelope = a.c.envelope("artifact.forward", {"hash": a.artifact,
                                                 "targetGroupId": b.world.group.id})
    first = a.c.post(envelope)
    head = b.world.head

    repeated = a.c.post(envelope)
    again = forward(a.c, a, b.world.group.id)

    assert repeated.json()["duplicate"] is True
    assert repeated.json()["events"] == first.json()["events"]
    assert_error(again, 400, "VALIDATION_ERROR")
    assert b.world.head == head


@pytest.mark.django_db(transaction=True)
def test_forwardings_in_opposite_directions_at_once_do_not_deadlock():
    a, b = Scenario(), Scenario()
    for source, target in ((a, b), (b, a)):
        registry.add_member(target.world.group, source.c.principal, ["coordinator"])
        item_id, _ = source.running()
        source.artifacts = [published(source, item_id, f"{source.world.group.id}-{n}".encode())
                            for n in range(4)]
        for name in source.artifacts:
            approve(source, target.world.group.id, name)
    answers, barrier = [], threading.Barrier(2)

    def run(source, target):
        try:
            barrier.wait()
            for name in source.artifacts:
                answers.append(forward(source.c, source, target.world.group.id, name)
                               .status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=pair) for pair in ((a, b), (b, a))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert not any(thread.is_alive() for thread in threads)
    assert answers == [200] * 8
    for group in (a.world.group, b.world.group):
        received = Event.objects.filter(group_id=group.id, type="artifact.received").count()
        assert received == 4
    assert_verified(a.world.group, b.world.group)
