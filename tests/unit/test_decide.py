"""Focused behaviour of `commands.decide`: offers, acceptance, contract revision, evidence,
approval, dependencies, fencing on re-offer, revisions, roles and derived ids."""

import re

import pytest

from mission_weave.core import commands, state
from mission_weave.protocol.errors import ProtocolError
from tests.unit import builders
from tests.unit.builders import (
    AGENT,
    ALL_ROLES,
    COORDINATOR,
    HUMAN,
    OWNERSHIP_EPOCH,
    T0,
    WORKER,
    WORKER_2,
    WORKER_3,
    at,
    contract,
    evidence,
    iso,
    progress,
)

COORD_ROLES = frozenset({"coordinator"})
WORKER_ROLES = frozenset({"worker"})


def run(view, command, now=T0):
    """Decide and evolve: the drafts and the View after them."""
    drafts = commands.decide(view, command, builders.context(now=now))
    return drafts, builders.apply(view, drafts, now)


def rejected(view, command, now=T0) -> ProtocolError:
    with pytest.raises(ProtocolError) as raised:
        commands.decide(view, command, builders.context(now=now))
    return raised.value


def as_worker(agent_id, command_type, body, item, **fields):
    return builders.command(command_type, body, item, actor=f"agent:{agent_id}",
                            roles=WORKER_ROLES, command_id=f"cmd-{command_type}-{agent_id}",
                            **fields)


def as_coordinator(command_type, body, item=None, **fields):
    return builders.command(command_type, body, item, actor=COORDINATOR, roles=COORD_ROLES,
                            command_id=f"cmd-{command_type}", **fields)


def offer_body(candidates, mode="sequential", **extra):
    return {"candidates": list(candidates), "mode": mode, "expiresAt": iso(3600), **extra}


# --- offers ----------------------------------------------------------------------------------

def test_urgent_offer_addresses_every_candidate_and_the_first_acceptance_wins():
    item = builders.work_item(state.FAILED)  # ownership epoch 1 from an earlier attempt
    view = builders.view_of(item)
    _, view = run(view, as_coordinator("work.offer",
                                       offer_body([WORKER, WORKER_2, WORKER_3], "urgent"), item))
    offered = view.items[item.id]

    drafts, after = run(view, as_worker(WORKER_2, "work.accept_offer", {"contractRevision": 1},
                                        offered), now=at(10))

    assert [o.agent_id for o in offered.live_offers(T0)] == [WORKER, WORKER_2, WORKER_3]
    assert [d.type for d in drafts] == ["work.offer_accepted", "work.offer_withdrawn"]
    assert drafts[0].data == {"agentId": WORKER_2, "ownershipEpoch": OWNERSHIP_EPOCH + 1,
                              "startBy": iso(610), "withdrawn": [WORKER, WORKER_3],
                              "contractRevision": 1}
    assert drafts[1].data["agentIds"] == [WORKER, WORKER_3]
    won = after.items[item.id]
    assert won.state == state.QUEUED
    assert won.owner == WORKER_2
    assert won.ownership_epoch == OWNERSHIP_EPOCH + 1
    assert {o.agent_id: o.status for o in won.offers} == {
        WORKER: "withdrawn", WORKER_2: "accepted", WORKER_3: "withdrawn"}


def test_a_losing_candidate_can_neither_accept_nor_start():
    item = builders.work_item(state.OPEN)
    view = builders.view_of(item)
    _, view = run(view, as_coordinator("work.offer", offer_body([WORKER, WORKER_2], "urgent"),
                                       item))
    _, view = run(view, as_worker(WORKER_2, "work.accept_offer", {"contractRevision": 1},
                                  view.items[item.id]))
    queued = view.items[item.id]

    late_accept = rejected(view, as_worker(WORKER, "work.accept_offer",
                                           {"contractRevision": 1}, queued))
    late_start = rejected(view, as_worker(WORKER, "work.start", {}, queued))

    assert late_accept.code == "OFFER_NOT_LIVE"
    assert late_accept.details == {"status": "withdrawn"}
    assert late_start.code == "STALE_OWNERSHIP"


