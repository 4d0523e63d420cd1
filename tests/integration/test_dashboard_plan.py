"""The Coordinator's dashboard through Django's test client: every planning and steering
form is one command through the append pipeline, exactly as the API would send it; a
refusal shows its PROTOCOL code and changes nothing, and what was typed stays."""

import re
from html.parser import HTMLParser

import pytest

from apps.ledger.models import Event
from tests.integration.test_dashboard import human_coordinator, item_url, last_event, mission_url
from tests.integration.test_dashboard_owner import waiting_rows
from tests.support import Scenario, contract, evidence

pytestmark = pytest.mark.django_db


def html_of(response) -> str:
    return response.content.decode()


def refusal_code(response) -> str | None:
    found = re.search(r'class="refused" role="alert" data-code="([A-Z_]+)"', html_of(response))
    return found.group(1) if found else None


def events_since(s: Scenario, head: int) -> list:
    return list(Event.objects.filter(group_id=s.world.group.id, sequence__gt=head)
                .order_by("sequence"))


@pytest.fixture
def coordinated(scenario):
    """A Scenario whose Mission a human Coordinator coordinates: (scenario, coordinator)."""
    return scenario, human_coordinator(scenario)


# --- Missions -----------------------------------------------------------------------------

def test_a_coordinator_creates_a_mission_with_budgets_and_automatic_dispatch(coordinated):
    s, hc = coordinated
    url = f"/g/{s.world.group.id}/missions/new"

    form = hc.client.get(url)
    created = hc.client.post(url, {
        "title": "Launch plan", "mission_id": "launch", "owner": s.owner.principal,
        "coordinator": hc.principal, "delegates": [s.c.principal], "auto_dispatch": "on",
        "financial_amount": "1200.50", "financial_currency": "EUR", "budget_tokens": "50000",
        "budget_sideEffects": "3"})

    assert form.status_code == 200 and s.owner.principal in html_of(form)
    assert created.status_code == 302 and created["Location"].endswith("/missions/launch/")
    event = last_event(s)
    assert (event.type, event.actor) == ("mission.created", hc.principal)
    assert event.data["budgets"] == {"financial": {"amount": "1200.50", "currency": "EUR"},
                                     "tokens": 50000, "sideEffects": 3}
    assert event.data["autoDispatch"] is True and event.data["delegates"] == [s.c.principal]


def test_a_refused_mission_keeps_what_was_typed_and_changes_nothing(coordinated):
    s, hc = coordinated
    observer = s.world.human("obs-" + s.world.group.slug, roles=("observer",))
    head = s.world.head

    refused = observer.client.post(f"/g/{s.world.group.id}/missions/new", {
        "title": "Not mine to plan", "owner": s.owner.principal, "coordinator": hc.principal})
    taken = hc.client.post(f"/g/{s.world.group.id}/missions/new", {
        "title": "Under a taken id", "mission_id": s.mission_id, "owner": s.owner.principal,
        "coordinator": hc.principal})
    invalid = hc.client.post(f"/g/{s.world.group.id}/missions/new", {
        "title": "Typed by hand", "owner": "user:nobody", "coordinator": hc.principal,
        "budget_tokens": "many"})

    assert refused.status_code == 403 and refusal_code(refused) == "FORBIDDEN"
    assert "Nothing changed" in html_of(refused)
    assert taken.status_code in (400, 409) and refusal_code(taken)
    assert 'value="Under a taken id"' in html_of(taken)
    assert invalid.status_code == 400 and "Typed by hand" in html_of(invalid)
    assert "Enter a whole number" in html_of(invalid)
    assert s.world.head == head


def test_ending_a_mission_lists_its_unfinished_work_then_cancels_it(coordinated):
    s, hc = coordinated
    first, second = s.authorize(goal="One"), s.authorize(goal="Two")

    page = hc.client.get(mission_url(s))
    ended = hc.client.post(mission_url(s, "end"), {"end-how": "cancel",
                                                   "end-reason": "the launch moved"})

    ending = re.search(r'<ul id="ending">(.*?)</ul>', html_of(page), re.S).group(1)
    assert first in ending and second in ending
    assert ended.status_code == 302
    kinds = [e.type for e in Event.objects.filter(group_id=s.world.group.id,
                                                  mission_id=s.mission_id).order_by("sequence")]
    assert "mission.cancelled" in kinds and kinds.count("work.cancelled") == 2
    assert s.item(first)["state"] == "cancelled"


