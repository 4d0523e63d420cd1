"""The budgets view (apps/dashboard/budget_report.py) on real charges from usage.record: what a
worker spent shows as charged on its WorkItem and Mission, a child Mission's charges as
charged on the parent WorkItem and Mission too, and usage refused with BUDGET_EXCEEDED as a
refused overspend naming the budget it would have overflowed. The partial rendered."""

import re
from decimal import Decimal

import pytest
from django.template.loader import render_to_string

from apps.dashboard import budget_report
from apps.work import models as work_models
from mission_weave.core import state, state_documents
from tests.support import Scenario, assert_error, later

MAX = {"financial": {"amount": "10.00", "currency": "USD"}, "tokens": 1000, "toolCalls": 10,
       "computeSeconds": 600, "wallClockSeconds": 3600, "sideEffects": 1}
PROGRESS = {"phase": "draft", "milestones": [], "nextCheckpoint": "figures", "blockers": [],
            "estimate": {"remainingSeconds": 900}}


@pytest.fixture
def s(db, clock):
    return Scenario()


def mission(s: Scenario, mission_id=None) -> state.Mission:
    return state_documents.mission_from_doc(work_models.Mission.objects.get(
        group_id=s.world.group.id, mission_id=mission_id or s.mission_id).doc)


def item(s: Scenario, item_id: str) -> state.WorkItem:
    return state_documents.item_from_doc(work_models.WorkItem.objects.get(
        group_id=s.world.group.id, work_item_id=item_id).doc)


def charged(found: list) -> dict:
    return {row["dimension"]: row["charged"] for row in found if row["charged"]}


def budgeted_mission(s: Scenario, **mission_budgets) -> str:
    s.mission_id = s.c.ok("mission.create", {
        "title": "Budgeted", "ownerId": s.owner.principal, "coordinatorId": s.c.principal,
        "budgets": mission_budgets})[0]["missionId"]
    return s.mission_id


def test_what_a_worker_records_is_charged_on_the_item_and_its_mission(s):
    budgeted_mission(s, tokens=2000, financial={"amount": "20.00", "currency": "USD"})
    item_id, _ = s.running(budgets=MAX)
    idle, _ = s.running(budgets=MAX)
    s.w1.ok("usage.record", {"tokens": 400, "financial": {"amount": "2.50", "currency": "USD"}},
            **s.lease_fields(item_id))
    s.w1.ok("usage.record", {"tokens": 100, "toolCalls": 2}, **s.lease_fields(item_id))

    spent = {"tokens": 500, "toolCalls": 2, "financial": Decimal("2.50")}
    own = budget_report.item_budgets(s.world.group.id, item(s, item_id))
    assert charged(own["budgets"]) == spent
    tokens = own["budgets"][1]
    assert (tokens["allowed"], tokens["left"], tokens["percent"]) == (1000, 500, 50)
    assert own["overspends"] == []

    page = budget_report.mission_budgets(s.world.group.id, mission(s))
    assert charged(page["budgets"]) == spent
    money, tokens, tool_calls = page["budgets"][:3]
    assert (money["allowed"], money["left"], money["percent"]) == (
        Decimal("20.00"), Decimal("17.50"), 12)
    assert (tokens["left"], tokens["percent"]) == (1500, 25)
    assert (tool_calls["allowed"], tool_calls["percent"]) == (None, None)  # not budgeted here
    assert [(e["item"].id, charged(e["budgets"])) for e in page["item_budgets"]] == [
        (i, spent if i == item_id else {}) for i in sorted([item_id, idle])]


def test_a_child_missions_charges_roll_up_to_the_parent_item_and_mission(s):
    parent_mission = s.mission_id
    parent = s.authorize(budgets={**MAX, "tokens": 300})
    child_mission = s.in_child_mission(parent)
    child_item, _ = s.running(budgets=MAX)
    s.w1.ok("usage.record", {"tokens": 250, "computeSeconds": 30},
            **s.lease_fields(child_item))
    refused = assert_error(s.w1.send("usage.record", {"tokens": 100},
                                     **s.lease_fields(child_item)), 409, "BUDGET_EXCEEDED")

    spent = {"tokens": 250, "computeSeconds": 30}
    group_id = s.world.group.id
    on_parent = budget_report.item_budgets(group_id, item(s, parent))
    assert charged(on_parent["budgets"]) == spent
    assert (on_parent["budgets"][1]["left"], on_parent["budgets"][1]["percent"]) == (50, 83)
    above = budget_report.mission_budgets(group_id, mission(s, parent_mission))
    assert charged(above["budgets"]) == spent
    assert [(e["item"].id, charged(e["budgets"])) for e in above["item_budgets"]] == [
        (parent, spent)]
    assert charged(budget_report.mission_budgets(group_id, mission(s, child_mission))["budgets"]) \
        == spent

    # The refusal was aimed at the child's item and named the parent item's budget: it
    # is listed wherever that usage would have been charged.
    for found in (on_parent["overspends"], above["overspends"],
                  budget_report.refused_overspends(group_id, mission_id=child_mission),
                  budget_report.refused_overspends(group_id, work_item_id=child_item)):
        assert [(o["work_item_id"], o["level"], o["level_id"], o["would_use"])
                for o in found] == [(child_item, "WorkItem", parent, "350")]
        assert found[0]["message"] == refused["message"]