def test_urgent_offer_is_bounded_by_the_candidate_count():
    item = builders.work_item(state.OPEN)
    view = builders.view_of(item)
    command = as_coordinator("work.offer", offer_body([WORKER, WORKER_2, WORKER_3], "urgent",
                                                      candidateCount=2), item)

    error = rejected(view, command)

    assert error.code == "VALIDATION_ERROR"
    assert error.details == {"path": "body.candidates", "maximum": 2}


def test_sequential_offer_addresses_only_the_first_candidate():
    item = builders.work_item(state.OPEN)
    view = builders.view_of(item)

    drafts, after = run(view, as_coordinator("work.offer",
                                             offer_body([WORKER_2, WORKER, WORKER_3]), item))

    (offered,) = drafts
    assert [o["agentId"] for o in offered.data["offers"]] == [WORKER_2]
    assert offered.data["offers"][0]["rank"] == 1
    assert offered.data["pendingCandidates"] == [WORKER, WORKER_3]
    assert after.items[item.id].offer_queue == (WORKER, WORKER_3)
    assert [o.agent_id for o in after.items[item.id].live_offers(T0)] == [WORKER_2]
    error = rejected(after, as_worker(WORKER, "work.accept_offer", {"contractRevision": 1},
                                      after.items[item.id]))
    assert error.code == "OFFER_NOT_LIVE"
    assert error.details == {"status": "not addressed to you"}


def test_an_offer_records_a_structured_selection_basis_per_candidate():
    item = builders.work_item(state.OPEN)
    view = builders.view_of(item)

    (offered,) = commands.decide(view, as_coordinator("work.offer", offer_body([WORKER]), item),
                                 builders.context())

    basis = offered.data["offers"][0]["selectionBasis"]
    assert basis["capabilityMatch"] == {"required": [{"id": "summarize", "version": "1"}],
                                        "missing": [], "matched": True}
    assert basis["authorizationEligible"] is True
    assert basis["policyRules"] == ["explicit-candidates", "mode:sequential"]
    assert set(basis) == {"capabilityMatch", "authorizationEligible", "availability",
                          "expectedCost", "reliability", "policyRules"}


def test_an_offer_to_a_non_worker_is_refused():
    item = builders.work_item(state.OPEN)
    view = builders.view_of(item)

    error = rejected(view, as_coordinator("work.offer", offer_body(["stranger"]), item))

    assert error.code == "VALIDATION_ERROR"
    assert error.details == {"path": "body.candidates", "candidate": "stranger"}


def test_a_declined_offer_cannot_then_be_accepted():
    item = builders.work_item(state.OFFERED)
    view = builders.view_of(item)
    drafts, view = run(view, as_worker(WORKER, "work.decline_offer",
                                       {"reason": "capacity", "detail": "full until noon"},
                                       item))

    error = rejected(view, as_worker(WORKER, "work.accept_offer", {"contractRevision": 1},
                                     view.items[item.id]))

    assert drafts[0].data == {"agentId": WORKER, "reason": "capacity",
                              "detail": "full until noon"}
    assert view.items[item.id].state == state.OFFERED
    assert view.items[item.id].offers[0].decline == {"reason": "capacity",
                                                     "detail": "full until noon"}
    assert error.code == "OFFER_NOT_LIVE"
    assert error.details == {"status": "declined"}


# --- acceptance against the contract ----------------------------------------------------------

def test_accept_with_an_old_contract_revision_is_a_mismatch():
    item = builders.work_item(state.OFFERED, contract_revision=2)
    view = builders.view_of(item)

    error = rejected(view, as_worker(WORKER, "work.accept_offer", {"contractRevision": 1}, item))

    assert error.code == "CONTRACT_REVISION_MISMATCH"
    assert error.details == {"contractRevision": 2}