def test_a_child_mission_links_both_ways(coordinated):
    s, hc = coordinated
    item_id = s.authorize()

    made = hc.client.post(item_url(s, item_id, "child"), {
        "child-title": "Research the sources", "child-child_mission_id": "research",
        "child-child_failure_policy": "fail"})
    parent_page = html_of(hc.client.get(mission_url(s)))
    child_page = html_of(hc.client.get(f"/g/{s.world.group.id}/missions/research/"))
    item_page = html_of(hc.client.get(item_url(s, item_id)))

    assert made.status_code == 302 and last_event(s).type == "mission.child_created"
    assert f'/g/{s.world.group.id}/missions/research/' in parent_page
    assert f'/g/{s.world.group.id}/work-items/{item_id}/' in child_page
    assert f'/g/{s.world.group.id}/missions/{s.mission_id}/' in child_page
    assert "(if this fails: fail)" in child_page and "Research the sources" in item_page


# --- the graph's edges ----------------------------------------------------------------------

def test_edges_are_added_and_removed_and_a_cycle_is_refused_with_its_path(coordinated):
    s, hc = coordinated
    a, b, c = s.authorize(goal="A"), s.authorize(goal="B"), s.authorize(goal="C")
    edge = mission_url(s, "edges")

    hc.client.post(edge, {"dependant": b, "dependency": a, "op": "add"})
    hc.client.post(edge, {"dependant": c, "dependency": b, "op": "add"})
    head = s.world.head
    cycle = hc.client.post(edge, {"dependant": a, "dependency": c, "op": "add"})
    assert s.world.head == head
    removed = hc.client.post(edge, {"dependant": c, "dependency": b, "op": "remove"})

    assert cycle.status_code == 409 and refusal_code(cycle) == "DEPENDENCY_CYCLE"
    assert f"{a} → {c} → {b} → {a}" in html_of(cycle)
    assert removed.status_code == 302
    assert s.item(b)["dependsOn"] == [a] and s.item(c)["dependsOn"] == []
    revised = Event.objects.filter(group_id=s.world.group.id, type="work.contract_revised")
    assert [e.actor for e in revised] == [hc.principal] * 3


def test_an_edge_to_an_item_of_another_mission_is_refused(coordinated):
    s, hc = coordinated
    mine = s.authorize()
    other = Scenario()
    theirs = other.authorize()
    head = s.world.head

    answer = hc.client.post(mission_url(s, "edges"), {"dependant": theirs, "dependency": mine})

    assert answer.status_code == 400 and s.world.head == head


# --- offers and placement -------------------------------------------------------------------

def test_the_ranked_candidates_are_shown_before_an_auto_offer_and_the_outcome_after(coordinated):
    s, hc = coordinated
    item_id = s.authorize()

    before = html_of(hc.client.get(item_url(s, item_id)))
    offered = hc.client.post(item_url(s, item_id, "offer"), {
        "offer-auto": "on", "offer-mode": "sequential", "offer-expires_in_minutes": "15"})
    first = Event.objects.get(group_id=s.world.group.id, type="work.offered")
    chosen = first.data["offers"][0]["agentId"]
    s.accept(item_id, s.w1 if chosen == s.w1.name else s.w2)
    after = html_of(hc.client.get(item_url(s, item_id)))

    candidates = re.search(r'<table id="candidates">(.*?)</table>', before, re.S).group(1)
    assert s.w1.name in candidates and s.w2.name in candidates
    assert "capability match" in candidates and "reliability" in candidates
    assert "policy rules" in candidates and "expected cost" in candidates
    assert offered.status_code == 302
    assert first.actor == hc.principal
    assert "auto-candidates" in first.data["offers"][0]["selectionBasis"]["policyRules"]
    assert "accepted first" in after


def test_the_page_says_in_words_why_a_worker_is_not_eligible(coordinated):
    s, hc = coordinated
    item_id = s.authorize(capabilities=[{"id": "translate", "version": "2"}])
    busy = s.world.agent("busy-" + s.world.group.slug, card={
        "version": "1", "capabilities": [{"id": "summarize", "version": "1"}],
        "maxConcurrency": 1})
    s.queued(busy)  # its one slot is taken

    html = html_of(hc.client.get(item_url(s, item_id)))

    reasons = dict(re.findall(r'<li data-agent="([^"]+)">(.*?)</li>', html))
    assert reasons[s.w1.name] == (f"{s.w1.name}: its Agent Card lacks translate 2 "
                                  "(it lists summarize 1)")
    assert reasons[busy.name] == (
        f"{busy.name}: its Agent Card lacks translate 2 (it lists summarize 1); no free "
        "slot: it owns 1 queued or active WorkItem(s) and its Agent Card allows 1")


