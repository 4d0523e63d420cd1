"""The human dashboard (apps/dashboard) through Django's test client on PostgreSQL: logging
in, membership and role checks on every page, each page's key facts, and every action as
one command through the append pipeline (the resulting event in the log; a refusal shown
with its PROTOCOL code, the head unchanged)."""

import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from apps.ledger.models import Event
from tests.support import Scenario, evidence

HTML = "text/html"
CSRF = re.compile(r'name="csrfmiddlewaretoken" value="[^"]+"')


def page(actor, path: str, status: int = 200) -> str:
    response = actor.client.get(path)
    assert response.status_code == status, (response.status_code, response.content[:300])
    assert response["Content-Type"].startswith(HTML)
    return response.content.decode()


def item_url(s: Scenario, item_id: str, action: str = "") -> str:
    return f"/g/{s.world.group.id}/work-items/{item_id}/{action}"


def mission_url(s: Scenario, action: str = "") -> str:
    return f"/g/{s.world.group.id}/missions/{s.mission_id}/{action}"


def human_coordinator(s: Scenario):
    """A human Coordinator, whose Mission the Scenario then works in."""
    human = s.world.human("hc-" + s.world.group.slug, roles=("coordinator",))
    s.coordinated_by(human)
    return human


def submitted(s: Scenario, **contract_overrides) -> str:
    """An item run by w1 and submitted with Evidence for ac1 and ac2 (no artifacts)."""
    item_id, _ = s.running(s.w1, **contract_overrides)
    s.w1.ok("work.submit", {"contractRevision": 1, "artifacts": [s.deliver(item_id)], "evidence": [
        evidence(["ac1"], result="pass: every section has a paragraph"),
        evidence(["ac2"], result="pass: 412 words")]}, **s.lease_fields(item_id))
    return item_id


def last_event(s: Scenario) -> Event:
    return Event.objects.filter(group_id=s.world.group.id).order_by("-sequence").first()


# --- logging in -------------------------------------------------------------------------------

