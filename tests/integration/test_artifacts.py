"""§13.1 artifacts through the HTTP API: signed manifests, the checks on publishing,
the provenance graph, Evidence that cites artifacts and carries no private reasoning,
and replay equal to the projections (mw_verify) after all of it."""

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from apps.ledger import db
from apps.ledger.verify import verify_group
from mission_weave.protocol.canonical import sign
from tests.integration.artifact_helpers import (
    assert_verified,
    digest,
    manifest,
    publish,
    published,
    signed,
    upload,
)
from tests.support import assert_error, evidence

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("blob_root")]


@pytest.fixture
def running(scenario):
    item_id, _ = scenario.running()
    return scenario, item_id


def test_the_lease_holder_publishes_a_signed_manifest(running):
    scenario, item_id = running

    response = publish(scenario, item_id, b"# Summary\n")

    assert response.status_code == 200, response.json()
    [event] = response.json()["events"]
    assert event["type"] == "artifact.published"
    assert event["workItemId"] == item_id and event["missionId"] == scenario.mission_id
    assert event["data"]["manifest"]["hash"] == digest(b"# Summary\n")
    assert event["data"]["manifest"]["signature"]["keyId"] == scenario.w1.key_id
    read = scenario.c.get("artifacts/" + digest(b"# Summary\n")).json()
    assert read["manifest"] == event["data"]["manifest"]
    assert read["origin"] == "published" and read["publishedBy"] == scenario.w1.principal
    assert_verified(scenario.world.group)


def test_a_manifest_signed_by_another_key_is_refused(running):
    scenario, item_id = running
    data = b"forged"
    upload(scenario.w1, data)
    document = manifest(scenario.w1, scenario.mission_id, item_id, data)
    forged = sign(document, Ed25519PrivateKey.generate(), scenario.w1.key_id)
    head = scenario.world.head

    response = scenario.w1.send("artifact.publish", forged, **scenario.lease_fields(item_id))

    error = assert_error(response, 401, "INVALID_SIGNATURE")
    assert error["details"]["path"] == "body.signature"
    assert scenario.world.head == head


def test_a_manifest_changed_after_signing_is_refused(running):
    scenario, item_id = running
    data = b"tampered"
    upload(scenario.w1, data)
    document = signed(manifest(scenario.w1, scenario.mission_id, item_id, data), scenario.w1)

    response = scenario.w1.send("artifact.publish", {**document, "classification": "public"},
                                **scenario.lease_fields(item_id))

    assert_error(response, 401, "INVALID_SIGNATURE")


def test_a_missing_source_is_named(running):
    scenario, item_id = running
    unknown = digest(b"never published")

    response = publish(scenario, item_id, b"derived", sources=[unknown])

    error = assert_error(response, 404, "NOT_FOUND")
    assert unknown in error["message"]
    assert error["details"] == {"path": "body.sources[0]", "hash": unknown}


def test_a_wrong_size_is_refused(running):
    scenario, item_id = running

    response = publish(scenario, item_id, b"twelve bytes", size=13)

    error = assert_error(response, 400, "VALIDATION_ERROR")
    assert error["details"]["path"] == "body.size"
    assert error["details"]["blobSize"] == 12


def test_a_missing_blob_is_refused(running):
    scenario, item_id = running

    response = publish(scenario, item_id, b"never uploaded", upload_it=False)

    error = assert_error(response, 404, "NOT_FOUND")
    assert "PUT /api/v1/blobs/" in error["message"]


def test_a_blob_someone_else_uploaded_counts_as_missing(running):
    # Publishing must not open another principal's bytes to this Group's members.
    scenario, item_id = running
    upload(scenario.w2, b"w2's bytes")

    response = publish(scenario, item_id, b"w2's bytes", upload_it=False)

    assert_error(response, 404, "NOT_FOUND")


@pytest.mark.parametrize("change, path", [
    ({"reasoning": "because"}, "body"),
    ({"versions": {"tool": None, "model": None}}, "body.versions"),
    ({"classification": "secret"}, "body.classification"),
    ({"hash": "sha256:XYZ"}, "body.hash"),
])
def test_a_malformed_manifest_names_the_path(running, change, path):
    scenario, item_id = running

    response = publish(scenario, item_id, b"shape", **change)

    error = assert_error(response, 400, "VALIDATION_ERROR")
    assert error["details"]["path"] == path
    if "reasoning" in change:
        assert "reasoning" in error["message"]