def test_an_urgent_offer_to_named_workers_shows_each_outcome(coordinated):
    s, hc = coordinated
    item_id = s.authorize()

    hc.client.post(item_url(s, item_id, "offer"), {
        "offer-candidates": [s.w1.name, s.w2.name], "offer-mode": "urgent",
        "offer-candidate_count": "2", "offer-expires_in_minutes": "5"})
    s.w2.ok("work.decline_offer", {"reason": "capacity", "detail": "full today"},
            workItemId=item_id)
    s.accept(item_id, s.w1)
    html = html_of(hc.client.get(item_url(s, item_id)))

    rows = dict(re.findall(r'<tr data-offer-agent="([^"]+)">(.*?)</tr>', html, re.S))
    assert "declined: capacity (full today)" in rows[s.w2.name]
    assert "accepted first" in rows[s.w1.name]


def test_an_offer_form_without_candidates_is_refused_before_sending(coordinated):
    s, hc = coordinated
    item_id = s.authorize()
    head = s.world.head

    answer = hc.client.post(item_url(s, item_id, "offer"), {
        "offer-mode": "sequential", "offer-expires_in_minutes": "5"})

    assert answer.status_code == 400 and "Choose workers by name" in html_of(answer)
    assert s.world.head == head


def test_a_failed_item_can_be_offered_again_with_its_retry_budget_shown(coordinated):
    s, hc = coordinated
    item_id, _ = s.running(s.w1)
    s.w1.ok("work.fail", {"evidence": [evidence(["ac1"], result="fail: the tool crashed")],
                          "reason": "the tool crashed"}, **s.lease_fields(item_id))
    assert s.item(item_id)["state"] == "failed"

    html = html_of(hc.client.get(item_url(s, item_id)))
    again = hc.client.post(item_url(s, item_id, "offer"), {
        "offer-candidates": [s.w2.name], "offer-mode": "sequential",
        "offer-expires_in_minutes": "5"})

    assert "Re-offer it" in html and "retry budget left" in html
    assert again.status_code == 302 and s.item(item_id)["state"] == "offered"


# --- execution -----------------------------------------------------------------------------

def test_preemption_is_requested_and_a_blocked_item_is_unblocked(coordinated):
    s, hc = coordinated
    item_id, _ = s.running(s.w1)

    preempt = hc.client.post(item_url(s, item_id, "preempt"),
                             {"preempt-reason": "a more urgent item"})
    asked = last_event(s)
    s.w1.ok("work.block", {"checkpoint": {"progress": {"phase": "draft"}},
                           "requiredResolution": "the API key for the archive"},
            **s.lease_fields(item_id))
    page = html_of(hc.client.get(item_url(s, item_id)))
    unblock = hc.client.post(item_url(s, item_id, "unblock"),
                             {"unblock-reason": "key is in the vault"})

    assert preempt.status_code == 302 and asked.type == "work.preemption_requested"
    assert asked.data["reason"] == "a more urgent item"
    assert "the API key for the archive" in page and 'id="unblock"' in page
    assert unblock.status_code == 302 and last_event(s).type == "work.unblocked"
    assert last_event(s).data["resolution"] == "key is in the vault"


def test_a_refused_action_shows_the_code_keeps_the_text_and_changes_nothing(coordinated):
    s, hc = coordinated
    item_id = s.authorize()
    head = s.world.head

    answer = hc.client.post(item_url(s, item_id, "unblock"),
                            {"unblock-reason": "my carefully typed resolution"})

    child = hc.client.post(item_url(s, item_id, "child"), {
        "child-title": "A child under a taken id", "child-child_mission_id": s.mission_id,
        "child-child_failure_policy": "block"})

    # The unblock form is not on the page of an open item: what was typed is shown with
    # the refusal. The child form is, and keeps it.
    assert answer.status_code == 409 and refusal_code(answer) == "TRANSITION_NOT_PERMITTED"
    assert "my carefully typed resolution" in html_of(answer)
    assert child.status_code in (400, 409) and refusal_code(child)
    assert 'value="A child under a taken id"' in html_of(child)
    assert s.world.head == head


