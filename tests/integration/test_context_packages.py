"""§13.3 Context Packages through the HTTP API: signed, versioned, scoped summaries; a
new version keeps provenance to the previous one; the cited events are served to
members of the Group."""

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mission_weave.protocol.canonical import content_hash, sign, without
from tests.integration.artifact_helpers import assert_verified, digest, package, published
from tests.support import assert_error

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("blob_root")]


def test_versions_keep_provenance_to_the_previous_one(scenario):
    item_id, _ = scenario.running()
    summary = published(scenario, item_id, b"summary v1")
    first = package(scenario.w1, scenario.mission_id, artifacts=[summary], events=(1, 3))
    events = scenario.w1.ok("context.publish", first)
    head = scenario.world.head
    second = package(scenario.w1, scenario.mission_id, version=2, previous=1, events=(1, head),
                     decisions=["use the Q3 figures", "drop the appendix"],
                     scope={"missionId": scenario.mission_id, "workItemId": item_id})
    scenario.w1.ok("context.publish", second)

    latest = scenario.w2.get("context-packages/pkg-1").json()
    older = scenario.w2.get("context-packages/pkg-1?version=1").json()

    assert events[0]["type"] == "context.package_published"
    assert events[0]["data"]["previousHash"] is None
    assert latest["version"] == 2 and latest["previousVersion"] == 1
    assert latest["previousHash"] == older["hash"] == content_hash(first)
    assert latest["package"] == second and older["package"] == first
    assert latest["publisher"] == scenario.w1.principal
    assert_verified(scenario.world.group)


def test_a_stale_previous_version_is_a_revision_conflict(scenario):
    scenario.w1.ok("context.publish", package(scenario.w1, scenario.mission_id))
    scenario.w2.ok("context.publish", package(scenario.w2, scenario.mission_id, version=2,
                                              previous=1))

    late = scenario.w1.send("context.publish", package(scenario.w1, scenario.mission_id,
                                                       version=2, previous=1))

    error = assert_error(late, 409, "REVISION_CONFLICT")
    assert error["details"]["latestVersion"] == 2


def test_the_first_version_is_one(scenario):
    response = scenario.w1.send("context.publish", package(scenario.w1, scenario.mission_id,
                                                           version=2))

    assert assert_error(response, 400, "VALIDATION_ERROR")["details"]["path"] == "body.version"


@pytest.mark.parametrize("version, previous, status, code", [
    (1, 1, 400, "VALIDATION_ERROR"), (3, 1, 400, "VALIDATION_ERROR"),
    (1, None, 409, "REVISION_CONFLICT")])
def test_versions_count_up_by_one(scenario, version, previous, status, code):
    scenario.w1.ok("context.publish", package(scenario.w1, scenario.mission_id))

    response = scenario.w1.send("context.publish", package(
        scenario.w1, scenario.mission_id, version=version, previous=previous))

    assert_error(response, status, code)


def test_a_package_is_signed_by_its_generator_who_publishes_it(scenario):
    document = package(scenario.w1, scenario.mission_id)
    forged = sign(without(document, "signature"), Ed25519PrivateKey.generate(),
                  scenario.w1.key_id)

    bad_signature = scenario.w1.send("context.publish", forged)
    someone_elses = scenario.w2.send("context.publish", document)
    human = scenario.owner.send("context.publish", document)

    assert_error(bad_signature, 401, "INVALID_SIGNATURE")
    assert_error(someone_elses, 403, "FORBIDDEN")
    assert_error(human, 403, "FORBIDDEN")


def test_the_scope_and_the_cited_range_must_exist(scenario):
    head = scenario.world.head

    beyond_head = scenario.w1.send("context.publish", package(
        scenario.w1, scenario.mission_id, events=(1, head + 1)))
    reversed_range = scenario.w1.send("context.publish", package(
        scenario.w1, scenario.mission_id, events=(2, 1)))
    unknown_mission = scenario.w1.send("context.publish", package(scenario.w1, "msn-nowhere"))
    unknown_item = scenario.w1.send("context.publish", package(
        scenario.w1, scenario.mission_id, scope={"missionId": scenario.mission_id,
                                                 "workItemId": "wi-nowhere"}))
    unknown_artifact = scenario.w1.send("context.publish", package(
        scenario.w1, scenario.mission_id, artifacts=[digest(b"nothing")]))

    assert assert_error(beyond_head, 400, "VALIDATION_ERROR")["details"]["headSequence"] == head
    assert_error(reversed_range, 400, "VALIDATION_ERROR")
    assert_error(unknown_mission, 404, "NOT_FOUND")
    assert_error(unknown_item, 404, "NOT_FOUND")
    assert assert_error(unknown_artifact, 404, "NOT_FOUND")["details"]["path"] == \
        "body.artifacts[0]"
    assert scenario.world.head == head


def test_a_package_has_no_room_for_other_members(scenario):
    response = scenario.w1.send("context.publish", package(
        scenario.w1, scenario.mission_id, scratchpad="private notes"))

    assert "scratchpad" in assert_error(response, 400, "VALIDATION_ERROR")["message"]


def test_the_cited_events_are_served_to_members(scenario):
    item_id = scenario.authorize()
    scenario.offer(item_id)
    scenario.w1.ok("context.publish", package(scenario.w1, scenario.mission_id, events=(2, 3)))

    cited = scenario.w2.get("context-packages/pkg-1/events").json()
    paged = scenario.w2.get("context-packages/pkg-1/events?after=2&limit=5").json()
    log = scenario.w2.get("events?after=1&limit=2").json()["events"]

    assert [e["sequence"] for e in cited["events"]] == [2, 3]
    assert cited["events"] == log
    assert cited["sourceEvents"] == {"from": 2, "to": 3}
    assert [e["sequence"] for e in paged["events"]] == [3]


def test_unknown_packages_and_versions(scenario):
    scenario.w1.ok("context.publish", package(scenario.w1, scenario.mission_id))

    assert_error(scenario.w1.get("context-packages/pkg-2"), 404, "NOT_FOUND")
    assert_error(scenario.w1.get("context-packages/pkg-1?version=2"), 404, "NOT_FOUND")
    assert_error(scenario.w1.get("context-packages/pkg-1?version=x"), 400, "VALIDATION_ERROR")
    assert_error(scenario.w1.get("context-packages/pkg-2/events"), 404, "NOT_FOUND")


@pytest.mark.parametrize("query", [
    "version=%C2%B2", "version=" + "1" * 5000, "version=0", "version=%EF%BC%91",
    "after=%C2%B2", "after=" + "9" * 5000, "after=-1", "after=+1", "after=%201",
    "limit=%C2%B2", "limit=0", "limit=1001", "limit=1_0"])
def test_a_package_query_that_is_no_plain_number_in_range_is_refused(scenario, query):
    scenario.w1.ok("context.publish", package(scenario.w1, scenario.mission_id))
    path = "context-packages/pkg-1" + ("" if query.startswith("version") else "/events")

    error = assert_error(scenario.w1.get(f"{path}?{query}"), 400, "VALIDATION_ERROR")

    assert error["details"]["path"] == query.split("=")[0]
