"""Every WorkItem state × every command type against the §10.2 table (lifecycle.TABLE and
lifecycle.WITHIN_STATE): a pair in the table is decided and lands in one of the row's
targets; any other pair is TRANSITION_NOT_PERMITTED (lease-holder commands are fenced first,
see LEASE_HOLDER_COMMANDS). Plus the rows that are not commands a client sends:
work.propose/work.authorize (none/proposal), offer expiry, and the Mission rows driven by
mission.approve / mission.fail / mission.cancel.

Every permitted pair's own preconditions can be met by the builder in every source state,
so none is skipped."""

from dataclasses import replace

import pytest

from mission_weave.core import commands, lifecycle, state
from mission_weave.core.commands import authority
from mission_weave.protocol.errors import ProtocolError
from tests.unit import builders
from tests.unit.builders import AGENT, COORDINATOR, HUMAN, WORKER, contract, evidence, iso, progress

ITEM_STATES = tuple(s for s in lifecycle.STATES if s not in (lifecycle.NONE, lifecycle.PROPOSAL))

# A valid body for every command that targets a WorkItem (the body is checked before the
# table, so an invalid one would hide the table's answer).
BODIES = {
    "work.offer": {"candidates": [WORKER], "mode": "sequential", "expiresAt": iso(3600)},
    "work.accept_offer": {"contractRevision": 2},
    "approval.grant_execution": {"comment": "risk reviewed"},
    "approval.refuse_execution": {"reason": "the rollback plan is missing"},
    "work.start": {},
    "work.checkpoint": {"progress": progress()},
    "work.block": {"checkpoint": {"progress": progress()},
                   "requiredResolution": "needs the Q3 figures"},
    "work.unblock": {"resolution": "figures attached"},
    "work.submit": {"contractRevision": 1, "artifacts": [builders.DELIVERABLE],
                    "evidence": [evidence(["ac1", "ac2"])]},
    "work.accept_result": {"evidence": [evidence(["ac1", "ac2"], producer=COORDINATOR)]},
    "work.fail": {"evidence": [evidence(["ac1"], result="tool outage", producer=COORDINATOR)],
                  "reason": "outage"},
    "work.cancel": {"reason": "no longer needed"},
    "mission.create_child": {"title": "Gather the figures", "childFailurePolicy": "fail"},
    "work.decline_offer": {"reason": "capacity"},
    "work.revise_contract": {"contract": contract(goal="Summarize the annual report")},
    "lease.renew": {"leaseSeconds": 120},
    "work.progress": progress(),
    "work.request_preemption": {"reason": "a critical Mission needs the slot"},
    "conversation.post": {"kind": "message", "text": "Which quarter?"},
    "capability.rotate": {},
    "capability.narrow": {"scopes": {"tools": []}},
    # by a reviewer: the agent that did the work never reviews it (commands/review.py)
    "evidence.record": {"evidence": [evidence(["ac1"], record_id="ev-review",
                                              producer="agent:rev")]},
    "usage.record": {"tokens": 1200, "toolCalls": 3},
    "schedule.disclose": {"estimatedStart": {"from": iso(60), "to": iso(600)},
                          "estimatedCompletion": iso(1800), "confidence": 0.6,
                          "capacityStatus": "busy", "calculatedAt": iso(0)},
}

# How the item is built so that the command's own preconditions hold in every source state
# of its row(s). Commands not listed use the default item of the state.
ITEM_SETUP = {
    # The row reads "with no live owner": queued/active/blocked items get an owner whose
    # start-by / lease / blocked lease ran out, so the offer fences it first.
    "work.offer": {"owner_live": False},
    # offered: accept the current revision 2. queued (WITHIN_STATE): the owner renews
    # acceptance of a contract revised from 1 to 2 after it accepted (§10.1).
    "work.accept_offer": {"contract_revision": 2},
    # "when required": the grant is only meaningful for a contract that asks for it.
    "approval.grant_execution": {"requires_approval": True},
    "approval.refuse_execution": {"requires_approval": True},
}

# approval.grant_execution is given by the Mission's human MissionOwner and the
# Coordinator's commands by the Mission's Coordinator (authority.py); every other command
# here is sent by the agent that holds the offer / ownership / lease of the built item.
ACTORS = {"approval.grant_execution": HUMAN, "approval.refuse_execution": HUMAN,
          "evidence.record": "agent:rev",
          **dict.fromkeys(authority.COORDINATOR, COORDINATOR)}