def test_every_member_the_seed_lists_is_required(running):
    scenario, item_id = running
    upload(scenario.w1, b"partial")
    document = manifest(scenario.w1, scenario.mission_id, item_id, b"partial")
    del document["agentCardVersion"]

    response = scenario.w1.send("artifact.publish", signed(document, scenario.w1),
                                **scenario.lease_fields(item_id))

    error = assert_error(response, 400, "VALIDATION_ERROR")
    assert "agentCardVersion" in error["message"]


def test_the_manifest_must_match_the_envelope_and_the_group(running):
    scenario, item_id = running
    other_item = scenario.authorize()

    wrong_group = publish(scenario, item_id, b"g", groupId="grp_elsewhere")
    wrong_item = publish(scenario, item_id, b"i", workItemId=other_item)

    assert assert_error(wrong_group, 400, "VALIDATION_ERROR")["details"]["path"] == "body.groupId"
    assert assert_error(wrong_item, 400, "VALIDATION_ERROR")["details"]["path"] == \
        "body.workItemId"


def test_a_worker_publishes_only_under_its_current_lease(running):
    scenario, item_id = running
    fields = scenario.lease_fields(item_id)
    upload(scenario.w1, b"late")
    document = signed(manifest(scenario.w1, scenario.mission_id, item_id, b"late"), scenario.w1)
    scenario.w1.ok("work.checkpoint", {"progress": {"phase": "paused"}}, **fields)

    no_lease = scenario.w1.send("artifact.publish", document,
                                **{**fields, "leaseId": None})
    closed = scenario.w1.send("artifact.publish", document, **fields)
    not_holder = scenario.w2.send("artifact.publish", document, **fields)

    assert_error(no_lease, 400, "VALIDATION_ERROR")
    assert_error(closed, 409, "STALE_LEASE")
    assert_error(not_holder, 409, "STALE_LEASE")


def test_a_lease_holder_publishes_only_its_own_manifests(running):
    scenario, item_id = running
    upload(scenario.w1, b"by w2")
    document = signed(manifest(scenario.w2, scenario.mission_id, item_id, b"by w2"), scenario.w2)

    response = scenario.w1.send("artifact.publish", document, **scenario.lease_fields(item_id))

    assert assert_error(response, 403, "FORBIDDEN")["details"]["path"] == "body.producer"


def test_a_coordinator_relays_a_manifest_and_publishes_mission_inputs(running):
    scenario, item_id = running
    upload(scenario.w1, b"relayed")
    relayed = signed(manifest(scenario.w1, scenario.mission_id, item_id, b"relayed"), scenario.w1)
    upload(scenario.c, b"input")
    mission_input = signed(manifest(scenario.c, scenario.mission_id, None, b"input"), scenario.c)

    scenario.c.ok("artifact.publish", relayed, workItemId=item_id)
    events = scenario.c.ok("artifact.publish", mission_input)
    worker_without_item = scenario.w1.send("artifact.publish", mission_input)

    assert events[0]["workItemId"] is None and events[0]["missionId"] == scenario.mission_id
    assert_error(worker_without_item, 403, "FORBIDDEN")
    assert_verified(scenario.world.group)


def test_identity_is_the_content_hash_never_the_uri(running):
    scenario, item_id = running
    same_uri = "https://files.example/mutable/latest"
    first = publish(scenario, item_id, b"version one", uri=same_uri)
    second = publish(scenario, item_id, b"version two", uri=same_uri)
    again = publish(scenario, item_id, b"version one", uri="https://elsewhere.example/copy")

    assert first.status_code == 200 and second.status_code == 200
    error = assert_error(again, 400, "VALIDATION_ERROR")
    assert error["details"]["hash"] == digest(b"version one")


def test_an_artifact_cannot_be_its_own_source(running):
    scenario, item_id = running

    response = publish(scenario, item_id, b"loop", sources=[digest(b"loop")])

    assert_error(response, 400, "VALIDATION_ERROR")


def test_provenance_across_three_generations(running):
    scenario, item_id = running
    raw = published(scenario, item_id, b"raw data")
    other = published(scenario, item_id, b"other input")
    cleaned = published(scenario, item_id, b"cleaned", sources=[raw, other])
    report = published(scenario, item_id, b"report", sources=[cleaned])

    middle = scenario.w2.get(f"artifacts/{cleaned}/provenance").json()
    root = scenario.w2.get(f"artifacts/{raw}/provenance").json()
    leaf = scenario.w2.get(f"artifacts/{report}/provenance").json()

    assert middle["artifact"]["hash"] == cleaned
    assert [a["hash"] for a in middle["ancestors"]] == sorted([raw, other])
    assert [a["hash"] for a in middle["descendants"]] == [report]
    assert sorted(map(tuple, (e.values() for e in middle["edges"]))) == sorted(
        [(raw, cleaned), (other, cleaned), (cleaned, report)])
    assert root["ancestors"] == [] and {a["hash"] for a in root["descendants"]} == {
        cleaned, report}
    assert {a["hash"] for a in leaf["ancestors"]} == {raw, other, cleaned}
    assert leaf["descendants"] == []
    assert {(e["from"], e["to"]) for e in leaf["edges"]} == {
        (raw, cleaned), (other, cleaned), (cleaned, report)}
    assert leaf["ancestors"][0]["producer"] == scenario.w1.name
    assert_verified(scenario.world.group)


