"""Rule 14 of the Trust issue, in the pure core (§13.3 "Group content MUST NOT enter
another Mission's context by default"): a Context Package of one Mission cites only that
Mission's events and artifacts, and besides them only reusable artifacts: received by an
approved forwarding, or published here as `public`, provenance-bearing and approved for
reuse in this Group."""

import pytest

from mission_weave.core import commands, manifests, records
from mission_weave.protocol.canonical import sign
from mission_weave.protocol.errors import ProtocolError
from tests.unit import builders
from tests.unit.builders import MISSION_ID, WORKER, iso
from tests.unit.test_manifests import GROUP, KEY, KEY_ID, PUBLIC

OTHER = "msn_2"
OWN, FOREIGN, SOURCE = ("sha256:" + c * 64 for c in "abc")


def record(name: str, mission_id: str, classification: str = "internal", sources=(),
           approved_for: str | None = None, origin: str = records.PUBLISHED,
           received_approval: dict | None = None) -> dict:
    manifest = {"hash": name, "missionId": mission_id, "classification": classification,
                "sources": list(sources)}
    received = ({"groupId": "grp_src", "approval": received_approval}
                if origin == records.RECEIVED else None)
    result = records.artifact_record(manifest, origin, "agent:w1", iso(0), received)
    if approved_for is not None:
        result["forwardingApprovals"] = [{"id": "fwa_1", "targetGroupId": approved_for,
                                          "by": builders.HUMAN, "at": iso(0), "comment": None}]
    return result


def view_with(*artifacts):
    view = builders.view_of(missions=[builders.mission(MISSION_ID), builders.mission(OTHER)])
    for artifact in artifacts:
        view.artifacts[artifact["hash"]] = artifact
    return view


def package(artifacts=(), events=(1, 5)) -> dict:
    return sign({"id": "pkg-1", "version": 1, "scope": {"missionId": MISSION_ID},
                 "sourceEvents": {"from": events[0], "to": events[1]},
                 "artifacts": list(artifacts), "decisions": [], "constraints": [],
                 "unresolvedQuestions": [], "generator": WORKER, "createdAt": iso(0)},
                KEY, KEY_ID)


def decide(view, document, source_missions=((MISSION_ID, 1),)):
    command = builders.command("context.publish", document, roles=frozenset({"worker"}))
    context = builders.context(facts={"groupId": GROUP, "headSequence": 10,
                                      "generatorKey": PUBLIC,
                                      "sourceMissions": list(source_missions)})
    return commands.decide(view, command, context)


def refusal(call) -> ProtocolError:
    with pytest.raises(ProtocolError) as raised:
        call()
    return raised.value


def test_a_package_cites_its_own_missions_artifacts_and_events():
    view = view_with(record(OWN, MISSION_ID))

    [draft] = decide(view, package([OWN]))

    assert draft.type == "context.package_published" and draft.mission_id == MISSION_ID


def test_events_of_another_mission_are_refused_naming_the_first():
    error = refusal(lambda: decide(view_with(), package(),
                                   [(MISSION_ID, 1), (OTHER, 4), ("msn_3", 3)]))

    assert error.code == "FORBIDDEN"
    assert error.details == {"path": "body.sourceEvents", "sequence": 3, "missionId": "msn_3"}


def test_events_naming_no_mission_may_be_cited():
    assert decide(view_with(), package(), []) != []


@pytest.mark.parametrize("artifact", [
    record(FOREIGN, OTHER),  # another Mission's, by default
    record(FOREIGN, OTHER, "public", [SOURCE]),  # public with provenance, not approved
    record(FOREIGN, OTHER, "public", approved_for=GROUP),  # approved, no provenance
    record(FOREIGN, OTHER, "internal", [SOURCE], approved_for=GROUP),  # not public
    record(FOREIGN, OTHER, "public", [SOURCE], approved_for="grp_b"),  # approved elsewhere
    record(FOREIGN, "msn_src", origin=records.RECEIVED,  # forwarded before approvals
           received_approval={"approvedBy": "user:x", "approvedAt": iso(0)}),
])
def test_another_missions_artifact_is_refused_unless_reusable(artifact):
    view = view_with(record(OWN, MISSION_ID), artifact)

    error = refusal(lambda: decide(view, package([OWN, FOREIGN])))

    assert error.code == "VALIDATION_ERROR"  # as Evidence and manifest sources (issue 24)
    assert error.details == {"path": "body.artifacts[1]", "hash": FOREIGN}


@pytest.mark.parametrize("artifact", [
    record(FOREIGN, OTHER, manifests.REUSABLE, [SOURCE], approved_for=GROUP),
    record(FOREIGN, "msn_src", origin=records.RECEIVED, received_approval={
        "id": "fwa_9", "approvedBy": "user:x", "approvedAt": iso(0)}),
])
def test_a_reusable_artifact_may_be_cited_from_any_mission(artifact):
    view = view_with(artifact)

    assert manifests.reusable(artifact, GROUP)
    assert decide(view, package([FOREIGN])) != []