def rows_for(item_state: str, trigger: str) -> list:
    return [row for row in lifecycle.TABLE + lifecycle.WITHIN_STATE
            if row.trigger == trigger and item_state in row.sources]


def targets(item_state: str, trigger: str) -> set:
    """The table's next states for the pair ("same" means the state itself)."""
    found = set().union(*(row.targets for row in rows_for(item_state, trigger)))
    return {item_state if target == "same" else target for target in found}


# Commands only the holder of the current Execution Lease sends (PROTOCOL §2: they carry
# leaseId). They are fenced before the table is consulted, so that a late result from a
# fenced owner is STALE_OWNERSHIP / STALE_LEASE / LEASE_EXPIRED whatever state the item
# moved on to (§11.5). Outside `active` no open lease exists (test_replay checks that), so
# there such a command is always refused by fencing.
LEASE_HOLDER_COMMANDS = ("lease.renew", "work.progress", "work.checkpoint", "work.block",
                         "work.submit", "capability.rotate", "capability.narrow", "usage.record")

PAIRS = [(s, c) for s in ITEM_STATES for c in lifecycle.ITEM_COMMANDS]
PERMITTED = [pair for pair in PAIRS if rows_for(*pair)]
FORBIDDEN = [pair for pair in PAIRS if not rows_for(*pair)]
FORBIDDEN_BY_TABLE = [pair for pair in FORBIDDEN if pair[1] not in LEASE_HOLDER_COMMANDS]
FORBIDDEN_BY_FENCING = [pair for pair in FORBIDDEN if pair[1] in LEASE_HOLDER_COMMANDS]


def pair_id(pair) -> str:
    return f"{pair[0]}-{pair[1]}"


def decide_on(item_state: str, command_type: str, **command_fields):
    item = builders.work_item(item_state, **ITEM_SETUP.get(command_type, {}))
    view = builders.with_deliverable(builders.view_of(item), item.id)
    command = builders.command(command_type, BODIES[command_type], item,
                               actor=ACTORS.get(command_type, AGENT), **command_fields)
    return item, view, commands.decide(view, command, builders.context())


# --- the table itself ------------------------------------------------------------------------

def test_every_item_command_is_a_command_type_and_has_a_body_here():
    assert set(lifecycle.ITEM_COMMANDS) <= set(commands.COMMAND_TYPES)
    assert set(BODIES) == set(lifecycle.ITEM_COMMANDS)
    assert set(ITEM_STATES) == set(builders.ITEM_STATES)


def test_commands_not_targeting_an_item_are_the_mission_and_creation_commands():
    assert set(commands.COMMAND_TYPES) - set(lifecycle.ITEM_COMMANDS) == {
        "mission.create", "mission.approve", "mission.refuse_approval", "mission.fail",
        "mission.cancel",
        "work.propose", "work.authorize",
        # §13: artifacts and Context Packages move no WorkItem (the lease is checked apart)
        "artifact.publish", "context.publish", "artifact.forward",
        "artifact.approve_forwarding"}


def test_the_product_is_split_exactly_once():
    assert len(PAIRS) == len(ITEM_STATES) * len(lifecycle.ITEM_COMMANDS)
    assert len(PERMITTED) + len(FORBIDDEN) == len(PAIRS)
    assert set(PERMITTED).isdisjoint(FORBIDDEN)


# §10.2 transcribed by hand from the seed, row by row: (current states, transition, next).
SEED_ROWS = [
    ("none", "work.propose", "proposal"),
    ("none proposal", "work.authorize", "open"),
    ("open offered queued active blocked failed", "work.offer", "offered"),
    ("offered", "work.accept_offer", "queued"),
    ("offered", "offer expiry", "offered"),
    ("queued", "approval.grant_execution", "queued"),
    ("queued", "work.start", "active"),
    ("active", "work.checkpoint", "queued"),
    ("active", "work.block", "blocked"),
    ("blocked", "work.unblock", "queued open"),
    ("active", "work.submit", "submitted"),
    ("submitted", "work.accept_result", "verified"),
    ("open offered queued active blocked submitted", "work.fail", "failed"),
    ("open offered queued active blocked submitted", "work.cancel", "cancelled"),
    ("open offered queued active blocked", "mission.create_child", "blocked"),
    ("blocked", "child mission approval", "verified"),
    ("blocked", "child mission failure", "blocked failed"),
    ("open offered queued active blocked submitted", "parent mission failure or cancellation",
     "failed cancelled"),
]


