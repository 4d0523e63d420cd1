"""From the dashboard too, a Mission's decisions are its owner's and coordinator's: the
Owner and Coordinator of another Mission of the same Group, with the same Group roles,
posting to Mission A's forms change nothing (the pipeline refuses them; the pages only
hide the controls)."""

import pytest

from tests.integration.test_dashboard import mission_url, submitted
from tests.support import Scenario


@pytest.fixture
def others(scenario: Scenario):
    """Mission A (the Scenario's, ready for the final Approval) and the human Owner and
    Coordinator of Mission B."""
    s = scenario
    item_id = submitted(s)
    s.accept_result(item_id)
    owner_b = s.world.human("ob-" + s.world.group.slug, roles=("owner",))
    coordinator_b = s.world.human("cb-" + s.world.group.slug, roles=("coordinator",))
    s.c.ok("mission.create", {"title": "B", "ownerId": owner_b.principal,
                              "coordinatorId": coordinator_b.principal})
    return s, owner_b, coordinator_b


@pytest.mark.parametrize("who, action, form", [
    ("owner_b", "approve", {"comment": "mine now"}),
    ("owner_b", "refuse-approval", {"reason": "not mine to judge"}),
    ("coordinator_b", "end", {"how": "cancel", "reason": "mine now"}),
    ("coordinator_b", "end", {"how": "fail", "reason": "mine now"}),
])
def test_another_missions_owner_or_coordinator_changes_nothing(others, who, action, form):
    s, owner_b, coordinator_b = others
    sender = {"owner_b": owner_b, "coordinator_b": coordinator_b}[who]
    head = s.world.head

    response = sender.client.post(mission_url(s, action), form)

    assert response.status_code in (302, 400, 403, 409)
    assert s.world.head == head
    assert s.c.get(f"missions/{s.mission_id}").json()["state"] == "active"


def test_the_missions_own_owner_still_approves_it(others):
    s, _, _ = others

    s.owner.client.post(mission_url(s, "approve"), {"comment": "ship it"})

    assert s.c.get(f"missions/{s.mission_id}").json()["state"] == "approved"
