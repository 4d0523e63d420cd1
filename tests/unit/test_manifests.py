"""The pure §13 core: manifest and package checks, what a command cites, the decisions
of artifact.publish / context.publish / artifact.forward, and how their events evolve
the View. No database."""

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mission_weave.core import commands, manifests, packages, records
from mission_weave.protocol.canonical import public_key_b64url, sign
from mission_weave.protocol.errors import ProtocolError
from tests.unit import builders
from tests.unit.builders import ITEM_ID, MISSION_ID, WORKER, iso

KEY = Ed25519PrivateKey.generate()
KEY_ID = f"{WORKER}#1"
PUBLIC = public_key_b64url(KEY)
GROUP = "grp_a"
DATA_HASH = "sha256:" + "1" * 64


def manifest(**overrides) -> dict:
    document = {
        "hash": DATA_HASH, "mediaType": "application/json", "schema": "urn:example:summary/1",
        "size": 42, "producer": WORKER, "agentCardVersion": "1", "missionId": MISSION_ID,
        "groupId": GROUP, "workItemId": ITEM_ID, "sources": [],
        "versions": {"tool": "jq 1.7", "model": "m-1", "capability": "summarize@1"},
        "createdAt": iso(0), "classification": "internal", "uri": "s3://bucket/x"}
    document.update(overrides)
    return sign(document, KEY, KEY_ID)


def publish_context(blob=None, key=PUBLIC) -> commands.Context:
    return builders.context(facts={"groupId": GROUP, "producerKey": key,
                                   "producerCardVersions": ["1"],
                                   "blob": blob or {"size": 42, "corrupted": False}})


def active_view():
    return builders.view_of(builders.work_item("active"))


def decide_publish(view, document, context=None, **fields):
    item = view.items[ITEM_ID]
    command = builders.command("artifact.publish", document, item,
                               roles=frozenset({"worker"}), **fields)
    return commands.decide(view, command, context or publish_context())


def code_of(call) -> str:
    with pytest.raises(ProtocolError) as raised:
        call()
    return raised.value.code


# --- signatures and blobs --------------------------------------------------------------------

def test_a_signature_verifies_only_with_the_signers_key():
    document = manifest()

    manifests.check_signature(document, PUBLIC, WORKER, "manifest")
    other = public_key_b64url(Ed25519PrivateKey.generate())

    assert code_of(lambda: manifests.check_signature(document, other, WORKER, "m")) == \
        "INVALID_SIGNATURE"
    assert code_of(lambda: manifests.check_signature(document, None, WORKER, "m")) == \
        "INVALID_SIGNATURE"
    # a key id of another agent never vouches for this producer
    assert code_of(lambda: manifests.check_signature(document, PUBLIC, "w2", "m")) == \
        "INVALID_SIGNATURE"


@pytest.mark.parametrize("blob, code", [
    (None, "NOT_FOUND"),
    ({"size": 42, "corrupted": True}, "NOT_FOUND"),
    ({"size": 41, "corrupted": False}, "VALIDATION_ERROR"),
])
def test_the_blob_must_be_there_intact_and_of_the_stated_size(blob, code):
    assert code_of(lambda: manifests.check_blob(manifest(), blob)) == code


def test_a_matching_blob_passes():
    manifests.check_blob(manifest(), {"size": 42, "corrupted": False})


# --- what a command cites --------------------------------------------------------------------

def test_references_of_each_command():
    source = "sha256:" + "2" * 64
    publish = manifests.references("artifact.publish", manifest(sources=[source]))
    package = manifests.references("context.publish", {
        "id": "p", "scope": {"missionId": "m", "workItemId": "w"}, "artifacts": [source]})
    forward = manifests.references("artifact.forward", {"hash": source})
    submit = manifests.references("work.submit", {"evidence": [{"artifacts": [source, 3]}]})

    assert publish == manifests.Refs(frozenset({MISSION_ID}), frozenset({ITEM_ID}),
                                     frozenset({DATA_HASH, source}))
    assert package == manifests.Refs(frozenset({"m"}), frozenset({"w"}), frozenset({source}),
                                     frozenset({"p"}))
    assert forward.artifacts == {source}
    assert submit.artifacts == {source}


@pytest.mark.parametrize("body", [None, [], {"evidence": "x"}, {"scope": 3, "artifacts": {}},
                                  {"hash": 1, "sources": "s"}])
def test_references_of_a_malformed_body_are_empty(body):
    for command_type in ("artifact.publish", "context.publish", "artifact.forward", "work.fail"):
        refs = manifests.references(command_type, body)
        assert not refs.artifacts and not refs.items


# --- artifact.publish ------------------------------------------------------------------------

def test_publishing_evolves_the_view_and_names_the_item():
    view = active_view()

    drafts = decide_publish(view, manifest())
    after = builders.apply(view, drafts)

    assert [(d.type, d.mission_id, d.work_item_id, d.group_id) for d in drafts] == [
        ("artifact.published", MISSION_ID, ITEM_ID, None)]
    record = after.artifacts[DATA_HASH]
    assert record["origin"] == "published" and record["manifest"] == manifest()
    assert after.items[ITEM_ID].revision == view.items[ITEM_ID].revision + 1
    assert view.artifacts == {}  # evolve worked on a copy


def test_a_source_must_be_in_the_view():
    view = active_view()
    source = "sha256:" + "3" * 64

    missing = code_of(lambda: decide_publish(view, manifest(sources=[source])))
    view.artifacts[source] = records.artifact_record(  # of the same Mission (§13.3)
        {"hash": source, "missionId": MISSION_ID, "workItemId": None}, "published",
        builders.COORDINATOR, iso(0))
    drafts = decide_publish(view, manifest(sources=[source]))

    assert missing == "NOT_FOUND"
    assert drafts[0].data["manifest"]["sources"] == [source]


