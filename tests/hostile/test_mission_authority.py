"""The commands a coordinator sends for a Mission and other roles send on their own account
(mission_weave/core/commands/authority.py ON_OWN_ACCOUNT): Evidence, a failure report, a
manifest. The authorization matrix found a coordinator of one Mission recording Evidence
on, publishing into and failing another Mission's work; pure decisions here, no database."""

import pytest

from mission_weave.core.commands import decide
from mission_weave.protocol.errors import ProtocolError
from tests.unit.builders import (
    COORDINATOR,
    ITEM_ID,
    MISSION_ID,
    context,
    evidence,
    mission,
    view_of,
    work_item,
)
from tests.unit.builders import command as build_command

STRANGER = "agent:coord-of-another-mission"  # the coordinator role, not this Mission's
DELEGATE = "user:dana"


def view(state: str):
    item = work_item(state)
    return item, view_of(item, missions=[mission(delegates=(DELEGATE,))])


def refusal(view, command) -> ProtocolError:
    with pytest.raises(ProtocolError) as refused:
        decide(view, command, context())
    return refused.value


def record(actor: str, roles) -> object:
    item, _ = view("submitted")
    return build_command("evidence.record", {"evidence": [evidence(
        ["ac1"], "ev-review", producer=actor, result="pass: reviewed")]}, item, actor=actor,
        roles=roles)


def test_a_coordinator_of_another_mission_records_no_evidence():
    _, current = view("submitted")

    error = refusal(current, record(STRANGER, {"coordinator"}))

    assert error.code == "FORBIDDEN"
    assert error.details == {"missionId": MISSION_ID, "allowed": [COORDINATOR, DELEGATE]}


@pytest.mark.parametrize("actor,roles", [(COORDINATOR, {"coordinator"}),
                                         (DELEGATE, {"coordinator"}),
                                         ("agent:any-reviewer", {"reviewer"})])
def test_the_missions_coordinators_and_any_reviewer_record_evidence(actor, roles):
    _, current = view("submitted")

    [draft] = decide(current, record(actor, roles), context())

    assert (draft.type, draft.data["by"]) == ("evidence.recorded", actor)


def test_a_coordinator_of_another_mission_cannot_fail_its_work():
    item, current = view("active")
    command = build_command("work.fail", {"evidence": [evidence(
        ["ac1"], producer=STRANGER, result="fail: mine now")]}, item, actor=STRANGER,
        roles={"coordinator"})

    error = refusal(current, command)

    assert error.code == "FORBIDDEN"  # not STALE_LEASE: it never held one
    assert error.details["allowed"] == [COORDINATOR, DELEGATE]


def test_the_lease_holder_still_reports_its_own_failure():
    item, current = view("active")
    command = build_command("work.fail", {"evidence": [evidence(["ac1"],
                                                                result="fail: no data")]},
                            item, roles={"worker"})

    drafts = decide(current, command, context())

    assert drafts[-1].type == "work.failed"


def test_a_coordinator_of_another_mission_publishes_nothing_into_it():
    item, current = view("active")
    manifest = {"hash": "sha256:" + "a" * 64, "mediaType": "text/plain", "schema": None,
                "size": 1, "producer": "w1", "agentCardVersion": "1", "missionId": MISSION_ID,
                "groupId": "grp_1", "workItemId": ITEM_ID, "sources": [],
                "versions": {"tool": None, "model": None, "capability": None},
                "createdAt": "2026-11-29T08:00:00Z", "classification": "internal",
                "uri": "https://files.example/a",
                "signature": {"alg": "Ed25519", "keyId": "w1#1", "sig": "x"}}
    command = build_command("artifact.publish", manifest, item, actor=STRANGER,
                            roles={"coordinator"})

    assert refusal(current, command).code == "FORBIDDEN"
