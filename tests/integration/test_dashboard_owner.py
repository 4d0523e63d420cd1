"""The MissionOwner's dashboard through Django's test client: "Waiting on me" across
Groups, the execution approval card (grant or refuse), the Evidence matrix that gates
the final Approval, and refusing the Approval with reasons the Coordinator then sees."""

import re

import pytest

from apps.ledger.models import Event
from tests.integration.test_dashboard import human_coordinator, item_url, last_event, mission_url
from tests.support import Scenario, evidence

pytestmark = pytest.mark.django_db

RISKY = {"class": "high", "requiresExecutionApproval": True}


def html_of(response) -> str:
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def waiting_rows(client, query: str = "") -> list:
    """(kind, mission, item) of each "Waiting on me" row, in the page's order."""
    html = html_of(client.get("/" + query))
    return [(kind, mission, item or None) for kind, mission, item in re.findall(
        r'<tr data-kind="([^"]+)" data-mission="([^"]+)"(?: data-item="([^"]+)")?>', html)]


def verified(s: Scenario, **overrides) -> str:
    item_id, _ = s.running(s.w1, **overrides)
    s.w1.ok("work.submit", {"contractRevision": 1, "artifacts": [s.deliver(item_id)],
                            "evidence": [evidence(["ac1", "ac2"])]}, **s.lease_fields(item_id))
    s.accept_result(item_id)
    return item_id


@pytest.fixture
def owner_in_three_groups(db):
    """One human owner of a Mission in each of three Groups, each with a risky queued
    item, plus a finished Mission in the first: (owner client, scenarios, items)."""
    groups = [Scenario() for _ in range(3)]
    owner = groups[0].owner
    for s in groups[1:]:
        from apps.identity import registry

        registry.add_member(s.world.group, owner.principal, ["owner"])
        s.owner = owner
        s.mission_id = s.c.ok("mission.create", {
            "title": "Elsewhere", "ownerId": owner.principal,
            "coordinatorId": s.c.principal})[0]["missionId"]
    risky = [s.queued(s.w1, risk=RISKY) for s in groups]
    return owner, groups, risky


def test_waiting_on_me_lists_exactly_the_owners_decisions_across_groups(owner_in_three_groups):
    owner, groups, risky = owner_in_three_groups
    done = groups[0]
    finished = done.c.ok("mission.create", {"title": "Done", "ownerId": owner.principal,
                                            "coordinatorId": done.c.principal})[0]["missionId"]
    done.mission_id = finished
    verified(done)
    stranger = Scenario()  # a Group the owner is not in, with decisions of its own
    stranger.queued(stranger.w1, risk=RISKY)

    rows = waiting_rows(owner.client)
    one_group = waiting_rows(owner.client, f"?group={groups[1].world.group.id}")
    one_mission = waiting_rows(owner.client, f"?mission={finished}")
    theirs = waiting_rows(stranger.owner.client)

    assert {(k, i) for k, _, i in rows} == {("execution-approval", i) for i in risky} | {
        ("final-approval", None)}
    # Oldest first: the three approvals were asked for in this order, the Mission last.
    assert [i for _, _, i in rows] == [*risky, None]
    assert [i for _, _, i in one_group] == [risky[1]]
    assert one_mission == [("final-approval", finished, None)]
    assert [k for k, _, _ in theirs] == ["execution-approval"]
    assert all(i not in risky for _, _, i in theirs)


def test_the_owner_grants_one_execution_and_refuses_another(owner_in_three_groups):
    owner, groups, risky = owner_in_three_groups
    first, second = groups[0], groups[1]

    card = html_of(owner.client.get(item_url(first, risky[0])))
    granted = owner.client.post(item_url(first, risky[0], "grant-execution"),
                                {"grant-comment": "backups checked"})
    refused = owner.client.post(item_url(second, risky[1], "refuse-execution"),
                                {"refuse-reason": "no rollback plan"})

    assert "Budget at stake" in card and "Allowed tools" in card and "high" in card
    assert 'id="grant-execution"' in card and 'id="refuse-execution"' in card
    assert granted.status_code == refused.status_code == 302
    assert Event.objects.get(group_id=first.world.group.id,
                             type="approval.execution_granted").data["comment"] == \
        "backups checked"
    event = last_event(second)
    assert (event.type, event.actor, event.data["reason"]) == (
        "approval.execution_refused", owner.principal, "no rollback plan")
    assert {i for _, _, i in waiting_rows(owner.client)} & set(risky[:2]) == set()


def test_a_refused_execution_waits_on_the_human_coordinator(scenario):
    s = scenario
    hc = human_coordinator(s)
    item_id = s.queued(s.w1, risk=RISKY)

    s.owner.client.post(item_url(s, item_id, "refuse-execution"),
                        {"refuse-reason": "no rollback plan"})
    rows = waiting_rows(hc.client)
    page = html_of(hc.client.get("/"))

    assert ("execution-refused", s.mission_id, item_id) in rows
    assert "refused execution: no rollback plan" in page


