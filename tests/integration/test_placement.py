"""Placement through the HTTP API (§10.3, §11.1): `candidates: "auto"` ranks the Group's
workers and records the selection basis in `work.offered`; under `autoDispatch` a decline
moves to the next-ranked candidate in the same transaction; Presence reports feed the
ranking and go stale; the server refuses an acceptance beyond maxConcurrency. Every
rejection leaves the Group's head where it was."""

import json
from datetime import timedelta

import pytest
import time_machine
from django.test import Client

from apps.identity import registry
from apps.identity.models import Presence
from apps.ledger.verify import verify_group
from mission_weave.protocol.timefmt import format_time
from tests.support import Actor, Scenario, contract, evidence, now

SUMMARIZER = {"version": "1", "capabilities": [{"id": "summarize", "version": "1"}],
              "maxConcurrency": 4}
TRANSLATOR = {"version": "1", "capabilities": [{"id": "translate", "version": "1"}],
              "maxConcurrency": 4}
AUTO_RULES = ["auto-candidates", "worker-role", "capability-required", "capacity",
              "reliability-then-availability", "tie-break:agent-id"]


@pytest.fixture
def s(scenario):
    return scenario


def assert_error(s, response, status: int, code: str, head: int) -> dict:
    assert response.status_code == status, response.json()
    error = response.json()["error"]
    assert error["code"] == code, error
    assert s.world.head == head, "a rejection must append nothing"
    return error


def auto_offer(s, item_id, mode="sequential", **extra):
    return s.c.ok("work.offer", {"candidates": "auto", "mode": mode,
                                 "expiresAt": format_time(now() + timedelta(seconds=600)),
                                 **extra}, workItemId=item_id)


def offered_data(events):
    (offered,) = [e for e in events if e["type"] == "work.offered"]
    return offered["data"]


def auto_mission(s, auto=True) -> str:
    return s.c.ok("mission.create", {"title": "auto", "ownerId": s.owner.principal,
                                     "coordinatorId": s.c.principal,
                                     "autoDispatch": auto})[0]["missionId"]


def authorize_in(s, mission_id) -> str:
    return s.c.ok("work.authorize", {"missionId": mission_id, "contract": contract()})[0][
        "workItemId"]


def report_presence(worker, **body):
    return worker.client.post("/api/v1/presence", json.dumps(body),
                              content_type="application/json",
                              HTTP_AUTHORIZATION=f"Bearer {worker.token}")


def verify_with(s, worker) -> str:
    item_id, _ = s.running(worker)
    worker.ok("work.submit", {"contractRevision": 1, "artifacts": [s.deliver(item_id, worker)],
                              "evidence": [evidence(["ac1", "ac2"], producer=worker.principal)]},
              **s.lease_fields(item_id))
    s.accept_result(item_id)
    return item_id


def fail_with(s, worker) -> str:
    item_id, _ = s.running(worker)
    s.c.ok("work.fail", {"evidence": [evidence(["ac1"], producer=s.c.principal)],
                         "permanent": True}, workItemId=item_id)
    return item_id


# --- candidates "auto" -----------------------------------------------------------------------

def test_auto_sequential_offers_the_best_ranked_worker_and_queues_the_rest(s):
    s.world.agent("tr-" + s.world.group.slug, card=TRANSLATOR)  # lacks the capability
    item_id = s.authorize()

    data = offered_data(auto_offer(s, item_id))

    # No history, no Presence: equal, so the agent id decides.
    first, second = sorted([s.w1.name, s.w2.name])
    assert [o["agentId"] for o in data["offers"]] == [first]
    assert data["offers"][0]["rank"] == 1
    assert data["pendingCandidates"] == [second]
    basis = data["offers"][0]["selectionBasis"]
    assert basis["policyRules"] == [*AUTO_RULES, "mode:sequential"]
    assert basis["capabilityMatch"]["matched"] is True
    assert basis["authorizationEligible"] is True
    assert basis["availability"]["source"] == "card"
    assert basis["expectedCost"]["basis"] == "contract-budgets"
    assert basis["reliability"]["perCapability"] == {"summarize": {"verified": 0, "failed": 0}}
    assert s.item(item_id)["state"] == "offered"


def test_reliability_is_counted_after_verified_and_failed_items(s):
    verify_with(s, s.w2)
    fail_with(s, s.w1)
    item_id = s.authorize()

    data = offered_data(auto_offer(s, item_id))

    assert [o["agentId"] for o in data["offers"]] == [s.w2.name]
    assert data["offers"][0]["selectionBasis"]["reliability"]["perCapability"] == {
        "summarize": {"verified": 1, "failed": 0}}
    assert data["pendingCandidates"] == [s.w1.name]