def test_the_table_is_the_seed_line_for_line():
    assert [(r.sources, r.trigger, r.targets) for r in lifecycle.TABLE] == [
        (frozenset(sources.split()), trigger, frozenset(nexts.split()))
        for sources, trigger, nexts in SEED_ROWS]


def test_terminal_states_accept_only_conversation():
    for terminal in (state.VERIFIED, state.CANCELLED):
        assert [c for s, c in PERMITTED if s == terminal] == ["conversation.post"]


def test_failed_returns_control_to_the_coordinator_only_through_offer():
    moves = {c for s, c in PERMITTED if s == state.FAILED and targets(s, c) != {s}}
    assert moves == {"work.offer"}


def test_markdown_rendering_has_one_line_per_row():
    lines = lifecycle.as_markdown().splitlines()
    assert len(lines) == 2 + len(lifecycle.TABLE)
    assert "| offered | `work.accept_offer` | queued | Atomic ownership epoch begins |" in lines


# --- every state × every item command ----------------------------------------------------------

@pytest.mark.parametrize(("item_state", "command_type"), PERMITTED, ids=map(pair_id, PERMITTED))
def test_permitted_pair_is_decided_into_a_target_state(item_state, command_type):
    item, view, drafts = decide_on(item_state, command_type)

    after = builders.apply(view, drafts)

    assert drafts
    assert {d.work_item_id for d in drafts} == {item.id}
    assert after.items[item.id].state in targets(item_state, command_type)
    assert view.items[item.id] is item  # decide never changes the view it is given


@pytest.mark.parametrize(("item_state", "command_type"), FORBIDDEN_BY_TABLE,
                         ids=map(pair_id, FORBIDDEN_BY_TABLE))
def test_pair_outside_the_table_is_transition_not_permitted(item_state, command_type):
    with pytest.raises(ProtocolError) as raised:
        decide_on(item_state, command_type)

    assert raised.value.code == "TRANSITION_NOT_PERMITTED"
    assert raised.value.details == {"state": item_state, "command": command_type}


@pytest.mark.parametrize(("item_state", "command_type"), FORBIDDEN_BY_FENCING,
                         ids=map(pair_id, FORBIDDEN_BY_FENCING))
def test_lease_command_outside_the_table_is_refused_by_fencing(item_state, command_type):
    # A delayed command naming the agent's Lease ID: in the built item that lease is
    # closed (released, revoked) or was never granted.
    with pytest.raises(ProtocolError) as raised:
        decide_on(item_state, command_type, lease_id=builders.LEASE_ID)
    with pytest.raises(ProtocolError) as table:
        lifecycle.permitted(item_state, command_type)

    assert raised.value.code == "STALE_LEASE"
    assert table.value.code == "TRANSITION_NOT_PERMITTED"


def test_lease_commands_are_permitted_only_while_active():
    assert {s for s, c in PERMITTED if c in LEASE_HOLDER_COMMANDS} == {state.ACTIVE}


# --- none / open Work Proposal ------------------------------------------------------------------

def propose(view, command_id="cmd-propose", **body):
    command = builders.command("work.propose", {"missionId": builders.MISSION_ID,
                                                "contract": contract(), **body},
                               actor=AGENT, roles={"observer"}, command_id=command_id)
    return commands.decide(view, command, builders.context())


def authorize(view, command_id="cmd-authorize", **body):
    command = builders.command("work.authorize", {"missionId": builders.MISSION_ID,
                                                  "contract": contract(), **body},
                               actor=COORDINATOR, roles={"coordinator"}, command_id=command_id)
    return commands.decide(view, command, builders.context())


def test_propose_from_none_opens_a_work_proposal_and_no_work_item():
    view = builders.view_of(missions=[builders.mission()])

    drafts = propose(view, proposalId="prp-1")
    after = builders.apply(view, drafts)

    assert [d.type for d in drafts] == ["work.proposed"]
    assert lifecycle.permitted(lifecycle.NONE, "work.propose") == {lifecycle.PROPOSAL}
    assert after.proposals["prp-1"].status == "open"
    assert after.proposals["prp-1"].proposer == AGENT
    assert after.items == {}


def test_authorize_from_none_creates_an_open_work_item():
    view = builders.view_of(missions=[builders.mission()])

    drafts = authorize(view, workItemId="wi-new")
    after = builders.apply(view, drafts)

    assert [d.type for d in drafts] == ["work.authorized"]
    assert after.items["wi-new"].state == state.OPEN
    assert after.items["wi-new"].contract_revision == 1
    assert after.missions[builders.MISSION_ID].work_items == ("wi-new",)