def test_an_open_ambiguity_blocks_acceptance_until_it_is_resolved():
    item = builders.work_item(state.OFFERED)
    view = builders.view_of(item)
    _, view = run(view, as_worker(WORKER, "conversation.post",
                                  {"messageId": "q1", "kind": "ambiguity",
                                   "text": "Which quarter is meant?"}, item))
    accept = as_worker(WORKER, "work.accept_offer", {"contractRevision": 1}, view.items[item.id])

    blocked = rejected(view, accept)
    # §10.1: the Coordinator resolves it with a corrected contract, not with prose.
    _, view = run(view, as_coordinator("work.revise_contract",
                                       {"contract": contract(goal="Summarize Q3")},
                                       view.items[item.id]))
    accept = as_worker(WORKER, "work.accept_offer", {"contractRevision": 2}, view.items[item.id])
    drafts, _ = run(view, accept)

    assert blocked.code == "TRANSITION_NOT_PERMITTED"
    assert blocked.details == {"openAmbiguities": ["q1"]}
    assert [d.type for d in drafts] == ["work.offer_accepted"]


def test_a_revised_contract_resolves_the_open_ambiguities():
    item = builders.work_item(state.OFFERED, open_ambiguities=("q1",))
    view = builders.view_of(item)

    drafts, after = run(view, as_coordinator("work.revise_contract",
                                             {"contract": contract(goal="Summarize Q3")}, item))

    assert drafts[0].data["resolvedAmbiguities"] == ["q1"]
    assert after.items[item.id].open_ambiguities == ()
    assert after.items[item.id].contract_revision == 2


def test_only_a_coordinator_resolves_an_ambiguity():
    item = builders.work_item(state.OFFERED, open_ambiguities=("q1",))
    view = builders.view_of(item)
    command = as_worker(WORKER, "conversation.post",
                        {"kind": "resolution", "resolves": "q1", "text": "never mind"}, item)

    assert rejected(view, command).code == "FORBIDDEN"


# --- contract revision -------------------------------------------------------------------------

def test_revise_contract_while_active_is_not_permitted():
    item = builders.work_item(state.ACTIVE)
    view = builders.view_of(item)

    error = rejected(view, as_coordinator("work.revise_contract", {"contract": contract()}, item))

    assert error.code == "TRANSITION_NOT_PERMITTED"
    assert error.details == {"state": state.ACTIVE, "command": "work.revise_contract"}


def test_revise_contract_while_queued_requires_the_owner_to_accept_again():
    item = builders.work_item(state.QUEUED)
    view = builders.view_of(item)
    revise = as_coordinator("work.revise_contract",
                            {"contract": contract(goal="Summarize Q3 only")}, item)
    drafts, view = run(view, revise)
    start = as_worker(WORKER, "work.start", {}, view.items[item.id])

    before_acceptance = rejected(view, start)
    stale_acceptance = rejected(view, as_worker(WORKER, "work.accept_offer",
                                                {"contractRevision": 1}, view.items[item.id]))
    accepted, view = run(view, as_worker(WORKER, "work.accept_offer", {"contractRevision": 2},
                                         view.items[item.id]))
    started, view = run(view, start)

    assert drafts[0].data["contractRevision"] == 2
    assert drafts[0].data["contract"]["revision"] == 2
    assert before_acceptance.code == "CONTRACT_REVISION_MISMATCH"
    assert before_acceptance.details == {"contractRevision": 2}
    assert stale_acceptance.code == "CONTRACT_REVISION_MISMATCH"
    assert [d.type for d in accepted] == ["work.contract_accepted"]
    assert accepted[0].data == {"agentId": WORKER, "contractRevision": 2}
    assert [d.type for d in started] == ["work.started"]
    assert view.items[item.id].state == state.ACTIVE
    assert view.items[item.id].ownership_epoch == OWNERSHIP_EPOCH  # same ownership


def test_renewed_acceptance_of_an_already_accepted_revision_is_refused():
    item = builders.work_item(state.QUEUED)
    view = builders.view_of(item)

    error = rejected(view, as_worker(WORKER, "work.accept_offer", {"contractRevision": 1}, item))

    assert error.code == "OFFER_NOT_LIVE"