def test_refused_overspends_say_who_tried_what_when_and_which_budget(s, clock):
    item_id, _ = s.running(budgets=MAX)
    s.w1.ok("usage.record", {"tokens": 900, "financial": {"amount": "1.00", "currency": "USD"}},
            **s.lease_fields(item_id))
    later(clock, 5)
    assert_error(s.w1.send("usage.record", {"tokens": 101, "sideEffects": 1},
                           **s.lease_fields(item_id)), 409, "BUDGET_EXCEEDED")
    later(clock, 5)
    assert_error(s.w1.send("usage.record", {"financial": {"amount": "1", "currency": "EUR"}},
                           **s.lease_fields(item_id)), 409, "BUDGET_EXCEEDED")
    later(clock, 5)
    assert_error(s.w2.send("usage.record", {"tokens": 1}, **s.lease_fields(item_id)),
                 409, "STALE_LEASE")  # refused, but not an overspend

    currency, tokens = budget_report.refused_overspends(s.world.group.id, work_item_id=item_id)

    assert (tokens["actor"], tokens["work_item_id"]) == (s.w1.principal, item_id)
    assert tokens["attempted"] == [("Tokens", "101"), ("Side effects", "1")]
    assert (tokens["level"], tokens["level_id"], tokens["dimension"], tokens["budget"],
            tokens["would_use"]) == ("WorkItem", item_id, "Tokens", "1000", "1001")
    assert currency["at"] > tokens["at"]
    # Money in another currency than the one already counted names no level
    assert currency["attempted"] == [("Money", "1 EUR")]
    assert (currency["level"], currency["dimension"], currency["budget"]) == (
        None, "Money", None)
    assert "EUR" in currency["message"]
    assert [o["command_id"] for o in budget_report.refused_overspends(
        s.world.group.id, mission_id=s.mission_id)] == [currency["command_id"],
                                                        tokens["command_id"]]


def test_refused_overspends_take_a_bounded_number_of_queries(s, django_assert_num_queries):
    item_id, _ = s.running(budgets=MAX)
    with django_assert_num_queries(2):  # the child Missions below, the CommandRecords
        budget_report.refused_overspends(s.world.group.id, work_item_id=item_id)
    with django_assert_num_queries(3):  # and first the Mission's WorkItems
        budget_report.refused_overspends(s.world.group.id, mission_id=s.mission_id)


def test_the_partial_shows_meters_over_budget_rows_and_the_refusals(s):
    item_id, _ = s.running(budgets={**MAX, "tokens": 200})
    s.w1.ok("usage.record", {"tokens": 150, "toolCalls": 10}, **s.lease_fields(item_id))
    assert_error(s.w1.send("usage.record", {"tokens": 51}, **s.lease_fields(item_id)),
                 409, "BUDGET_EXCEEDED")
    # Blocked, the item's contract is revised to a tool-call budget below what it charged
    s.w1.ok("work.block", {"checkpoint": {"progress": PROGRESS},
                           "requiredResolution": "a bigger budget"}, **s.lease_fields(item_id))
    contract = s.item(item_id)["contract"]
    s.c.ok("work.revise_contract", {"contract": {
        **contract, "revision": 2, "budgets": {**contract["budgets"], "toolCalls": 5}}},
        workItemId=item_id)

    html = render_to_string("dashboard/_budgets.html", {
        **budget_report.item_budgets(s.world.group.id, item(s, item_id)),
        "viewer": {"group_id": s.world.group.id}})

    meters = dict(re.findall(r'<tr data-dimension="(\w+)"[^>]*>.*?<meter min="0" max="100" '
                             r'high="80" optimum="0" value="(\d+)"', html, re.S))
    assert meters == {"financial": "0", "tokens": "75", "toolCalls": "200",
                      "computeSeconds": "0", "wallClockSeconds": "0", "sideEffects": "0"}
    assert 'aria-label="Tokens: 75% of the budget charged"' in html
    assert re.findall(r'<tr data-dimension="(\w+)" class="over">', html) == ["toolCalls"]
    overspends = re.search(r'<table id="overspends">.*?</table>', html, re.S).group(0)
    assert "Tokens 51" in overspends and "would have been 201" in overspends
    assert "item-budgets" not in html
