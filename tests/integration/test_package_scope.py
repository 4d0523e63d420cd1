"""Rule 14 of the Trust issue over HTTP (§13.3 "Group content MUST NOT enter another
Mission's context by default"): within a Group, a Context Package of one Mission cites
only that Mission's events and artifacts, plus artifacts published as reusable (public,
with sources, approved by an owner for this Group) or received by an approved
forwarding."""

import pytest

from apps.identity import registry
from tests.integration.artifact_helpers import assert_verified, package, published
from tests.support import Scenario, assert_error

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("blob_root")]


@pytest.fixture
def s(db):
    """Mission one (`s.first`) with an artifact and Mission two (`s.second`) with its
    own artifact, in one Group; the Scenario's helpers work in Mission two."""
    s = Scenario()
    s.first = s.mission_id
    item_id, _ = s.running()
    s.own = published(s, item_id, b"mission one's notes")
    s.first_head = s.world.head
    s.second = s.c.ok("mission.create", {"title": "Another", "ownerId": s.owner.principal,
                                         "coordinatorId": s.c.principal})[0]["missionId"]
    s.mission_id = s.second
    s.second_item, _ = s.running()
    s.foreign = published(s, s.second_item, b"mission two's notes")
    return s


def test_a_package_of_one_mission_cites_its_own_artifacts_and_events(s):
    s.w1.ok("context.publish", package(s.w1, s.first, artifacts=[s.own],
                                       events=(1, s.first_head)))
    assert_verified(s.world.group)


def test_another_missions_artifact_is_refused(s):
    head = s.world.head

    response = s.w1.send("context.publish", package(s.w1, s.first, artifacts=[s.own, s.foreign],
                                                    events=(1, s.first_head)))

    error = assert_error(response, 400, "VALIDATION_ERROR")  # as Evidence and sources cite
    assert error["details"] == {"path": "body.artifacts[1]", "hash": s.foreign}
    assert s.world.head == head


def test_another_missions_events_are_refused(s):
    response = s.w1.send("context.publish", package(s.w1, s.first, events=(1, s.world.head)))

    error = assert_error(response, 403, "FORBIDDEN")
    assert error["details"] == {"path": "body.sourceEvents", "sequence": s.first_head + 1,
                                "missionId": s.second}


def test_a_public_provenance_bearing_approved_artifact_is_reusable(s):
    reusable = published(s, s.second_item, b"the glossary, for everyone", [s.foreign],
                         classification="public")
    body = {"hash": reusable, "targetGroupId": s.world.group.id, "comment": "reusable"}
    cite = package(s.w1, s.first, artifacts=[reusable], events=(1, s.first_head))
    not_yet = s.w1.send("context.publish", cite)
    s.owner.ok("artifact.approve_forwarding", body)
    not_public = s.owner.send("artifact.approve_forwarding", {**body, "hash": s.foreign})

    assert_error(not_yet, 400, "VALIDATION_ERROR")
    assert_error(not_public, 403, "FORBIDDEN")
    s.w1.ok("context.publish", cite)
    assert_verified(s.world.group)


def test_an_artifact_received_by_an_approved_forwarding_is_reusable_in_the_target(s):
    other = Scenario()
    item_id, _ = other.running()
    name = published(other, item_id, b"from another Group")
    registry.add_member(s.world.group, other.c.principal, ["coordinator"])
    other.owner.ok("artifact.approve_forwarding", {"hash": name,
                                                   "targetGroupId": s.world.group.id})
    other.c.ok("artifact.forward", {"hash": name, "targetGroupId": s.world.group.id})

    s.w1.ok("context.publish", package(s.w1, s.first, artifacts=[s.own, name],
                                       events=(1, s.first_head)))

    assert_verified(s.world.group, other.world.group)


def test_archived_events_of_another_mission_count_too(s):
    from apps.ledger import archive, snapshots
    from apps.ledger.models import ArchivedEvent

    archive.archive_through(snapshots.take(s.world.group.id))
    assert ArchivedEvent.objects.filter(group_id=s.world.group.id,
                                        sequence=s.first_head + 1).exists()

    response = s.w1.send("context.publish", package(s.w1, s.first, events=(1, s.world.head)))

    assert assert_error(response, 403, "FORBIDDEN")["details"]["sequence"] == s.first_head + 1
    assert_verified(s.world.group)