def test_a_contract_revision_number_must_be_the_next_one():
    item = builders.work_item(state.OPEN)
    view = builders.view_of(item)

    error = rejected(view, as_coordinator("work.revise_contract",
                                          {"contract": contract(revision=5)}, item))

    assert error.code == "INVALID_CONTRACT"
    assert error.details == {"path": "body.contract.revision", "expected": 2}


# --- submission and evidence ---------------------------------------------------------------------

def submit(item, evidence_list, **body):
    return as_worker(WORKER, "work.submit",
                     {"contractRevision": 1, "evidence": evidence_list, **body}, item)


def test_submit_with_evidence_for_every_criterion_is_submitted():
    item = builders.work_item(state.ACTIVE)
    view = builders.with_deliverable(builders.view_of(item))
    records = [evidence(["ac1"], "ev-1"), evidence(["ac2"], "ev-2")]

    drafts, after = run(view, submit(item, records, artifacts=[builders.DELIVERABLE]))

    assert [d.type for d in drafts] == ["work.submitted"]
    assert after.items[item.id].state == state.SUBMITTED
    assert after.items[item.id].submission["evidence"] == records
    assert after.items[item.id].lease.close_reason == "released"


def test_submit_without_evidence_for_every_criterion_is_evidence_incomplete():
    item = builders.work_item(state.ACTIVE)
    view = builders.view_of(item)

    error = rejected(view, submit(item, [evidence(["ac1"])]))

    assert error.code == "EVIDENCE_INCOMPLETE"
    assert error.details == {"missingCriteria": ["ac2"]}


def test_submit_with_no_evidence_at_all_lists_every_criterion():
    item = builders.work_item(state.ACTIVE)
    view = builders.view_of(item)

    error = rejected(view, submit(item, []))

    assert error.code == "EVIDENCE_INCOMPLETE"
    assert error.details == {"missingCriteria": ["ac1", "ac2"]}


def test_evidence_for_an_unknown_criterion_is_a_validation_error():
    item = builders.work_item(state.ACTIVE)
    view = builders.view_of(item)

    error = rejected(view, submit(item, [evidence(["ac1", "ac2", "ac9"])]))

    assert error.code == "VALIDATION_ERROR"
    assert error.details == {"unknownCriteria": ["ac9"]}


def test_evidence_with_private_reasoning_is_a_validation_error():
    item = builders.work_item(state.ACTIVE)
    view = builders.view_of(item)
    record = evidence(["ac1", "ac2"], reasoning="first I thought about it")

    error = rejected(view, submit(item, [record]))

    assert error.code == "VALIDATION_ERROR"
    assert error.details == {"path": "body.evidence[0]"}
    assert "reasoning" in error.message


def test_submit_against_an_old_contract_revision_is_a_mismatch():
    item = builders.work_item(state.ACTIVE, contract_revision=2, accepted_revision=2)
    view = builders.view_of(item)

    error = rejected(view, submit(item, [evidence(["ac1", "ac2"])]))

    assert error.code == "CONTRACT_REVISION_MISMATCH"


# --- execution approval ------------------------------------------------------------------------

def test_start_before_a_required_approval_is_refused_and_allowed_after_it():
    item = builders.work_item(state.QUEUED, requires_approval=True)
    view = builders.view_of(item)
    start = as_worker(WORKER, "work.start", {}, item)

    before = rejected(view, start)
    granted, view = run(view, builders.command("approval.grant_execution", {}, item,
                                               actor=HUMAN, roles={"owner"}))
    started, view = run(view, as_worker(WORKER, "work.start", {}, view.items[item.id]))

    assert before.code == "APPROVAL_REQUIRED"
    assert granted[0].data == {"by": HUMAN, "contractRevision": 1, "comment": None}
    assert [d.type for d in started] == ["work.started"]
    assert view.items[item.id].state == state.ACTIVE