def test_the_card_shows_what_waits_downstream(scenario):
    s = scenario
    item_id = s.queued(s.w1, risk=RISKY)
    after = s.authorize(dependencies={"workItems": [item_id], "policy": "all_verified"})
    last = s.authorize(dependencies={"workItems": [after], "policy": "all_verified"})

    card = html_of(s.owner.client.get(item_url(s, item_id)))
    downstream = re.search(r'<dd id="downstream">(.*?)</dd>', card, re.S).group(1)

    assert after in downstream and last in downstream


def test_approval_is_disabled_until_every_item_is_verified_then_given(scenario):
    s = scenario
    done = verified(s)
    pending = s.authorize(goal="Not yet")

    blocked = html_of(s.owner.client.get(mission_url(s)))
    s.c.ok("work.cancel", {"reason": "not needed"}, workItemId=pending)
    ready = html_of(s.owner.client.get(mission_url(s)))
    approved = s.owner.client.post(mission_url(s, "approve"), {"comment": "read it all"})

    assert re.search(r'id="approve-mission" disabled', blocked)
    assert f"not every WorkItem is verified or cancelled yet: {pending}" in blocked
    matrix = re.search(rf'<table class="matrix" data-matrix-item="{done}">(.*?)</table>',
                       ready, re.S).group(1)
    assert 'data-criterion="ac1"' in matrix and 'data-criterion="ac2"' in matrix
    assert "Artifacts cited" in matrix
    assert f"accepted by {s.c.principal}" in ready  # the decision, beside the Evidence
    assert not re.search(r'id="approve-mission" disabled', ready)
    assert approved.status_code == 302 and last_event(s).type == "mission.approved"


def test_an_empty_mission_cannot_be_approved(scenario):
    s = scenario

    page = html_of(s.owner.client.get(mission_url(s)))

    assert re.search(r'id="approve-mission" disabled', page)
    assert "no WorkItem is verified" in page


def test_refusing_the_approval_reaches_the_coordinator_and_keeps_the_mission_open(scenario):
    s = scenario
    hc = human_coordinator(s)
    item_id = verified(s)

    refused = s.owner.client.post(mission_url(s, "refuse-approval"), {
        "refuse-reason": "the summary misses Q4", "refuse-item_0": "cite the sources"})
    rows = waiting_rows(hc.client)
    home = html_of(hc.client.get("/"))
    mission_page = html_of(hc.client.get(mission_url(s)))

    assert refused.status_code == 302
    event = last_event(s)
    assert event.type == "mission.approval_refused"
    assert event.data["workItems"] == [{"workItemId": item_id, "reason": "cite the sources"}]
    assert ("approval-refused", s.mission_id, None) in rows
    assert f"refused the final Approval: the summary misses Q4; {item_id}: cite the sources" \
        in home
    assert 'id="mission-state">active<' in mission_page


def test_a_member_of_another_group_sees_none_of_it(scenario):
    s = scenario
    s.queued(s.w1, risk=RISKY)
    other = Scenario()

    assert waiting_rows(other.owner.client) == []
    assert s.world.group.id not in html_of(other.owner.client.get("/"))


def test_the_coordinator_is_waited_on_for_reviews_blocks_ambiguities_and_reoffers(scenario):
    s = scenario
    hc = human_coordinator(s)
    to_review = s.running(s.w1)[0]
    s.w1.ok("work.submit", {"contractRevision": 1, "artifacts": [s.deliver(to_review)],
                            "evidence": [evidence(["ac1", "ac2"])]},
            **s.lease_fields(to_review))
    blocked, _ = s.running(s.w2)
    s.w2.ok("work.block", {"checkpoint": {"progress": {"phase": "draft"}},
                           "requiredResolution": "the archive password"},
            **s.lease_fields(blocked))
    unclear = s.authorize(goal="Unclear")
    s.w1.ok("conversation.post", {"kind": "ambiguity", "text": "Which archive?"},
            workItemId=unclear)
    failed, _ = s.running(s.w1)
    s.w1.ok("work.fail", {"evidence": [evidence(["ac1"], result="fail: crashed")],
                          "reason": "crashed", "permanent": True}, **s.lease_fields(failed))

    rows = {(kind, item) for kind, _, item in waiting_rows(hc.client)}
    owner_rows = waiting_rows(s.owner.client)

    assert {("review", to_review), ("unblock", blocked), ("ambiguity", unclear),
            ("re-offer", failed)} <= rows
    assert "the archive password" in html_of(hc.client.get("/"))
    assert owner_rows == []  # none of these is the MissionOwner's to decide
