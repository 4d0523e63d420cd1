from apps.ledger.verify import verify_group
from tests.support import evidence


def test_full_lifecycle(scenario):
    s = scenario
    item_id, _started = s.running()
    s.w1.ok("work.progress", {"phase": "drafting", "milestones": ["outline"]},
            **s.lease_fields(item_id))
    s.w1.ok("work.submit", {"contractRevision": 1, "artifacts": [s.deliver(item_id)],
                            "evidence": [evidence(["ac1", "ac2"])]}, **s.lease_fields(item_id))
    s.accept_result(item_id)
    assert s.item(item_id)["state"] == "verified"
    assert verify_group(s.world.group.id) == []