def test_approval_granted_by_an_agent_is_forbidden_even_with_the_owner_role():
    item = builders.work_item(state.QUEUED, requires_approval=True)
    view = builders.view_of(item)
    command = builders.command("approval.grant_execution", {}, item, actor=AGENT,
                               roles=ALL_ROLES)

    assert rejected(view, command).code == "FORBIDDEN"


def test_approval_when_the_contract_does_not_require_it_is_not_permitted():
    item = builders.work_item(state.QUEUED, requires_approval=False)
    view = builders.view_of(item)
    command = builders.command("approval.grant_execution", {}, item, actor=HUMAN,
                               roles={"owner"})

    assert rejected(view, command).code == "TRANSITION_NOT_PERMITTED"


def test_a_revised_contract_needs_a_new_approval():
    item = builders.work_item(state.QUEUED, requires_approval=True, execution_approved=True)
    view = builders.view_of(item)
    revised = contract(risk={"class": "high", "requiresExecutionApproval": True})

    _, after = run(view, as_coordinator("work.revise_contract", {"contract": revised}, item))

    assert after.items[item.id].execution_approved is False


# --- dependencies --------------------------------------------------------------------------------

def dependent_pair(dependency_state, item_state=state.QUEUED, policy="all_verified"):
    dependency = builders.work_item(dependency_state, item_id="wi_dep")
    item = builders.work_item(item_state, depends_on=("wi_dep",), dependency_policy=policy)
    return item, builders.view_of(dependency, item)


def test_start_with_unmet_dependencies_is_refused():
    item, view = dependent_pair(state.ACTIVE)

    error = rejected(view, as_worker(WORKER, "work.start", {}, item))

    assert error.code == "DEPENDENCIES_NOT_MET"
    assert error.details == {"policy": "all_verified", "dependencies": {"wi_dep": state.ACTIVE}}


def test_start_with_met_dependencies_is_allowed():
    item, view = dependent_pair(state.VERIFIED)

    drafts, _ = run(view, as_worker(WORKER, "work.start", {}, item))

    assert [d.type for d in drafts] == ["work.started"]


def test_offer_with_unmet_dependencies_is_refused():
    item, view = dependent_pair(state.SUBMITTED, item_state=state.OPEN)

    error = rejected(view, as_coordinator("work.offer", offer_body([WORKER]), item))

    assert error.code == "DEPENDENCIES_NOT_MET"


def test_the_dependency_policy_of_the_contract_applies():
    item, view = dependent_pair(state.CANCELLED, policy="all_terminal")

    drafts, _ = run(view, as_worker(WORKER, "work.start", {}, item))

    assert [d.type for d in drafts] == ["work.started"]


def test_revise_adding_a_dependency_that_closes_a_cycle_is_refused():
    first = builders.work_item(state.OPEN, item_id="wi_a")
    second = builders.work_item(state.OPEN, item_id="wi_b", depends_on=("wi_a",))
    view = builders.view_of(first, second)
    revised = contract(dependencies={"workItems": ["wi_b"], "policy": "all_verified"})

    error = rejected(view, as_coordinator("work.revise_contract", {"contract": revised}, first))

    assert error.code == "DEPENDENCY_CYCLE"
    assert error.details == {"cycle": ["wi_a", "wi_b", "wi_a"]}


def test_revise_adding_a_self_dependency_is_refused():
    item = builders.work_item(state.OPEN)
    view = builders.view_of(item)
    revised = contract(dependencies={"workItems": [item.id], "policy": "all_verified"})

    error = rejected(view, as_coordinator("work.revise_contract", {"contract": revised}, item))

    assert error.code == "DEPENDENCY_CYCLE"
    assert error.details == {"cycle": [item.id, item.id]}


def test_revise_adding_an_acyclic_dependency_is_recorded():
    first = builders.work_item(state.OPEN, item_id="wi_a")
    second = builders.work_item(state.OPEN, item_id="wi_b")
    view = builders.view_of(first, second)
    revised = contract(dependencies={"workItems": ["wi_b"], "policy": "any_verified"})

    _, after = run(view, as_coordinator("work.revise_contract", {"contract": revised}, first))

    assert after.items["wi_a"].depends_on == ("wi_b",)
    assert after.items["wi_a"].dependency_policy == "any_verified"