def test_publishing_checks_the_envelope_the_lease_and_the_group():
    view = active_view()

    assert code_of(lambda: decide_publish(view, manifest(groupId="grp_b"))) == "VALIDATION_ERROR"
    assert code_of(lambda: decide_publish(view, manifest(), lease_id="lease_old")) == \
        "STALE_LEASE"
    assert code_of(lambda: decide_publish(view, manifest(), publish_context(key=None))) == \
        "INVALID_SIGNATURE"
    assert code_of(lambda: decide_publish(view, manifest(missionId="msn_x"))) == "NOT_FOUND"


# --- Context Packages ------------------------------------------------------------------------

def version(number: int, mission_id: str = MISSION_ID) -> dict:
    return {"version": number, "hash": f"sha256:{number:064d}",
            "package": {"scope": {"missionId": mission_id}}}


@pytest.mark.parametrize("package, previous, code", [
    ({"id": "p", "version": 2}, None, "VALIDATION_ERROR"),
    ({"id": "p", "version": 1, "previousVersion": 1}, None, "VALIDATION_ERROR"),
    ({"id": "p", "version": 2, "previousVersion": 1}, version(2), "REVISION_CONFLICT"),
    ({"id": "p", "version": 4, "previousVersion": 2}, version(2), "VALIDATION_ERROR"),
    ({"id": "p", "version": 3, "previousVersion": 2, "scope": {"missionId": "other"}},
     version(2), "VALIDATION_ERROR"),
])
def test_versions_count_up_from_the_latest(package, previous, code):
    package.setdefault("scope", {"missionId": MISSION_ID})
    assert code_of(lambda: packages.check_version(package, previous)) == code


def test_the_latest_version_is_the_highest_loaded():
    loaded = {("p", 1): version(1), ("p", 3): version(3), ("q", 9): version(9)}

    assert packages.latest(loaded, "p")["version"] == 3
    assert packages.latest(loaded, "r") is None


# --- artifact.forward ------------------------------------------------------------------------

def forward_command(**body):
    values = {"hash": DATA_HASH, "targetGroupId": "grp_b"}
    values.update(body)
    return builders.command("artifact.forward", values, actor=builders.COORDINATOR,
                            roles=frozenset({"coordinator"}))


def forward_context(**facts) -> commands.Context:
    values = {"groupId": GROUP, "targetRoles": ["coordinator"], "targetHasArtifact": False}
    values.update(facts)
    return builders.context(facts=values)


def published_view():
    view = active_view()
    return builders.apply(view, decide_publish(view, manifest()))


def approved_view(target: str = "grp_b"):
    """published_view() with the Organization's recorded approval to forward to `target`."""
    view = published_view()
    approve = builders.command("artifact.approve_forwarding",
                               {"hash": DATA_HASH, "targetGroupId": target},
                               actor=builders.HUMAN, roles=frozenset({"owner"}),
                               command_id="cmd-approve")
    return builders.apply(view, commands.decide(view, approve,
                                                builders.context(facts={"groupId": GROUP})))


def test_forwarding_appends_to_both_groups():
    view = approved_view()

    drafts = commands.decide(view, forward_command(), forward_context())
    after = builders.apply(view, drafts[:1])

    assert [(d.type, d.group_id) for d in drafts] == [("artifact.forwarded", None),
                                                      ("artifact.received", "grp_b")]
    assert drafts[1].data["manifest"] == manifest()
    assert drafts[1].data["sourceGroupId"] == GROUP
    assert after.artifacts[DATA_HASH]["forwardedTo"][0]["groupId"] == "grp_b"
    assert view.artifacts[DATA_HASH]["forwardedTo"] == []
    received = builders.apply(builders.View(), drafts[1:])
    assert received.artifacts[DATA_HASH]["origin"] == "received"
    assert received.artifacts[DATA_HASH]["receivedFrom"]["groupId"] == GROUP


@pytest.mark.parametrize("facts, code", [
    ({"targetRoles": None}, "NOT_A_MEMBER"),
    ({"targetRoles": ["worker"]}, "FORBIDDEN"),
    ({"targetHasArtifact": True}, "VALIDATION_ERROR"),
    ({"groupId": "grp_b"}, "VALIDATION_ERROR"),
])
def test_forwarding_is_permission_checked(facts, code):
    view = approved_view()

    assert code_of(lambda: commands.decide(view, forward_command(),
                                           forward_context(**facts))) == code


def test_only_a_coordinator_forwards_and_only_known_artifacts():
    view = approved_view()
    worker = builders.command("artifact.forward", forward_command().body,
                              roles=frozenset({"worker"}))

    assert code_of(lambda: commands.decide(view, worker, forward_context())) == "FORBIDDEN"
    assert code_of(lambda: commands.decide(view, forward_command(hash="sha256:" + "9" * 64),
                                           forward_context())) == "NOT_FOUND"


def test_a_snapshot_state_keeps_artifacts_and_package_versions():
    # Replays resume from snapshots: their state must carry the §13 records too.
    import json

    from apps.ledger import verify

    view = published_view()
    view.packages[("p", 1)] = {"id": "p", "version": 1, "hash": "sha256:" + "4" * 64}

    restored = verify.view_of(json.loads(json.dumps(verify.state_document(view))))

    assert restored.artifacts == view.artifacts
    assert restored.packages == view.packages