def test_auto_urgent_offers_the_top_candidate_count(s):
    w3 = s.world.agent("w3-" + s.world.group.slug, card=SUMMARIZER)
    verify_with(s, w3)
    item_id = s.authorize()

    data = offered_data(auto_offer(s, item_id, mode="urgent", candidateCount=2))

    assert data["mode"] == "urgent"
    assert [o["agentId"] for o in data["offers"]] == [w3.name, min(s.w1.name, s.w2.name)]
    assert [o["rank"] for o in data["offers"]] == [1, 2]
    assert data["pendingCandidates"] == []
    assert all(o["selectionBasis"]["policyRules"][-1] == "mode:urgent" for o in data["offers"])


def test_auto_with_no_eligible_worker_is_refused(s):
    item_id = s.authorize(capabilities=[{"id": "translate", "version": "1"}])
    head = s.world.head

    error = assert_error(s, s.c.send("work.offer", {
        "candidates": "auto", "mode": "sequential",
        "expiresAt": format_time(now() + timedelta(seconds=600))}, workItemId=item_id),
        409, "TRANSITION_NOT_PERMITTED", head)

    assert error["details"]["reason"] == "no eligible candidate"
    assert error["details"]["excluded"][s.w1.name] == ["capability-required"]


def test_explicit_candidates_carry_the_same_rich_basis(s):
    verify_with(s, s.w2)
    item_id = s.authorize()

    data = offered_data(s.offer(item_id, s.w2))

    basis = data["offers"][0]["selectionBasis"]
    assert basis["policyRules"] == ["explicit-candidates", "mode:sequential"]
    assert basis["reliability"]["verified"] == 1
    assert basis["availability"]["maxConcurrency"] == 4


# --- automatic dispatch ----------------------------------------------------------------------

def test_a_decline_under_auto_dispatch_moves_to_the_next_ranked_candidate(s):
    item_id = authorize_in(s, auto_mission(s))
    data = offered_data(auto_offer(s, item_id))
    first, second = data["offers"][0]["agentId"], data["pendingCandidates"][0]
    decliner = s.w1 if first == s.w1.name else s.w2

    events = decliner.ok("work.decline_offer", {"reason": "capacity"}, workItemId=item_id)

    assert [e["type"] for e in events] == ["work.offer_declined", "work.offered"]
    assert events[1]["actor"] == decliner.principal  # appended in the decline's transaction
    nxt = events[1]["data"]
    assert [o["agentId"] for o in nxt["offers"]] == [second]
    assert nxt["offers"][0]["rank"] == 2
    assert nxt["autoDispatch"] == {"after": "declined", "skipped": []}
    assert set(nxt["offers"][0]["selectionBasis"]) >= {"capabilityMatch", "reliability"}
    taker = s.w2 if decliner is s.w1 else s.w1
    assert s.accept(item_id, taker)["ownershipEpoch"] == 1
    assert verify_group(s.world.group.id) == []


def test_a_decline_without_auto_dispatch_does_not_move_on(s):
    item_id = s.authorize()
    s.offer(item_id, s.w1, s.w2)

    events = s.w1.ok("work.decline_offer", {"reason": "deadline"}, workItemId=item_id)

    assert [e["type"] for e in events] == ["work.offer_declined"]
    assert s.item(item_id)["state"] == "offered"


def test_auto_dispatch_skips_a_pending_candidate_that_went_offline(s):
    w3 = s.world.agent("w3-" + s.world.group.slug, card=SUMMARIZER)
    item_id = authorize_in(s, auto_mission(s))
    s.offer(item_id, s.w1, s.w2, w3)
    assert report_presence(s.w2, availableSlots=0, status="offline").status_code == 200

    events = s.w1.ok("work.decline_offer", {"reason": "capacity"}, workItemId=item_id)

    nxt = events[1]["data"]
    assert [o["agentId"] for o in nxt["offers"]] == [w3.name]
    assert nxt["autoDispatch"]["skipped"] == [{"agentId": s.w2.name,
                                               "failedRules": ["capacity"]}]
    assert s.item(item_id)["state"] == "offered"
    assert verify_group(s.world.group.id) == []


# --- Presence --------------------------------------------------------------------------------

def test_presence_is_reported_per_agent_and_stored(s):
    response = report_presence(s.w1, availableSlots=2, status="available")

    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["agentId"], body["availableSlots"], body["status"]) == (s.w1.name, 2, "available")
    assert report_presence(s.w1, availableSlots=0, status="busy").status_code == 200
    stored = Presence.objects.get(agent_id=s.w1.name)
    assert (stored.available_slots, stored.status) == (0, "busy")