def test_authorize_from_an_open_proposal_creates_an_open_work_item_and_closes_the_proposal():
    view = builders.apply(builders.view_of(missions=[builders.mission()]),
                          propose(builders.view_of(missions=[builders.mission()]),
                                  proposalId="prp-1"))

    drafts = authorize(view, workItemId="wi-new", proposalId="prp-1")
    after = builders.apply(view, drafts)

    assert after.items["wi-new"].state == state.OPEN
    assert after.items["wi-new"].proposal_id == "prp-1"
    assert after.proposals["prp-1"].status == "authorized"
    assert after.proposals["prp-1"].work_item_id == "wi-new"


def test_an_authorized_proposal_cannot_be_authorized_again():
    view = builders.view_of(missions=[builders.mission()])
    view = builders.apply(view, propose(view, proposalId="prp-1"))
    view = builders.apply(view, authorize(view, workItemId="wi-a", proposalId="prp-1"))

    with pytest.raises(ProtocolError) as raised:
        authorize(view, command_id="cmd-again", workItemId="wi-b", proposalId="prp-1")

    assert raised.value.code == "TRANSITION_NOT_PERMITTED"


# --- offer expiry -----------------------------------------------------------------------------

def test_offer_expiry_keeps_the_item_offered_and_appends_nothing():
    item = builders.work_item(state.OFFERED, offers=(builders.offer(expires_in=60),))
    view = builders.view_of(item)
    later = builders.context(now=builders.at(61))
    accept = builders.command("work.accept_offer", {"contractRevision": 1}, item)

    with pytest.raises(ProtocolError) as raised:
        commands.decide(view, accept, later)

    assert lifecycle.permitted(state.OFFERED, "offer expiry") == {state.OFFERED}
    assert "offer expiry" not in commands.COMMAND_TYPES  # no command, so no Event
    assert raised.value.code == "OFFER_NOT_LIVE"
    assert raised.value.details == {"status": "expired"}
    assert view.items[item.id] == item
    assert view.items[item.id].state == state.OFFERED


def test_an_offer_is_live_until_the_instant_it_expires():
    item = builders.work_item(state.OFFERED, offers=(builders.offer(expires_in=60),))
    view = builders.view_of(item)
    accept = builders.command("work.accept_offer", {"contractRevision": 1}, item)

    drafts = commands.decide(view, accept, builders.context(now=builders.at(59)))

    assert [d.type for d in drafts] == ["work.offer_accepted"]
    with pytest.raises(ProtocolError, match="expired"):
        commands.decide(view, accept, builders.context(now=builders.at(60)))


def test_an_expired_offer_is_replaced_by_a_new_work_offer():
    item = builders.work_item(state.OFFERED, offers=(builders.offer(expires_in=60),))
    view = builders.view_of(item)
    reoffer = builders.command("work.offer", {"candidates": [builders.WORKER_2],
                                              "mode": "sequential", "expiresAt": iso(7200)},
                               item, actor=COORDINATOR)

    drafts = commands.decide(view, reoffer, builders.context(now=builders.at(61)))
    after = builders.apply(view, drafts, builders.at(61))

    assert [d.type for d in drafts] == ["work.offered"]  # nothing live to withdraw
    assert after.items[item.id].state == state.OFFERED
    assert [o.agent_id for o in after.items[item.id].live_offers(builders.at(61))] == ["w2"]


# --- linked child Mission rows ---------------------------------------------------------------

CHILD_ID = "msn-child"


def with_child(policy: str):
    """A parent WorkItem blocked on its child Mission, through mission.create_child."""
    item = builders.work_item(state.ACTIVE)
    view = builders.view_of(item)
    create = builders.command("mission.create_child",
                              {"childMissionId": CHILD_ID, "title": "Gather the figures",
                               "childFailurePolicy": policy}, item, actor=COORDINATOR)
    view = builders.apply(view, commands.decide(view, create, builders.context()))
    return item, view


def mission_command(command_type: str, mission_id: str, actor: str = HUMAN, **body):
    return builders.command(command_type, {"missionId": mission_id, **body}, actor=actor,
                            command_id=f"cmd-{command_type}-{mission_id}")