def test_cancelling_a_work_item_needs_a_reason(coordinated):
    s, hc = coordinated
    item_id = s.authorize()

    blank = hc.client.post(item_url(s, item_id, "cancel"), {"cancel-reason": ""})
    cancelled = hc.client.post(item_url(s, item_id, "cancel"), {"cancel-reason": "duplicate"})

    assert blank.status_code == 400
    assert cancelled.status_code == 302 and s.item(item_id)["state"] == "cancelled"


# --- the Conversation ------------------------------------------------------------------------

def test_an_ambiguity_disables_the_offer_until_a_revision_clears_it(coordinated):
    s, hc = coordinated
    item_id = s.authorize()
    s.w1.ok("conversation.post", {"kind": "ambiguity", "text": "Which quarter, Q3 or Q4?",
                                  "messageId": "amb-1"}, workItemId=item_id)

    blocked = html_of(hc.client.get(item_url(s, item_id)))
    answered = hc.client.post(item_url(s, item_id, "messages"), {
        "message-kind": "resolution", "message-text": "Q3", "message-resolves": "amb-1"})
    still = html_of(hc.client.get(item_url(s, item_id)))
    revise_form = html_of(hc.client.get(item_url(s, item_id, "revise")))
    data = form_data(revise_form, "contract-form")
    data["goal"] = "Summarize the Q3 report"
    revised = hc.client.post(item_url(s, item_id, "revise"), data)
    assert revised.status_code == 302, html_of(revised)[-3000:]
    cleared = html_of(hc.client.get(item_url(s, item_id)))

    offer_button = re.compile(r'<button type="submit" id="send-offer" disabled')
    assert offer_button.search(blocked) and "acceptance is blocked" in blocked
    assert "Which quarter, Q3 or Q4?" in blocked
    assert answered.status_code == 302 and offer_button.search(still)
    assert not offer_button.search(cleared) and 'id="send-offer"' in cleared


class FormReader(HTMLParser):
    """What a browser would post for one <form>: its inputs, checked boxes, selected
    options and textareas."""

    def __init__(self, form_id: str):
        super().__init__()
        self.form_id, self.inside, self.data = form_id, False, {}
        self.select = self.textarea = None

    def add(self, name, value):
        self.data.setdefault(name, []).append(value)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form":
            self.inside = a.get("id") == self.form_id
        if not self.inside or ("name" not in a and tag not in ("option",)):
            return
        if tag == "input" and a.get("type") not in ("submit", "button"):
            if a.get("type") in ("checkbox", "radio") and "checked" not in a:
                return
            self.add(a["name"], a.get("value", "on" if a.get("type") == "checkbox" else ""))
        elif tag == "select":
            self.select, self.first, self.chosen = a["name"], None, False
        elif tag == "option" and self.select:
            self.first = a.get("value", "") if self.first is None else self.first
            if "selected" in a:
                self.add(self.select, a.get("value", ""))
                self.chosen = True
        elif tag == "textarea":
            self.textarea = a["name"]
            self.add(self.textarea, "")

    def handle_data(self, data):
        if self.textarea:
            self.data[self.textarea][-1] += data

    def handle_endtag(self, tag):
        if tag == "form":
            self.inside = False
        elif tag == "select" and self.select:
            if not self.chosen and self.first is not None:  # a browser sends the first
                self.add(self.select, self.first)
            self.select = None
        elif tag == "textarea":
            self.textarea = None


def form_data(html: str, form_id: str) -> dict:
    reader = FormReader(form_id)
    reader.feed(html)
    return {k: v if len(v) > 1 else v[0] for k, v in reader.data.items()}


# --- roles and forgery -------------------------------------------------------------------------

ITEM_ACTIONS = ("offer", "preempt", "unblock", "cancel", "child", "messages", "accept", "fail",
                "grant-execution", "revise")
MISSION_ACTIONS = ("approve", "end", "edges", "work-items/new")


