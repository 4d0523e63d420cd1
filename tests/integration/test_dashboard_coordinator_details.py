"""The Coordinator's details on the dashboard (issue 25): the queue of candidates still to
be offered shows only while the item is offered; the offer form only where §10.2 permits
work.offer (a queued item with a live owner is not offered again), with the reason when
it is not; the "Recorded: …" message is said once; an empty contract form names every
missing member at once; the home page lists the viewer's Missions."""

import re

import pytest

from apps.work.models import WorkItem
from tests.integration.test_dashboard import human_coordinator, item_url, mission_url
from tests.integration.test_dashboard_plan import form_data, html_of, refusal_code
from tests.support import evidence, later

pytestmark = pytest.mark.django_db


@pytest.fixture
def coordinated(scenario):
    return scenario, human_coordinator(scenario)


def caption(page: str) -> str:
    return re.search(r"<caption>(.*?)</caption>", page, re.S).group(1)


# --- the offer queue and the offer form ----------------------------------------------------

def test_the_candidates_in_turn_show_while_offered_and_not_after_an_acceptance(coordinated):
    s, hc = coordinated
    item_id = s.authorize()
    s.offer(item_id, s.w1, s.w2)

    offered = html_of(hc.client.get(item_url(s, item_id)))
    s.accept(item_id, s.w1)
    accepted = html_of(hc.client.get(item_url(s, item_id)))

    assert f"still to be offered in turn: {s.w2.name}" in caption(offered)
    assert "still to be offered in turn" not in accepted
    assert "accepted first" in accepted


def test_a_queued_item_with_a_live_owner_has_no_offer_form_and_says_why(coordinated):
    s, hc = coordinated
    item_id = s.queued(s.w1)

    page = html_of(hc.client.get(item_url(s, item_id)))

    assert 'id="offer-form"' not in page and 'id="candidates"' not in page
    why = re.search(r'<p class="meta" id="offer-unavailable">(.*?)</p>', page, re.S).group(1)
    assert f"{s.w1.name} owns it" in why and "until" in why
    assert 'id="cancel-item"' in page  # the other controls stay


def test_a_queued_item_whose_owner_missed_its_start_by_can_be_offered_again(coordinated, clock):
    s, hc = coordinated
    item_id = s.queued(s.w1)
    later(clock, 3 * 24 * 3600)  # past the start-by deadline: no live owner any more

    page = html_of(hc.client.get(item_url(s, item_id)))
    sent = hc.client.post(item_url(s, item_id, "offer"), {
        "offer-candidates": [s.w2.name], "offer-mode": "sequential",
        "offer-expires_in_minutes": "10"})

    assert 'id="offer-form"' in page and 'id="offer-unavailable"' not in page
    assert sent.status_code == 302
    assert WorkItem.objects.get(group_id=s.world.group.id, work_item_id=item_id).state == "offered"


@pytest.mark.parametrize("item_state", ["open", "failed"])
def test_the_offer_form_shows_where_work_offer_is_permitted(coordinated, item_state):
    s, hc = coordinated
    if item_state == "open":
        item_id = s.authorize()
    else:
        item_id, _ = s.running(s.w1)
        s.c.ok("work.fail", {"evidence": [evidence(["ac1"], producer=s.c.principal)]},
               workItemId=item_id)

    page = html_of(hc.client.get(item_url(s, item_id)))

    assert 'id="offer-form"' in page and 'id="offer-unavailable"' not in page


# --- the message after an action -------------------------------------------------------------

def test_recorded_is_said_once_and_never_in_a_live_fragment(coordinated):
    s, hc = coordinated
    item_id = s.authorize()

    hc.client.post(item_url(s, item_id, "offer"), {
        "offer-auto": "on", "offer-mode": "sequential", "offer-expires_in_minutes": "10"})
    live = html_of(hc.client.get(item_url(s, item_id), HTTP_HX_REQUEST="true"))
    first = html_of(hc.client.get(item_url(s, item_id)))
    again = html_of(hc.client.get(item_url(s, item_id)))

    assert "Recorded:" not in live  # a live re-render neither shows nor takes it
    assert "Recorded: work.offered" in first
    assert "Recorded:" not in again


# --- the contract form -----------------------------------------------------------------------

def test_an_empty_contract_form_names_every_missing_member_at_once(coordinated):
    s, hc = coordinated
    url = mission_url(s, "work-items/new")
    head = s.world.head

    refused = hc.client.post(url, form_data(html_of(hc.client.get(url)), "contract-form"))
    page = html_of(refused)

    assert refused.status_code == 400 and refusal_code(refused) == "INVALID_CONTRACT"
    errors = dict(re.findall(r'<p class="field-error" id="([^"]+)-error">([^<]+)</p>', page))
    assert "is required" in errors["contract-goal"]
    assert "non-empty" in errors["contract-deliverables-fieldset"]
    assert "non-empty" in errors["contract-acceptanceCriteria-fieldset"]
    assert s.world.head == head


# --- the home page ---------------------------------------------------------------------------

def missions_on_home(actor) -> dict:
    page = html_of(actor.client.get("/"))
    table = re.search(r'<table id="my-missions">(.*?)</table>', page, re.S)
    rows = re.findall(r'<tr data-mission="([^"]+)"[^>]*>(.*?)</tr>', table.group(1), re.S) \
        if table else []
    return dict(rows)


def test_the_home_page_lists_the_missions_of_their_owner_coordinator_and_delegate(coordinated):
    s, hc = coordinated
    first = s.mission_id
    ended = hc.client.post(mission_url(s, "end"), {"end-how": "cancel",
                                                   "end-reason": "the wrong plan"})
    delegate = s.world.human("dlg-" + s.world.group.slug, roles=("coordinator",))
    second = s.c.ok("mission.create", {"title": "Second plan", "ownerId": s.owner.principal,
                                       "coordinatorId": hc.principal,
                                       "delegates": [delegate.principal]})[0]["missionId"]
    stranger = s.world.human("str-" + s.world.group.slug, roles=("coordinator",))

    coordinator, owner = missions_on_home(hc), missions_on_home(s.owner)
    delegated = missions_on_home(delegate)

    assert ended.status_code == 302
    assert list(coordinator) == [second, first]  # the active one first
    assert f'href="/g/{s.world.group.id}/missions/{second}/"' in coordinator[second]
    assert "active" in coordinator[second] and "coordinator" in coordinator[second]
    assert "owner" in owner[second] and set(owner) >= {first, second}
    assert list(delegated) == [second] and "delegate" in delegated[second]
    assert missions_on_home(stranger) == {}
    assert 'id="no-missions"' in html_of(stranger.client.get("/"))
