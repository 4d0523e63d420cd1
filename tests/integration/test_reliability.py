"""Reliability in the ranking, over HTTP (issue 25): a worker with three verified items
showed "reliability: 0 verified", and `auto` ranked on that figure, for a contract that
required no capability (as a WorkItem planned from scratch on the dashboard often does).
Its history now counts, in the selection basis, the ranking and the dashboard alike."""

import re

import pytest

from apps.ledger.verify import verify_group
from tests.integration.test_dashboard import human_coordinator, item_url
from tests.integration.test_placement import SUMMARIZER, auto_offer, offered_data
from tests.support import evidence

pytestmark = pytest.mark.django_db

BOTH = [{"id": "summarize", "version": "1"}, {"id": "translate", "version": "1"}]
POLYGLOT = {"version": "1", "capabilities": BOTH, "maxConcurrency": 4}


def verified_by(s, worker, **contract_overrides) -> str:
    item_id, _ = s.running(worker, **contract_overrides)
    worker.ok("work.submit", {"contractRevision": 1, "artifacts": [s.deliver(item_id, worker)],
                              "evidence": [evidence(["ac1", "ac2"], producer=worker.principal)]},
              **s.lease_fields(item_id))
    s.accept_result(item_id)
    return item_id


def fresh_worker(s, card=SUMMARIZER):
    """A worker with no history whose id sorts before w1's: a tie would put it first."""
    return s.world.agent("a0-" + s.world.group.slug, card=card)


def test_three_verified_items_count_when_the_contract_requires_no_capability(scenario):
    s = scenario
    for _ in range(3):
        verified_by(s, s.w1, capabilities=[])
    fresh = fresh_worker(s)
    item_id = s.authorize(capabilities=[])

    data = offered_data(auto_offer(s, item_id))

    assert [o["agentId"] for o in data["offers"]] == [s.w1.name]
    reliability = data["offers"][0]["selectionBasis"]["reliability"]
    assert (reliability["verified"], reliability["failed"]) == (3, 0)
    assert data["pendingCandidates"] == [fresh.name, s.w2.name]
    assert verify_group(s.world.group.id) == []


def test_an_item_that_required_two_of_the_capabilities_counts_once(scenario):
    s = scenario
    polyglot = s.world.agent("w3-" + s.world.group.slug, card=POLYGLOT)
    for _ in range(3):
        verified_by(s, polyglot, capabilities=BOTH)
    item_id = s.authorize(capabilities=BOTH)

    data = offered_data(auto_offer(s, item_id))

    reliability = data["offers"][0]["selectionBasis"]["reliability"]
    assert data["offers"][0]["agentId"] == polyglot.name
    assert (reliability["verified"], reliability["failed"]) == (3, 0)
    assert reliability["perCapability"] == {"summarize": {"verified": 3, "failed": 0},
                                            "translate": {"verified": 3, "failed": 0}}


def test_the_dashboard_ranks_and_offers_on_the_same_figure(scenario):
    s = scenario
    hc = human_coordinator(s)
    for _ in range(3):
        verified_by(s, s.w1, capabilities=[])
    fresh_worker(s)
    item_id = s.authorize(capabilities=[])

    page = hc.client.get(item_url(s, item_id)).content.decode()
    hc.client.post(item_url(s, item_id, "offer"), {
        "offer-auto": "on", "offer-mode": "sequential", "offer-expires_in_minutes": "15"})

    table = re.search(r'<table id="candidates">(.*?)</table>', page, re.S).group(1)
    first = re.search(r'<tr data-agent="([^"]+)">(.*?)</tr>', table, re.S)
    assert first.group(1) == s.w1.name
    assert "reliability: 3 verified, 0 failed" in first.group(2)
    assert s.item(item_id)["offers"][0]["agentId"] == s.w1.name
