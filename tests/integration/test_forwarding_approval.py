"""Rule 3 of the Trust issue over HTTP: the Organization's approval of a cross-Group
forwarding is a recorded `artifact.approve_forwarding` by a human owner of the source
Group, kept on the artifact's record and shown on its dashboard page; a forwarding needs
it and names it."""

import pytest

from apps.identity import registry
from apps.ledger.models import Event
from tests.integration.artifact_helpers import assert_verified, published
from tests.support import Scenario, assert_error

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("blob_root")]


@pytest.fixture
def two(db):
    a, b = Scenario(), Scenario()
    item_id, _ = a.running()
    a.artifact = published(a, item_id, b"A's summary for finance")
    registry.add_member(b.world.group, a.c.principal, ["coordinator"])
    return a, b


def test_an_owner_records_the_approval_and_the_forwarding_names_it(two):
    a, b = two
    head = a.world.head

    refused = a.c.send("artifact.forward", {"hash": a.artifact,
                                            "targetGroupId": b.world.group.id})
    [approved] = a.owner.ok("artifact.approve_forwarding", {
        "hash": a.artifact, "targetGroupId": b.world.group.id, "comment": "CHG-1042"})
    [sent] = a.c.ok("artifact.forward", {"hash": a.artifact,
                                         "targetGroupId": b.world.group.id})

    error = assert_error(refused, 403, "FORBIDDEN")
    assert error["details"]["missing"] == "artifact.forwarding_approved"
    assert approved["sequence"] == head + 1  # the refusal appended nothing
    assert approved["type"] == "artifact.forwarding_approved"
    assert approved["actor"] == a.owner.principal and approved["missionId"] is None
    assert approved["data"]["targetGroupId"] == b.world.group.id
    assert approved["data"]["comment"] == "CHG-1042"
    named = {"id": approved["data"]["approvalId"], "approvedBy": a.owner.principal,
             "approvedAt": approved["occurredAt"]}
    assert sent["data"]["approval"] == named
    received = Event.objects.get(group_id=b.world.group.id, type="artifact.received")
    assert received.data["approval"] == named
    record = a.w1.get(f"artifacts/{a.artifact}").json()
    assert record["forwardingApprovals"] == [{
        "id": named["id"], "targetGroupId": b.world.group.id, "by": a.owner.principal,
        "at": approved["occurredAt"], "comment": "CHG-1042"}]
    assert record["forwardedTo"][0]["approval"] == named
    assert_verified(a.world.group, b.world.group)


def test_only_a_human_owner_of_the_source_group_approves(two):
    a, b = two
    body = {"hash": a.artifact, "targetGroupId": b.world.group.id}
    registry.add_member(a.world.group, a.w2.principal, ["worker", "owner"])  # an Agent owner
    someone = a.world.human("clerk-" + a.world.group.slug, roles=("observer",))
    head = a.world.head

    assert_error(a.c.send("artifact.approve_forwarding", body), 403, "FORBIDDEN")
    assert_error(a.w2.send("artifact.approve_forwarding", body), 403, "FORBIDDEN")
    assert_error(someone.send("artifact.approve_forwarding", body), 403, "FORBIDDEN")
    assert_error(b.owner.send("artifact.approve_forwarding", body), 404, "NOT_FOUND")
    assert a.world.head == head


def test_an_approval_is_given_once_per_target(two):
    a, b = two
    body = {"hash": a.artifact, "targetGroupId": b.world.group.id}
    [first] = a.owner.ok("artifact.approve_forwarding", body)

    again = a.owner.send("artifact.approve_forwarding", body)

    details = assert_error(again, 400, "VALIDATION_ERROR")["details"]
    assert details["approvalId"] == first["data"]["approvalId"]
    assert_verified(a.world.group)


def test_the_dashboard_artifact_page_shows_who_approved_forwarding_where_and_when(two):
    a, b = two
    [approved] = a.owner.ok("artifact.approve_forwarding", {
        "hash": a.artifact, "targetGroupId": b.world.group.id, "comment": "CHG-1042"})
    a.c.ok("artifact.forward", {"hash": a.artifact, "targetGroupId": b.world.group.id})

    page = a.owner.client.get(f"/g/{a.world.group.id}/artifacts/{a.artifact}/")

    assert page.status_code == 200
    html = page.content.decode()
    assert "Forwarding approvals" in html
    assert f"forwarding to Group {b.world.group.id} approved by {a.owner.principal}" in html
    assert approved["occurredAt"] in html and "CHG-1042" in html
    assert approved["data"]["approvalId"] in html
