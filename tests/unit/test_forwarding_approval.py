"""Rule 3 of the Trust issue, in the pure core: the Organization's approval of a
cross-Group forwarding is a recorded event (`artifact.approve_forwarding`, by a human
with the owner role), kept on the artifact's record; `artifact.forward` needs it for
that artifact and target, and its events name it instead of a free-text approver."""

import pytest

from mission_weave.core import commands, manifests, records
from mission_weave.protocol.errors import ProtocolError
from tests.unit import builders
from tests.unit.test_manifests import (
    DATA_HASH,
    GROUP,
    approved_view,
    code_of,
    forward_command,
    forward_context,
    published_view,
)


def approve(target: str = "grp_b", actor: str = builders.HUMAN, roles=("owner",),
            command_id: str = "cmd-approve", **body) -> commands.Command:
    return builders.command("artifact.approve_forwarding",
                            {"hash": DATA_HASH, "targetGroupId": target, **body},
                            actor=actor, roles=frozenset(roles), command_id=command_id)


def own_context() -> commands.Context:
    return builders.context(facts={"groupId": GROUP})


def test_an_approval_is_an_event_recorded_on_the_artifact():
    view = published_view()

    drafts = commands.decide(view, approve(comment="CHG-1042"), own_context())
    after = builders.apply(view, drafts)

    [draft] = drafts
    assert draft.type == "artifact.forwarding_approved"
    assert draft.mission_id is None and draft.group_id is None
    assert draft.data == {"hash": DATA_HASH, "targetGroupId": "grp_b",
                          "approvalId": commands.derive_id("fwa", "cmd-approve"),
                          "by": builders.HUMAN, "comment": "CHG-1042"}
    [entry] = after.artifacts[DATA_HASH]["forwardingApprovals"]
    assert entry == {"id": draft.data["approvalId"], "targetGroupId": "grp_b",
                     "by": builders.HUMAN, "at": builders.iso(0), "comment": "CHG-1042"}
    assert records.approval_for(after.artifacts[DATA_HASH], "grp_b") == entry
    assert records.approval_for(after.artifacts[DATA_HASH], "grp_c") is None
    assert "forwardingApprovals" not in view.artifacts[DATA_HASH]  # evolve replaced it


@pytest.mark.parametrize("actor, roles", [
    ("agent:w1", ("owner",)),  # an Agent holding the role: the approval is a human's
    (builders.HUMAN, ("coordinator",)),
    (builders.HUMAN, ("observer",)),
])
def test_only_a_human_owner_approves(actor, roles):
    assert code_of(lambda: commands.decide(published_view(), approve(actor=actor, roles=roles),
                                           own_context())) == "FORBIDDEN"


def test_an_approval_needs_a_known_forwardable_artifact_and_is_given_once():
    view = approved_view()
    unknown = approve()
    unknown = builders.command(unknown.type, {**unknown.body, "hash": "sha256:" + "9" * 64},
                               actor=builders.HUMAN, roles=frozenset({"owner"}))

    assert code_of(lambda: commands.decide(view, unknown, own_context())) == "NOT_FOUND"
    assert code_of(lambda: commands.decide(view, approve(command_id="cmd-2"),
                                           own_context())) == "VALIDATION_ERROR"
    restricted = published_view()
    record = restricted.artifacts[DATA_HASH]
    restricted.artifacts[DATA_HASH] = {
        **record, "manifest": {**record["manifest"], "classification": "restricted"}}
    assert code_of(lambda: commands.decide(restricted, approve(), own_context())) == "FORBIDDEN"


def test_the_old_free_text_approval_member_is_refused():
    body = {**forward_command().body, "approval": {"approvedBy": "user:alice",
                                                  "approvedAt": builders.iso(0)}}
    command = builders.command("artifact.forward", body, actor=builders.COORDINATOR,
                               roles=frozenset({"coordinator"}))

    assert code_of(lambda: commands.decide(approved_view(), command,
                                           forward_context())) == "VALIDATION_ERROR"


def test_forwarding_without_a_recorded_approval_is_forbidden_naming_what_is_missing():
    for view in (published_view(), approved_view(target="grp_c")):
        with pytest.raises(ProtocolError) as raised:
            commands.decide(view, forward_command(), forward_context())
        error = raised.value
        assert error.code == "FORBIDDEN"
        assert error.details == {"path": "body.targetGroupId",
                                 "missing": "artifact.forwarding_approved",
                                 "hash": DATA_HASH, "targetGroupId": "grp_b"}


def test_the_forwarding_events_name_the_recorded_approval():
    view = approved_view()
    [entry] = view.artifacts[DATA_HASH]["forwardingApprovals"]

    drafts = commands.decide(view, forward_command(), forward_context())

    named = {"id": entry["id"], "approvedBy": builders.HUMAN, "approvedAt": entry["at"]}
    assert [d.data["approval"] for d in drafts] == [named, named]
    after = builders.apply(view, drafts[:1])
    assert after.artifacts[DATA_HASH]["forwardedTo"][0]["approval"] == named
    received = builders.apply(builders.View(), drafts[1:])
    assert received.artifacts[DATA_HASH]["receivedFrom"] == {"groupId": GROUP,
                                                             "approval": named}


def test_approving_reuse_in_the_own_group_needs_a_public_provenance_bearing_artifact():
    view = published_view()  # classification internal, no sources

    assert code_of(lambda: commands.decide(view, approve(target=GROUP),
                                           own_context())) == "FORBIDDEN"
    record = view.artifacts[DATA_HASH]
    view.artifacts[DATA_HASH] = {**record, "manifest": {
        **record["manifest"], "classification": manifests.REUSABLE}}
    assert code_of(lambda: commands.decide(view, approve(target=GROUP),
                                           own_context())) == "FORBIDDEN"  # no sources
    view.artifacts[DATA_HASH] = {**record, "manifest": {
        **record["manifest"], "classification": manifests.REUSABLE,
        "sources": ["sha256:" + "2" * 64]}}
    [draft] = commands.decide(view, approve(target=GROUP), own_context())
    assert draft.data["targetGroupId"] == GROUP