def test_a_dependency_outside_the_mission_is_an_invalid_contract():
    item = builders.work_item(state.OPEN)
    view = builders.view_of(item)
    revised = contract(dependencies={"workItems": ["wi_elsewhere"]})

    error = rejected(view, as_coordinator("work.revise_contract", {"contract": revised}, item))

    assert error.code == "INVALID_CONTRACT"
    assert error.details == {"path": "body.contract.dependencies.workItems[0]"}


# --- re-offering: the live owner and the fenced one -------------------------------------------

@pytest.mark.parametrize("item_state", [state.QUEUED, state.ACTIVE, state.BLOCKED])
def test_offer_with_a_live_owner_is_not_permitted(item_state):
    item = builders.work_item(item_state)
    view = builders.view_of(item)

    error = rejected(view, as_coordinator("work.offer", offer_body([WORKER_2]), item))

    assert error.code == "TRANSITION_NOT_PERMITTED"
    assert error.details == {"owner": WORKER, "ownershipEpoch": OWNERSHIP_EPOCH}


@pytest.mark.parametrize(("item_state", "fencing_events", "reason"), [
    (state.QUEUED, ["work.ownership_expired"], "start_by"),
    (state.ACTIVE, ["lease.expired", "work.ownership_expired"], "lease"),
    (state.BLOCKED, ["work.ownership_expired"], "blocked_lease"),
])
def test_offer_with_an_expired_owner_fences_it_first(item_state, fencing_events, reason):
    item = builders.work_item(item_state, owner_live=False)
    view = builders.view_of(item)

    drafts, after = run(view, as_coordinator("work.offer", offer_body([WORKER_2]), item))

    assert [d.type for d in drafts] == [*fencing_events, "work.offered"]
    # A missed start-by of an epoch never started used up an attempt (retries.py).
    counted = {"attempt": 1} if reason == "start_by" else {}
    assert drafts[len(fencing_events) - 1].data == {
        "agentId": WORKER, "ownershipEpoch": OWNERSHIP_EPOCH, "reason": reason, **counted}
    fenced = after.items[item.id]
    assert fenced.state == state.OFFERED
    assert fenced.owner is None
    assert fenced.live_lease is None
    assert fenced.ownership_epoch == OWNERSHIP_EPOCH


def test_the_next_owner_after_fencing_gets_a_higher_epoch_and_the_old_lease_is_dead():
    item = builders.work_item(state.ACTIVE, owner_live=False)
    view = builders.view_of(item)
    _, view = run(view, as_coordinator("work.offer", offer_body([WORKER_2]), item))
    _, view = run(view, as_worker(WORKER_2, "work.accept_offer", {"contractRevision": 1},
                                  view.items[item.id]))
    (started,), view = run(view, as_worker(WORKER_2, "work.start", {}, view.items[item.id]))
    late = as_worker(WORKER, "work.progress", progress(), item)  # old epoch, old lease

    error = rejected(view, late)

    assert view.items[item.id].owner == WORKER_2
    assert view.items[item.id].ownership_epoch == OWNERSHIP_EPOCH + 1
    assert view.items[item.id].lease.id == started.data["leaseId"] != builders.LEASE_ID
    assert error.code == "STALE_OWNERSHIP"


# --- leases ---------------------------------------------------------------------------------

def test_start_issues_a_lease_bound_to_the_session_and_a_token_bound_to_the_lease():
    item = builders.work_item(state.QUEUED)
    view = builders.view_of(item)

    (started,), after = run(view, as_worker(WORKER, "work.start", {"leaseSeconds": 120}, item,
                                            session_epoch=7))

    lease = after.items[item.id].lease
    assert started.data["expiresAt"] == iso(120)
    assert started.data["capabilityToken"]["leaseId"] == started.data["leaseId"]
    assert started.data["capabilityToken"]["expiresAt"] == started.data["expiresAt"]
    assert started.data["idempotencyKey"] == commands.idempotency_key(
        builders.MISSION_ID, item.id, OWNERSHIP_EPOCH, "attempt-1")
    assert (lease.id, lease.agent_id, lease.session_epoch, lease.ownership_epoch) == (
        started.data["leaseId"], WORKER, 7, OWNERSHIP_EPOCH)
    assert lease.expires_at == at(120)
    assert lease.is_open