def test_an_observer_sees_no_action_and_every_forged_post_is_refused(coordinated):
    s, _hc = coordinated
    item_id = s.authorize()
    observer = s.world.human("watcher-" + s.world.group.slug, roles=("observer",))
    head = s.world.head

    pages = [html_of(observer.client.get(p)) for p in (
        f"/g/{s.world.group.id}/", mission_url(s), item_url(s, item_id))]
    answers = {a: observer.client.post(item_url(s, item_id, a), {
        "offer-auto": "on", "offer-mode": "sequential", "offer-expires_in_minutes": "5",
        "preempt-reason": "x", "unblock-reason": "x", "cancel-reason": "x",
        "child-title": "x", "child-child_failure_policy": "block", "message-kind": "ambiguity",
        "message-text": "x", "reason": "x", "note": "x"}).status_code for a in ITEM_ACTIONS}
    answers.update({a: observer.client.post(mission_url(s, a), {
        "end-how": "cancel", "end-reason": "x", "dependant": item_id, "dependency": item_id,
        "comment": "x"}).status_code for a in MISSION_ACTIONS})

    for html in pages:
        # An observer's one right (docs/protocol.md): a plain message in the Conversation.
        actions = set(re.findall(r'<form method="post" action="(/g/[^"]+)"', html))
        assert actions <= {item_url(s, item_id, "messages")}, actions
        assert 'id="new-mission"' not in html and 'id="add-item"' not in html
        assert 'value="ambiguity"' not in html
    assert all(status in (400, 403, 409) for status in answers.values()), answers
    assert s.world.head == head


def test_a_post_without_csrf_is_refused(coordinated):
    s, hc = coordinated
    item_id = s.authorize()
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    strict.force_login(hc_user(hc))
    head = s.world.head

    answer = strict.post(item_url(s, item_id, "cancel"), {"cancel-reason": "no token"})

    assert answer.status_code == 403 and s.world.head == head


def hc_user(actor):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get(username=actor.name)


# --- the contract form against the pipeline ----------------------------------------------------

def test_an_invalid_contract_is_refused_beside_the_field_it_names(coordinated):
    s, hc = coordinated
    url = mission_url(s, "work-items/new")
    data = form_data(html_of(hc.client.get(url)), "contract-form")
    data.update({"goal": "Summarize the report", "deliverables-0-id": "summary",
                 "deliverables-0-description": "The summary",
                 "deliverables-0-schema": '{"type": "no-such-type"}',
                 "acceptanceCriteria-0-id": "ac1",
                 "acceptanceCriteria-0-description": "Covers it"})
    head = s.world.head

    refused = hc.client.post(url, data)
    page = html_of(refused)

    assert refused.status_code == 400 and refusal_code(refused) == "INVALID_CONTRACT"
    beside = re.search(r'<p class="field-error" id="([^"]+)-error">([^<]+)</p>', page)
    assert beside and "deliverables-0-schema" in beside.group(1), beside
    assert "Summarize the report" in page  # what was typed stays
    assert s.world.head == head


def test_a_proposal_is_listed_with_its_proposer_and_authorized_from_the_form(coordinated):
    s, hc = coordinated
    proposed = s.w1.ok("work.propose", {"missionId": s.mission_id,
                                        "contract": contract(goal="Check the figures")})
    proposal_id = proposed[0]["data"]["proposalId"]
    s.w2.ok("work.propose", {"missionId": s.mission_id, "contract": contract(goal="Recheck")})

    page = html_of(hc.client.get(mission_url(s)))
    row = re.search(rf'<tr data-proposal="{proposal_id}">(.*?)</tr>', page, re.S).group(1)
    home = html_of(hc.client.get("/"))
    url = mission_url(s, f"proposals/{proposal_id}/authorize")
    data = form_data(html_of(hc.client.get(url)), "contract-form")
    authorized = hc.client.post(url, data)

    assert "Check the figures" in row and s.w1.principal in row
    # Both wait on the Coordinator, as one row naming the oldest, linked to the list.
    assert waiting_rows(hc.client) == [("proposals", s.mission_id, None)]
    assert (f"Work proposed by {s.w1.principal}: “Check the figures” and 1 more" in home)
    assert f'{mission_url(s)}#proposals"' in home
    assert authorized.status_code == 302, html_of(authorized)[-2000:]
    event = last_event(s)
    assert (event.type, event.data["proposalId"]) == ("work.authorized", proposal_id)
    assert event.data["contract"]["goal"] == "Check the figures"
    assert f'data-proposal="{proposal_id}"' not in html_of(hc.client.get(mission_url(s)))
    assert "“Recheck”" in html_of(hc.client.get("/"))  # the other one still waits
