"""GET /api/v1/groups/{g}/membership: how an Agent (the SDK) learns its membershipEpoch
and Agent Card; a non-member learns nothing."""

from apps.identity import registry
from tests.support import World, assert_error


def test_a_member_reads_its_roles_epoch_and_agent_card(scenario):
    response = scenario.w1.get("membership")

    assert response.status_code == 200
    body = response.json()
    assert body == {"groupId": scenario.world.group.id, "principal": scenario.w1.principal,
                    "roles": ["worker"], "membershipEpoch": scenario.w1.membership_epoch,
                    "agentCard": body["agentCard"]}
    assert body["agentCard"]["maxConcurrency"] == 4


def test_the_epoch_follows_a_change_of_roles(scenario):
    before = scenario.w1.get("membership").json()["membershipEpoch"]
    registry.add_member(scenario.world.group, scenario.w1.principal, ["worker", "reviewer"])

    after = scenario.w1.get("membership").json()

    assert after["membershipEpoch"] == before + 1
    assert after["roles"] == ["reviewer", "worker"]


def test_an_outsider_and_an_anonymous_caller_are_refused(scenario):
    outsider = World().agent("outsider")
    response = outsider.client.get(f"/api/v1/groups/{scenario.world.group.id}/membership",
                                   HTTP_AUTHORIZATION=f"Bearer {outsider.token}")
    assert_error(response, 403, "NOT_A_MEMBER")

    anonymous = outsider.client.get(f"/api/v1/groups/{scenario.world.group.id}/membership")
    assert_error(anonymous, 401, "UNAUTHENTICATED")


def test_a_human_member_has_no_agent_card(scenario):
    body = scenario.owner.get("membership").json()

    assert (body["principal"], body["agentCard"]) == (scenario.owner.principal, None)