def test_a_lease_longer_than_the_maximum_is_refused():
    item = builders.work_item(state.QUEUED)
    view = builders.view_of(item)

    error = rejected(view, as_worker(WORKER, "work.start", {"leaseSeconds": 3601}, item))

    assert error.code == "VALIDATION_ERROR"
    assert error.details == {"path": "body.leaseSeconds", "maximum": 3600}


def test_renewal_keeps_the_lease_id_and_grows_its_history():
    item = builders.work_item(state.ACTIVE)
    view = builders.view_of(item)

    (renewed,), after = run(view, as_worker(WORKER, "lease.renew", {"leaseSeconds": 200}, item),
                            now=at(100))

    lease = after.items[item.id].lease
    assert renewed.data["leaseId"] == builders.LEASE_ID
    assert lease.id == builders.LEASE_ID
    assert lease.expires_at == at(300)
    assert lease.renewals == ((at(100), at(300)),)


def test_a_replacement_session_revokes_the_agents_leases_and_requeues_the_items():
    mine = builders.work_item(state.ACTIVE, item_id="wi_mine")
    theirs = builders.work_item(state.ACTIVE, item_id="wi_theirs", owner=WORKER_2,
                                lease=builders.lease(lease_id="lease_2", agent_id=WORKER_2))
    view = builders.view_of(mine, theirs)

    drafts = commands.revoke_for_session(view, WORKER, T0, commands.Policy())
    after = builders.apply(view, drafts)

    assert [(d.type, d.work_item_id) for d in drafts] == [("lease.revoked", "wi_mine")]
    assert after.items["wi_mine"].state == state.QUEUED
    assert after.items["wi_mine"].start_by == at(600)
    assert after.items["wi_mine"].lease.close_reason == "revoked"
    assert after.items["wi_mine"].owner == WORKER
    assert after.items["wi_theirs"] == theirs


# --- optimistic concurrency and roles ---------------------------------------------------------

def test_an_expected_revision_that_differs_is_a_revision_conflict():
    item = builders.work_item(state.OPEN, revision=5)
    view = builders.view_of(item)

    error = rejected(view, as_coordinator("work.cancel", {}, item, expected_revision=4))

    assert error.code == "REVISION_CONFLICT"
    assert error.details == {"revision": 5}


def test_the_matching_expected_revision_is_accepted_and_the_revision_moves_on():
    item = builders.work_item(state.OPEN, revision=5)
    view = builders.view_of(item)

    _, after = run(view, as_coordinator("work.cancel", {}, item, expected_revision=5))

    assert after.items[item.id].revision == 6


@pytest.mark.parametrize(("command_type", "body", "item_state", "roles"), [
    ("work.offer", offer_body([WORKER]), state.OPEN, {"worker", "reviewer"}),
    ("work.cancel", {}, state.OPEN, {"worker"}),
    ("work.revise_contract", {"contract": contract()}, state.OPEN, {"owner"}),
    ("work.unblock", {"resolution": "done"}, state.BLOCKED, {"worker"}),
    ("work.accept_result", {}, state.SUBMITTED, {"reviewer"}),
    ("work.accept_offer", {"contractRevision": 1}, state.OFFERED, {"coordinator"}),
    ("work.start", {}, state.QUEUED, {"coordinator", "owner"}),
    ("work.submit", {"contractRevision": 1, "evidence": []}, state.ACTIVE, {"observer"}),
    ("conversation.post", {"kind": "message", "text": "hi"}, state.OPEN, set()),
], ids=lambda value: value if isinstance(value, str) else None)
def test_a_command_without_the_role_is_forbidden(command_type, body, item_state, roles):
    item = builders.work_item(item_state)
    view = builders.view_of(item)

    error = rejected(view, builders.command(command_type, body, item, roles=roles))

    assert error.code == "FORBIDDEN"
    assert error.details["roles"] == sorted(roles)