def test_create_child_blocks_the_parent_and_fences_its_ownership():
    item, view = with_child("fail")

    parent = view.items[item.id]
    assert parent.state == state.BLOCKED
    assert parent.owner is None
    assert parent.child_mission_id == CHILD_ID
    assert parent.lease.close_reason == "revoked"
    assert view.missions[CHILD_ID].parent_work_item_id == item.id
    assert view.missions[CHILD_ID].owner_id == HUMAN


def test_child_mission_approval_verifies_the_blocked_parent_with_evidence():
    item, view = with_child("fail")
    # The child did its work: one verified WorkItem (an empty Mission cannot be approved).
    view.items["wi-child"] = builders.work_item(state.VERIFIED, item_id="wi-child",
                                                mission_id=CHILD_ID)
    view.missions[CHILD_ID] = replace(view.missions[CHILD_ID], work_items=("wi-child",))

    drafts = commands.decide(view, mission_command("mission.approve", CHILD_ID),
                             builders.context())
    after = builders.apply(view, drafts)

    assert [d.type for d in drafts] == ["mission.approved", "work.verified"]
    assert lifecycle.permitted(state.BLOCKED, "child mission approval") == {state.VERIFIED}
    assert after.items[item.id].state == state.VERIFIED
    assert after.missions[CHILD_ID].state == state.MISSION_APPROVED
    (record,) = drafts[1].data["evidence"]
    assert record["subject"] == f"mission:{CHILD_ID}"
    assert record["criteria"] == ["ac1", "ac2"]
    assert record["method"] == "child-mission-approval"


def test_child_mission_with_unfinished_work_cannot_be_approved():
    item, view = with_child("fail")
    view.items["wi-child"] = builders.work_item(state.ACTIVE, item_id="wi-child",
                                                mission_id=CHILD_ID)
    view.missions[CHILD_ID] = replace(view.missions[CHILD_ID], work_items=("wi-child",))

    with pytest.raises(ProtocolError) as raised:
        commands.decide(view, mission_command("mission.approve", CHILD_ID), builders.context())

    assert raised.value.code == "TRANSITION_NOT_PERMITTED"
    assert raised.value.details == {"unfinished": ["wi-child"]}
    assert view.items[item.id].state == state.BLOCKED


@pytest.mark.parametrize("command_type", ["mission.fail", "mission.cancel"])
def test_child_mission_failure_with_fail_policy_fails_the_parent(command_type):
    item, view = with_child("fail")

    drafts = commands.decide(view, mission_command(command_type, CHILD_ID, reason="no data"),
                             builders.context())
    after = builders.apply(view, drafts)

    assert lifecycle.permitted(state.BLOCKED, "child mission failure") == {state.BLOCKED,
                                                                           state.FAILED}
    assert drafts[-1].type == "work.failed"
    assert drafts[-1].data["cause"] == "child mission failure"
    assert drafts[-1].data["evidence"][0]["method"] == "child-mission-outcome"
    assert after.items[item.id].state == state.FAILED


@pytest.mark.parametrize("command_type", ["mission.fail", "mission.cancel"])
def test_child_mission_failure_with_block_policy_keeps_the_parent_blocked(command_type):
    item, view = with_child("block")

    drafts = commands.decide(view, mission_command(command_type, CHILD_ID, reason="no data"),
                             builders.context())
    after = builders.apply(view, drafts)

    assert drafts[-1].type == "work.child_mission_failed"
    assert after.items[item.id].state == state.BLOCKED
    assert after.items[item.id].child_mission_id is None
    assert after.items[item.id].required_resolution == f"child Mission {CHILD_ID} failed"


def test_a_parent_kept_blocked_by_a_failed_child_can_be_unblocked_and_reoffered():
    item, view = with_child("block")
    view = builders.apply(view, commands.decide(
        view, mission_command("mission.fail", CHILD_ID, reason="no data"), builders.context()))
    unblock = builders.command("work.unblock", {"resolution": "do it without the child"},
                               view.items[item.id], actor=COORDINATOR)

    after = builders.apply(view, commands.decide(view, unblock, builders.context()))

    # Ownership was fenced when the child was created, so the item is offered again.
    assert after.items[item.id].state == state.OPEN


def test_a_parent_blocked_on_a_running_child_cannot_be_offered_again():
    # Fixed in work_offer: the parent used to become `offered` while its child ran, after
    # which mission.approve on the child was TRANSITION_NOT_PERMITTED forever.
    item, view = with_child("block")
    offer = builders.command("work.offer", BODIES["work.offer"], view.items[item.id],
                             actor=COORDINATOR)

    with pytest.raises(ProtocolError) as raised:
        commands.decide(view, offer, builders.context())

    assert raised.value.code == "TRANSITION_NOT_PERMITTED"
    assert raised.value.details == {"childMissionId": CHILD_ID}


