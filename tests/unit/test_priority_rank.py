"""mission_weave/core/priority.py rank: what the queue's columns hold."""

from datetime import UTC, datetime

from mission_weave.core import priority


def test_critical_comes_first_and_an_unknown_value_after_every_known_one():
    assert priority.rank({"urgency": "critical", "businessImpact": "low"})[:2] == (0, 3)
    assert priority.rank({"urgency": "loud", "businessImpact": ["high"]})[:2] == (4, 4)


def test_the_deadline_is_a_moment_in_utc_and_a_missing_one_is_none():
    rank = priority.rank({"deadline": "2030-06-01T02:00:00+02:00"})
    assert rank[2] == datetime(2030, 6, 1, tzinfo=UTC)
    assert priority.rank(None) == (4, 4, None)


def test_ascending_rank_is_the_requested_order():
    def contract(urgency, impact, deadline):
        return {"urgency": urgency, "businessImpact": impact, "deadline": deadline}
    contracts = [contract("low", "critical", "2030-01-01T00:00:00Z"),
                 contract("high", "low", "2030-01-01T00:00:00Z"),
                 contract("high", "high", "2031-01-01T00:00:00Z"),
                 contract("high", "high", "2030-01-01T00:00:00Z")]
    order = sorted(range(4), key=lambda i: priority.rank(contracts[i]))
    assert order == [3, 2, 1, 0]