def test_provenance_of_an_unknown_or_malformed_name(running):
    scenario, _ = running

    unknown = scenario.c.get(f"artifacts/{digest(b'nothing')}/provenance")
    malformed = scenario.c.get("artifacts/sha256:abc/provenance")
    manifest_read = scenario.c.get(f"artifacts/{digest(b'nothing')}")

    assert_error(unknown, 404, "NOT_FOUND")
    assert_error(malformed, 400, "VALIDATION_ERROR")
    assert_error(manifest_read, 404, "NOT_FOUND")


# --- Evidence (§13.2) -----------------------------------------------------------------------

def _submit(scenario, item_id, records, **fields):
    return scenario.w1.send("work.submit", {"contractRevision": 1, "evidence": records},
                            **{**scenario.lease_fields(item_id), **fields})


@pytest.mark.parametrize("field", ["reasoning", "chainOfThought", "thoughts", "scratchpad"])
def test_evidence_carrying_private_reasoning_is_refused(running, field):
    scenario, item_id = running
    records = [evidence(["ac1", "ac2"], producer=scenario.w1.principal,
                        **{field: "first I considered..."})]

    response = _submit(scenario, item_id, records)

    error = assert_error(response, 400, "VALIDATION_ERROR")
    assert field in error["message"]
    assert error["details"]["path"] == "body.evidence[0]"
    assert scenario.item(item_id)["state"] == "active"


def test_evidence_must_record_its_referenced_artifacts(running):
    scenario, item_id = running
    record = evidence(["ac1", "ac2"], producer=scenario.w1.principal)
    del record["artifacts"]

    response = _submit(scenario, item_id, [record])

    assert "artifacts" in assert_error(response, 400, "VALIDATION_ERROR")["message"]


def test_evidence_cites_only_published_artifacts_of_the_group(running):
    scenario, item_id = running
    summary = published(scenario, item_id, b"the summary")
    unknown = digest(b"unpublished")
    cites_unknown = [evidence(["ac1", "ac2"], producer=scenario.w1.principal,
                              artifacts=[summary, unknown])]
    cites_published = [evidence(["ac1", "ac2"], producer=scenario.w1.principal,
                                 artifacts=[summary])]

    refused = _submit(scenario, item_id, cites_unknown)
    accepted = _submit(scenario, item_id, cites_published)

    error = assert_error(refused, 404, "NOT_FOUND")
    assert error["details"]["path"] == "body.evidence[0].artifacts[1]"
    assert accepted.status_code == 200, accepted.json()
    assert accepted.json()["events"][0]["data"]["evidence"][0]["artifacts"] == [summary]
    assert_verified(scenario.world.group)


def test_evidence_must_cover_every_acceptance_criterion(running):
    scenario, item_id = running

    response = _submit(scenario, item_id, [evidence(["ac1"], producer=scenario.w1.principal)])

    error = assert_error(response, 409, "EVIDENCE_INCOMPLETE")
    assert error["details"]["missingCriteria"] == ["ac2"]


def test_failure_evidence_with_private_reasoning_is_refused(running):
    scenario, item_id = running
    record = evidence([], producer=scenario.c.principal, chainOfThought="hidden")

    response = scenario.c.send("work.fail", {"evidence": [record]}, workItemId=item_id)

    assert "chainOfThought" in assert_error(response, 400, "VALIDATION_ERROR")["message"]


# --- replay equals projection ---------------------------------------------------------------

def test_verify_notices_an_artifact_row_that_differs_from_the_log(running):
    scenario, item_id = running
    name = published(scenario, item_id, b"to be tampered with")
    assert verify_group(scenario.world.group.id) == []

    db.execute_batch([("UPDATE artifacts_artifact SET doc = jsonb_set(doc, '{by}', "
                       "'\"agent:intruder\"') WHERE hash = %s", [name])])
    problems = verify_group(scenario.world.group.id)

    assert f"artifact {name} differs from its replay" in problems
    assert problems == [f"artifact {name} differs from its replay"]