def test_pages_ask_for_a_login_and_the_login_form_leads_to_the_groups(scenario):
    s = scenario
    anonymous = Client(enforce_csrf_checks=True)

    to_login = anonymous.get(item_url(s, "x"))
    form = anonymous.get("/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.content.decode())
    logged_in = anonymous.post("/login/", {"username": s.owner.name, "password": "pw",
                                           "csrfmiddlewaretoken": token.group(1)})
    groups = anonymous.get("/").content.decode()

    assert to_login.status_code == 302 and to_login["Location"].startswith("/login/?next=")
    assert logged_in.status_code == 302 and logged_in["Location"] == "/"
    assert s.world.group.id in groups and "owner" in groups


def test_a_wrong_password_is_refused_and_logout_ends_the_session(scenario):
    s = scenario
    client = Client()

    wrong = client.post("/login/", {"username": s.owner.name, "password": "nope"})
    s.owner.client.post("/logout/")
    after = s.owner.client.get("/")

    assert wrong.status_code == 200 and "did not match" in wrong.content.decode()
    assert after.status_code == 302 and after["Location"].startswith("/login/")


# --- membership: a non-member learns nothing ------------------------------------------------------

def test_the_group_list_has_only_the_users_groups_and_other_groups_are_404(db):
    mine, theirs = Scenario(), Scenario()
    item_id = theirs.authorize()
    other = theirs.world.group.id

    groups = page(mine.owner, "/")
    answers = [mine.owner.client.get(path) for path in (
        f"/g/{other}/", f"/g/{other}/missions/{theirs.mission_id}/",
        f"/g/{other}/work-items/{item_id}/", "/g/grp_no_such_group/")]
    # The same page whether the Group exists or not (but for the per-response CSRF mask).
    bodies = {CSRF.sub("", a.content.decode()) for a in answers}

    assert mine.world.group.id in groups and other not in groups
    assert [a.status_code for a in answers] == [404] * 4
    assert len(bodies) == 1
    assert other not in bodies.pop() and theirs.mission_id not in answers[1].content.decode()


def test_a_non_member_cannot_act_in_another_group(db):
    mine, theirs = Scenario(), Scenario()
    item_id = submitted(theirs)
    head = theirs.world.head
    intruder = mine.world.human("intruder-" + mine.world.group.slug, roles=("coordinator",
                                                                             "owner"))

    accept = intruder.client.post(item_url(theirs, item_id, "accept"), {"note": "mine now"})
    approve = intruder.client.post(mission_url(theirs, "approve"), {})

    assert (accept.status_code, approve.status_code) == (404, 404)
    assert theirs.world.head == head
    assert theirs.item(item_id)["state"] == "submitted"


# --- the pages ----------------------------------------------------------------------------------

def test_the_group_page_lists_its_missions(scenario):
    s = scenario
    s.authorize()

    html = page(s.owner, f"/g/{s.world.group.id}/")

    assert s.mission_id in html and "Q3 review" in html and "open 1" in html


def test_the_mission_page_shows_the_work_graph(scenario):
    s = scenario
    first = s.authorize(goal="Collect the sources")
    second = s.authorize(goal="Write it up", dependencies={"workItems": [first],
                                                           "policy": "all_verified"})
    s.offer(first, s.w1)
    s.accept(first, s.w1)

    html = page(s.owner, mission_url(s))
    rows = {m.group(1): m.group(0) for m in re.finditer(
        r'<tr data-item="([^"]+)">.*?</tr>', html, re.S)}

    assert set(rows) == {first, second}
    assert "queued" in rows[first] and s.w1.name in rows[first]
    assert "open" in rows[second] and f'>{first}</a>' in rows[second]
    assert "all_verified" in rows[second]
    assert html.count('data-edge=') == 1  # one dependency, one arrow
    assert f'data-edge="{first}->{second}" data-met="false"' in html
    assert f"{second} depends on {first}" in html


def test_the_work_item_page_shows_contract_state_owner_and_lease(scenario):
    s = scenario
    item_id, started = s.running(s.w1)

    html = page(s.owner, item_url(s, item_id))

    assert "Summarize the quarterly report" in html  # goal
    assert not re.search(r'(src|href)="(https?:)?//', html)  # no CDN: everything is ours
    assert "A one-page summary" in html  # deliverable
    assert "Covers every section" in html and "Under 500 words" in html  # criteria
    assert 'id="item-state">active<' in html
    assert s.w1.name in html and started["leaseId"] in html
    assert "work.started" in html and "work.offer_accepted" in html  # the audit trail


def test_the_work_item_page_shows_the_submitted_evidence_per_criterion(scenario):
    s = scenario
    item_id = submitted(s)

    html = page(s.owner, item_url(s, item_id))
    rows = {m.group(1): m.group(0) for m in re.finditer(
        r'<tr data-criterion="([^"]+)">.*?</tr>', html, re.S)}

    assert "pass: every section has a paragraph" in rows["ac1"]
    assert "pass: 412 words" in rows["ac2"] and "412 words" not in rows["ac1"]  # ids are random hex
    assert "pending" in rows["ac1"]  # no review evaluation has run in this transaction


def test_refused_commands_are_on_the_audit_trail(scenario):
    s = scenario
    item_id, _ = s.running(s.w1)
    s.w2.send("work.start", {}, workItemId=item_id, ownershipEpoch=1)  # not the owner

    html = page(s.owner, item_url(s, item_id))

    assert 'id="refused-commands"' in html and "work.start" in html
    assert s.w2.name in html


# --- actions, with roles ------------------------------------------------------------------------

def test_only_a_coordinator_sees_the_decision_buttons(scenario):
    s = scenario
    coordinator = human_coordinator(s)
    item_id = submitted(s)

    as_owner = page(s.owner, item_url(s, item_id))
    as_coordinator = page(coordinator, item_url(s, item_id))

    assert 'id="accept-result"' not in as_owner and 'id="fail-result"' not in as_owner
    assert 'id="accept-result"' in as_coordinator and 'id="fail-result"' in as_coordinator
    assert 'id="approve-mission"' in page(s.owner, mission_url(s))
    assert 'id="approve-mission"' not in page(coordinator, mission_url(s))


def test_the_group_roles_of_another_missions_coordinator_and_owner_show_no_controls(scenario):
    # A Mission's ownerId and coordinatorId decide for it, not the Group role (the
    # pipeline refuses everyone else): its controls are not shown to them.
    s = scenario
    coordinator = human_coordinator(s)
    other_coordinator = s.world.human("hc2-" + s.world.group.slug, roles=("coordinator",))
    other_owner = s.world.human("ow2-" + s.world.group.slug, roles=("owner",))
    item_id = submitted(s)

    assert 'id="accept-result"' in page(coordinator, item_url(s, item_id))
    assert 'id="accept-result"' not in page(other_coordinator, item_url(s, item_id))
    assert 'id="fail-result"' not in page(other_coordinator, item_url(s, item_id))
    assert 'id="approve-mission"' not in page(other_owner, mission_url(s))


def test_a_coordinator_accepts_a_result_through_the_pipeline(scenario):
    s = scenario
    coordinator = human_coordinator(s)
    item_id = submitted(s)

    # No review has run here: both criteria are pending, so each needs its reason.
    response = coordinator.client.post(item_url(s, item_id, "accept"), {
        "note": "read it; it covers the report", "override-ac1": "every section is there",
        "override-ac2": "412 words, counted"})
    event = last_event(s)
    html = page(coordinator, response["Location"])

    assert response.status_code == 302
    assert (event.type, event.actor, event.work_item_id) == ("work.verified",
                                                             coordinator.principal, item_id)
    note, *reasons = event.data["evidence"]
    assert all(r["producer"] == coordinator.principal and r["method"] == "human-review"
               for r in event.data["evidence"])
    assert sorted(note["criteria"]) == ["ac1", "ac2"]  # every criterion is overridden
    assert note["result"] == "pass: read it; it covers the report"
    assert [(r["criteria"], r["result"]) for r in reasons] == [
        (["ac1"], "pass: every section is there"), (["ac2"], "pass: 412 words, counted")]
    assert f"work.verified #{event.sequence}" in html  # the confirmation
    assert 'id="decision"' in html and "pass: read it; it covers the report" in html
    assert 'id="accept-result"' not in html  # decided: no more buttons


def test_a_coordinator_fails_a_result_with_evidence_and_a_reason(scenario):
    s = scenario
    coordinator = human_coordinator(s)
    item_id = submitted(s)

    response = coordinator.client.post(item_url(s, item_id, "fail"), {
        "criteria": ["ac1", "no-such"], "reason": "misses the outlook", "permanent": "on"})
    event = last_event(s)

    assert response.status_code == 302
    assert (event.type, event.actor) == ("work.failed", coordinator.principal)
    assert event.data["reason"] == "misses the outlook" and event.data["permanent"] is True
    assert event.data["evidence"][0]["criteria"] == ["ac1"]
    assert event.data["evidence"][0]["result"] == "fail: misses the outlook"
    assert s.item(item_id)["state"] == "failed"
    assert "misses the outlook" in page(s.owner, item_url(s, item_id))


def test_a_refused_action_shows_the_protocol_error_and_changes_nothing(scenario):
    s = scenario
    coordinator = human_coordinator(s)
    item_id, _ = s.running(s.w1)  # active, not submitted
    head = s.world.head

    accept = coordinator.client.post(item_url(s, item_id, "accept"), {})
    approve = s.owner.client.post(mission_url(s, "approve"), {})

    assert accept.status_code == 409
    assert 'data-code="TRANSITION_NOT_PERMITTED"' in accept.content.decode()
    assert approve.status_code == 409
    assert "not verified or cancelled" in approve.content.decode()
    assert s.world.head == head
    assert s.item(item_id)["state"] == "active"


def test_a_forged_post_without_the_role_is_refused_by_the_pipeline(scenario):
    s = scenario
    coordinator = human_coordinator(s)
    item_id = submitted(s)
    head = s.world.head

    accept = s.owner.client.post(item_url(s, item_id, "accept"), {"note": "forged"})
    approve = coordinator.client.post(mission_url(s, "approve"), {})

    assert accept.status_code == 403 and 'data-code="FORBIDDEN"' in accept.content.decode()
    assert "work.accept_result needs one of the roles coordinator" in accept.content.decode()
    assert approve.status_code == 403 and 'data-code="FORBIDDEN"' in approve.content.decode()
    assert s.world.head == head
    assert s.item(item_id)["state"] == "submitted"


def test_bad_form_input_is_a_protocol_error_on_the_page_not_a_crash(scenario):
    s = scenario
    coordinator = human_coordinator(s)
    item_id = submitted(s)
    head = s.world.head

    too_long = coordinator.client.post(item_url(s, item_id, "fail"), {"reason": "x" * 10_001})
    nul = coordinator.client.post(item_url(s, item_id, "accept"), {"note": "a\x00b"})
    anonymous = Client().post(item_url(s, item_id, "accept"), {})

    assert too_long.status_code == 400
    assert 'data-code="VALIDATION_ERROR"' in too_long.content.decode()
    assert nul.status_code == 400 and 'data-code="VALIDATION_ERROR"' in nul.content.decode()
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/")
    assert s.world.head == head
    assert s.item(item_id)["state"] == "submitted"


def test_u0000_in_a_page_parameter_is_refused_before_any_view_reads_it(scenario):
    """PostgreSQL text cannot hold U+0000: a lookup by such a value failed in the database."""
    s = scenario
    coordinator = human_coordinator(s)
    item_id = s.authorize()
    group, head = s.world.group.id, s.world.head

    answers = [coordinator.client.get("/?group=a%00b"),
               coordinator.client.get(f"/g/{group}/log/?mission=%00owned"),
               coordinator.client.post(f"/g/{group}/missions/{s.mission_id}/edges",
                                       {"dependant": "x\x00", "dependency": item_id}),
               coordinator.client.post(item_url(s, item_id, "cancel"), {"reason\x00": "no"})]
    api = s.owner.client.get("/api/v1/authority?x=%00")

    for answer in answers:
        assert answer.status_code == 400
        assert 'data-code="VALIDATION_ERROR"' in answer.content.decode()
        assert "contains the character U+0000" in answer.content.decode()
    assert "the field “reason\\u0000”" in answers[-1].content.decode()
    assert api.status_code == 200  # the API judges its own parameters
    assert s.world.head == head and s.item(item_id)["state"] == "open"


def test_posts_need_a_csrf_token(scenario):
    s = scenario
    coordinator = human_coordinator(s)
    item_id = submitted(s)
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(get_user_model().objects.get(username=coordinator.name))
    head = s.world.head

    response = strict.post(item_url(s, item_id, "accept"), {"note": "no token"})

    assert response.status_code == 403
    assert s.world.head == head


def test_actions_act_only_on_post_and_a_get_goes_to_the_page(scenario):
    s = scenario
    item_id = submitted(s)
    head = s.world.head

    response = s.owner.client.get(item_url(s, item_id, "accept"))

    assert response.status_code == 302 and response["Location"] == item_url(s, item_id)
    assert s.world.head == head


def test_an_owner_grants_execution_approval(scenario):
    s = scenario
    risky = {"class": "high", "requiresExecutionApproval": True}
    item_id = s.authorize(risk=risky)
    s.offer(item_id, s.w1)
    s.accept(item_id, s.w1)

    before = page(s.owner, item_url(s, item_id))
    response = s.owner.client.post(item_url(s, item_id, "grant-execution"),
                                   {"grant-comment": "backup verified"})
    event = last_event(s)
    after = page(s.owner, item_url(s, item_id))

    assert 'id="grant-execution"' in before
    assert response.status_code == 302
    assert (event.type, event.actor) == ("approval.execution_granted", s.owner.principal)
    assert event.data["comment"] == "backup verified"
    assert 'id="grant-execution"' not in after and "<strong>granted</strong>" in after
    s.start(item_id, s.w1)  # the start gate is open now


def test_an_owner_approves_a_finished_mission(scenario):
    s = scenario
    coordinator = human_coordinator(s)
    item_id = submitted(s)
    coordinator.client.post(item_url(s, item_id, "accept"), {
        "note": "read it", "override-ac1": "read it", "override-ac2": "counted"})

    response = s.owner.client.post(mission_url(s, "approve"), {"comment": "ship it"})
    event = last_event(s)
    html = page(s.owner, mission_url(s))

    assert response.status_code == 302
    assert (event.type, event.actor, event.mission_id) == ("mission.approved",
                                                           s.owner.principal, s.mission_id)
    assert 'id="mission-state">approved<' in html and "ship it" in html
    assert 'id="approve-mission"' not in html


@pytest.mark.parametrize("name", ["sha256:" + "0" * 64, "not-a-hash"])
def test_an_unknown_artifact_is_404(scenario, name):
    s = scenario

    assert s.owner.client.get(f"/g/{s.world.group.id}/artifacts/{name}/").status_code == 404