def test_a_parent_whose_child_was_cancelled_can_be_offered_again():
    item, view = with_child("block")
    view = builders.apply(view, commands.decide(
        view, mission_command("mission.cancel", CHILD_ID, actor=COORDINATOR),
        builders.context()))
    offer = builders.command("work.offer", BODIES["work.offer"], view.items[item.id],
                             actor=COORDINATOR)

    after = builders.apply(view, commands.decide(view, offer, builders.context()))

    assert after.items[item.id].state == state.OFFERED
    assert after.missions[CHILD_ID].state == state.MISSION_CANCELLED


def test_a_parent_blocked_on_a_running_child_cannot_be_unblocked():
    item, view = with_child("block")
    unblock = builders.command("work.unblock", {"resolution": "skip it"}, view.items[item.id],
                               actor=COORDINATOR)

    with pytest.raises(ProtocolError) as raised:
        commands.decide(view, unblock, builders.context())

    assert raised.value.code == "TRANSITION_NOT_PERMITTED"
    assert raised.value.details == {"childMissionId": CHILD_ID}


# --- parent Mission failure or cancellation ---------------------------------------------------

MISSION_END = [("mission.fail", state.FAILED, state.MISSION_FAILED),
               ("mission.cancel", state.CANCELLED, state.MISSION_CANCELLED)]
MISSION_EVENT = {"mission.fail": "mission.failed", "mission.cancel": "mission.cancelled"}
UNFINISHED = [s for s in ITEM_STATES if s in lifecycle.TABLE[-1].sources]
FINISHED = [s for s in ITEM_STATES if s not in lifecycle.TABLE[-1].sources]


def test_the_mission_row_covers_exactly_the_unfinished_states():
    assert lifecycle.TABLE[-1].trigger == "parent mission failure or cancellation"
    assert set(UNFINISHED) == state.UNFINISHED
    assert set(FINISHED) == {state.VERIFIED, state.FAILED, state.CANCELLED}


@pytest.mark.parametrize("item_state", UNFINISHED)
@pytest.mark.parametrize(("command_type", "item_target", "mission_target"), MISSION_END)
def test_mission_end_propagates_to_an_unfinished_item(item_state, command_type, item_target,
                                                      mission_target):
    item = builders.work_item(item_state)
    view = builders.view_of(item)

    drafts = commands.decide(view, mission_command(command_type, builders.MISSION_ID,
                                                   actor=COORDINATOR, reason="budget cut"),
                             builders.context())
    after = builders.apply(view, drafts)

    assert after.items[item.id].state == item_target
    assert after.items[item.id].state in targets(item_state,
                                                 "parent mission failure or cancellation")
    assert after.items[item.id].live_lease is None
    assert after.items[item.id].live_offers(builders.T0) == ()
    assert after.missions[builders.MISSION_ID].state == mission_target
    assert drafts[-1].type == MISSION_EVENT[command_type]
    assert drafts[-1].work_item_id is None


@pytest.mark.parametrize("item_state", FINISHED)
@pytest.mark.parametrize(("command_type", "item_target", "mission_target"), MISSION_END)
def test_mission_end_leaves_a_finished_item_alone(item_state, command_type, item_target,
                                                  mission_target):
    item = builders.work_item(item_state)
    view = builders.view_of(item)

    drafts = commands.decide(view, mission_command(command_type, builders.MISSION_ID,
                                                   actor=COORDINATOR), builders.context())
    after = builders.apply(view, drafts)

    assert [d.work_item_id for d in drafts] == [None]
    assert after.items[item.id].state == item_state
    assert after.missions[builders.MISSION_ID].state == mission_target


@pytest.mark.parametrize("command_type", ["work.offer", "work.revise_contract"])
def test_work_of_an_ended_mission_is_closed(command_type):
    item = builders.work_item(state.FAILED)
    view = builders.view_of(item, missions=[builders.mission(state=state.MISSION_FAILED)])
    command = builders.command(command_type, BODIES[command_type], item, actor=COORDINATOR)

    with pytest.raises(ProtocolError) as raised:
        commands.decide(view, command, builders.context())

    assert raised.value.code == "TRANSITION_NOT_PERMITTED"
    assert raised.value.details == {"missionState": state.MISSION_FAILED}
