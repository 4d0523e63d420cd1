"""No dashboard URL answers a GET with 405. An action URL (a form's POST target) is where
the page of a refused POST is rendered, so the browser's refresh, or a link to it, GETs
it: that GET is sent to the page the action belongs to, and changes nothing."""

from django.urls import reverse
from django.utils import timezone

from apps.dashboard.urls import urlpatterns
from apps.webhooks import registry
from tests.integration.artifact_helpers import published
from tests.support import contract

# url name -> the page a GET of it is sent to (the dashboard's POST-only actions).
ITEM_ACTIONS = ("offer", "preempt", "unblock", "cancel", "create_child", "post_message",
                "accept_result", "fail", "grant_execution", "refuse_execution")
MISSION_ACTIONS = ("approve_mission", "refuse_approval", "end_mission", "change_edge")


def test_a_get_of_any_dashboard_url_is_never_405_and_an_action_goes_to_its_page(scenario):
    s = scenario
    item_id, _ = s.running()
    artifact = published(s, item_id, b"# notes\n")
    proposal = s.w2.ok("work.propose", {"missionId": s.mission_id,
                                        "contract": contract()})[0]["data"]["proposalId"]
    g = s.world.group.id
    webhook, _ = registry.create(g, "https://hooks.example.com/mw", [], "json",
                                 s.owner.principal, timezone.now())
    ids = {"group_id": g, "mission_id": s.mission_id, "item_id": item_id,
           "proposal_id": proposal, "name": artifact, "webhook_id": webhook.id}
    pages = {**{name: reverse("dashboard:work_item", args=[g, item_id])
                for name in ITEM_ACTIONS},
             **{name: reverse("dashboard:mission", args=[g, s.mission_id])
                for name in MISSION_ACTIONS},
             **{name: reverse("dashboard:webhook", args=[g, webhook.id])
                for name in ("remove_webhook", "rotate_webhook", "send_again")},
             "logout": reverse("dashboard:groups")}
    head = s.world.head

    for pattern in urlpatterns:
        wanted = {key: ids[key] for key in pattern.pattern.converters}
        path = reverse(f"dashboard:{pattern.name}", kwargs=wanted)
        response = s.owner.client.get(path)
        assert response.status_code != 405, path
        if pattern.name in pages:
            assert response.status_code == 302, (path, response.status_code)
            assert response["Location"] == pages.pop(pattern.name), path
        else:
            assert response.status_code in (200, 403), (path, response.status_code)

    assert pages == {}  # every action named above is still a dashboard URL
    assert s.world.head == head  # no GET sent a command
    assert s.owner.client.get(reverse("dashboard:groups")).status_code == 200  # still in


def test_a_refresh_after_a_refused_edge_shows_the_mission_page(scenario):
    s = scenario
    coordinator = s.world.human("hc-" + s.world.group.slug, roles=("coordinator",))
    s.coordinated_by(coordinator)
    first, second = s.authorize(), s.authorize()
    edges = reverse("dashboard:change_edge", args=[s.world.group.id, s.mission_id])
    coordinator.client.post(edges, {"dependant": second, "dependency": first, "op": "add"})

    refused = coordinator.client.post(edges, {"dependant": first, "dependency": second,
                                              "op": "add"})
    refreshed = coordinator.client.get(edges, follow=True)

    assert refused.status_code == 409 and "DEPENDENCY_CYCLE" in refused.content.decode()
    assert refreshed.redirect_chain == [
        (reverse("dashboard:mission", args=[s.world.group.id, s.mission_id]), 302)]
    assert refreshed.status_code == 200