def test_work_authorize_needs_a_coordinator():
    view = builders.view_of(missions=[builders.mission()])
    command = builders.command("work.authorize", {"missionId": builders.MISSION_ID,
                                                  "contract": contract()}, roles={"worker"})

    assert rejected(view, command).code == "FORBIDDEN"


def test_mission_approval_is_given_by_a_human():
    view = builders.view_of(missions=[builders.mission()])
    command = builders.command("mission.approve", {"missionId": builders.MISSION_ID},
                               actor=COORDINATOR, roles=ALL_ROLES)

    assert rejected(view, command).code == "FORBIDDEN"


def test_a_worker_fails_only_the_work_it_holds_the_lease_for():
    item = builders.work_item(state.QUEUED)
    view = builders.view_of(item)
    command = as_worker(WORKER, "work.fail", {"evidence": [evidence(["ac1"])]}, item)

    assert rejected(view, command).code == "FORBIDDEN"


def test_a_worker_fails_its_active_work_under_its_lease():
    item = builders.work_item(state.ACTIVE)
    view = builders.view_of(item)

    drafts, after = run(view, as_worker(WORKER, "work.fail", {"evidence": [evidence(["ac1"])],
                                                              "reason": "tool outage"}, item))

    assert [d.type for d in drafts] == ["lease.revoked", "work.failed"]
    assert after.items[item.id].state == state.FAILED
    assert after.items[item.id].owner is None


def test_failure_needs_evidence():
    item = builders.work_item(state.OPEN)
    view = builders.view_of(item)

    error = rejected(view, as_coordinator("work.fail", {"evidence": []}, item))

    assert error.code == "VALIDATION_ERROR"
    assert error.details == {"path": "body.evidence"}


def test_an_unknown_command_type_is_a_validation_error():
    item = builders.work_item(state.OPEN)
    view = builders.view_of(item)

    assert rejected(view, builders.command("work.teleport", {}, item)).code == "VALIDATION_ERROR"


def test_an_unknown_work_item_is_not_found():
    view = builders.view_of(missions=[builders.mission()])
    command = builders.command("work.cancel", {}, work_item_id="wi_missing")

    assert rejected(view, command).code == "NOT_FOUND"


# --- derived ids ----------------------------------------------------------------------------------

def test_derive_id_is_deterministic_and_prefixed():
    first = commands.derive_id("lease", "cmd-1")

    assert first == commands.derive_id("lease", "cmd-1")
    assert re.fullmatch(r"lease_[0-9a-f]{24}", first)
    assert commands.derive_id("lease", "cmd-2") != first
    assert commands.derive_id("lease", "cmd-1", "salt") != first


def test_ids_a_command_creates_are_the_same_on_a_retry():
    item = builders.work_item(state.QUEUED)
    view = builders.view_of(item)
    start = as_worker(WORKER, "work.start", {}, item)

    once = commands.decide(view, start, builders.context())
    again = commands.decide(view, start, builders.context())

    assert once == again
    assert once[0].data["leaseId"] == commands.derive_id("lease", start.id)


def test_idempotency_key_is_deterministic_and_bound_to_the_ownership_epoch():
    key = commands.idempotency_key("msn", "wi", 1, "send-email")

    assert key == commands.idempotency_key("msn", "wi", 1, "send-email")
    assert re.fullmatch(r"idem_[0-9a-f]{32}", key)
    assert commands.idempotency_key("msn", "wi", 2, "send-email") != key
    assert commands.idempotency_key("msn", "wi", 1, "send-sms") != key
    assert commands.idempotency_key("msn", "wi2", 1, "send-email") != key
    # The separator keeps ("ab", "c") and ("a", "bc") apart.
    assert commands.idempotency_key("ab", "c", 1, "op") != commands.idempotency_key(
        "a", "bc", 1, "op")