def test_presence_needs_an_agent_bearer_token(s):
    anonymous = Client().post("/api/v1/presence", json.dumps({"availableSlots": 1,
                                                              "status": "available"}),
                              content_type="application/json")
    human = s.owner.client.post("/api/v1/presence", json.dumps({"availableSlots": 1,
                                                                "status": "available"}),
                                content_type="application/json")

    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["code"] == "UNAUTHENTICATED"
    assert human.status_code == 403
    assert human.json()["error"]["code"] == "FORBIDDEN"
    assert not Presence.objects.exists()


@pytest.mark.parametrize("body, path", [
    ({"availableSlots": -1, "status": "available"}, "body.availableSlots"),
    ({"availableSlots": 1, "status": "asleep"}, "body.status"),
    ({"availableSlots": 1}, "body"),
    ({"availableSlots": 1, "status": "busy", "mood": "ok"}, "body"),
])
def test_a_malformed_presence_report_is_refused(s, body, path):
    response = report_presence(s.w1, **body)

    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["details"]["path"]) == ("VALIDATION_ERROR", path)
    assert not Presence.objects.exists()


def test_fresh_presence_ranks_first_and_goes_stale_after_the_ttl(s, settings):
    settings.MW_PRESENCE_TTL_SECONDS = 120
    late = max(s.w1, s.w2, key=lambda w: w.name)  # would lose the tie-break
    assert report_presence(late, availableSlots=3, status="available").status_code == 200
    fresh_item, stale_item = s.authorize(), s.authorize()

    data = offered_data(auto_offer(s, fresh_item))
    assert data["offers"][0]["agentId"] == late.name
    assert data["offers"][0]["selectionBasis"]["availability"]["source"] == "presence"

    with time_machine.travel(now() + timedelta(seconds=121), tick=False):
        stale = offered_data(auto_offer(s, stale_item))
    assert stale["offers"][0]["agentId"] == min(s.w1.name, s.w2.name)
    assert stale["pendingCandidates"] == [late.name]


def test_an_offline_presence_excludes_the_worker_from_auto(s):
    assert report_presence(s.w1, availableSlots=2, status="offline").status_code == 200
    item_id = s.authorize()

    data = offered_data(auto_offer(s, item_id))

    assert [o["agentId"] for o in data["offers"]] == [s.w2.name]
    assert data["pendingCandidates"] == []


# --- the capacity backstop -------------------------------------------------------------------

def test_an_acceptance_beyond_max_concurrency_is_refused(s):
    solo = s.world.agent("solo-" + s.world.group.slug, card={**SUMMARIZER, "maxConcurrency": 1})
    first, second = s.authorize(), s.authorize()
    s.offer(first, solo)
    s.offer(second, solo)
    s.accept(first, solo)
    head = s.world.head

    error = assert_error(s, solo.send("work.accept_offer", {"contractRevision": 1},
                                      workItemId=second), 409, "TRANSITION_NOT_PERMITTED", head)

    assert error["details"] == {"reason": "capacity", "maxConcurrency": 1, "current": 1}
    assert s.item(second)["state"] == "offered"


def test_capacity_frees_up_when_an_owned_item_leaves_queued_and_active(s):
    solo = s.world.agent("solo-" + s.world.group.slug, card={**SUMMARIZER, "maxConcurrency": 1})
    verify_with(s, solo)
    item_id = s.authorize()
    s.offer(item_id, solo)

    assert s.accept(item_id, solo)["ownershipEpoch"] == 1


def test_the_capacity_backstop_counts_owned_items_in_every_group(s):
    solo = s.world.agent("solo-" + s.world.group.slug, card={**SUMMARIZER, "maxConcurrency": 1})
    first = s.authorize()
    s.offer(first, solo)
    s.accept(first, solo)
    other = Scenario()  # another Group, where the same agent is a worker too
    registry.add_member(other.world.group, solo.principal, ["worker"])
    there = Actor(solo.principal, solo.client, other.world, key=solo.key, key_id=solo.key_id,
                  token=solo.token, session_epoch=solo.session_epoch)
    item_id = other.authorize()
    other.offer(item_id, there)
    head = other.world.head

    error = assert_error(other, there.send("work.accept_offer", {"contractRevision": 1},
                                           workItemId=item_id),
                         409, "TRANSITION_NOT_PERMITTED", head)

    assert error["details"] == {"reason": "capacity", "maxConcurrency": 1, "current": 1}
