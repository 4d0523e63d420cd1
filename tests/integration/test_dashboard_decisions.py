"""Every decision reads back where it was taken (issue 25), through Django's test client on
PostgreSQL: a refused final Approval leaves the owner's Waiting on me until new or
revised work answers it, and stands on the Mission page for everyone; the Mission page's
Decisions list every human decision with its reason, who and when, in order, read from
the log in a fixed number of statements; a queued item whose owner was fenced waits on
the Coordinator; accepting a result is a decision with a note and a reason per criterion
it overrides, which the owner's Evidence matrix shows; the execution approval card shows
the start-by deadline, the capabilities and only unfinished work downstream."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.ledger.models import Event
from apps.work import sweeper
from tests.integration.artifact_helpers import submitted_json
from tests.integration.test_dashboard import human_coordinator, item_url, last_event, mission_url
from tests.integration.test_dashboard_owner import verified, waiting_rows
from tests.support import Scenario, contract, evidence, later

RISKY = {"class": "high", "requiresExecutionApproval": True}


def html_of(actor, path: str) -> str:
    response = actor.client.get(path)
    assert response.status_code == 200, (path, response.status_code)
    return response.content.decode()


def section(html: str, element_id: str) -> str:
    found = re.search(rf'<(section|div|dd|table|p)\b[^>]*id="{element_id}".*?</\1>', html, re.S)
    return found.group(0) if found else ""


def text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html))


def decision_types(html: str) -> list:
    return re.findall(r'<li class="decision-entry[^"]*" data-type="([^"]+)"',
                      section(html, "decisions"))


def refuse(s: Scenario, reason: str = "the summary misses Q4", per_item=None) -> None:
    """The owner refuses the final Approval on the Mission page; `per_item`: the reason
    for the WorkItem at each index of the form."""
    data = {"refuse-reason": reason}
    data.update({f"refuse-item_{index}": why for index, why in (per_item or {}).items()})
    response = s.owner.client.post(mission_url(s, "refuse-approval"), data)
    assert response.status_code == 302, response.content[:500]


def submitted_item(s: Scenario) -> str:
    item_id, _ = s.running(s.w1)
    s.w1.ok("work.submit", {"contractRevision": 1, "artifacts": [s.deliver(item_id)],
                            "evidence": [evidence(["ac1", "ac2"])]}, **s.lease_fields(item_id))
    return item_id


# --- 1. a refused final Approval ---------------------------------------------------------------

@pytest.fixture
def refused(scenario):
    """A Mission (human Coordinator) whose one WorkItem is verified and whose final
    Approval the owner has just refused: (scenario, coordinator, item id)."""
    s = scenario
    hc = human_coordinator(s)
    item_id = verified(s)
    assert ("final-approval", s.mission_id, None) in waiting_rows(s.owner.client)
    refuse(s, per_item={0: "cite the sources"})
    return s, hc, item_id


def test_a_refusal_leaves_the_owners_waiting_on_me_until_new_work_is_done(refused):
    s, hc, _ = refused

    after_refusal = waiting_rows(s.owner.client)
    coordinator_after_refusal = waiting_rows(hc.client)
    answer = s.authorize(goal="Add the Q4 figures")  # new work answers the refusal
    owner_while_it_runs = waiting_rows(s.owner.client)
    coordinator_answered = waiting_rows(hc.client)
    s.offer(answer, s.w1)
    s.accept(answer)
    s.start(answer)
    s.w1.ok("work.submit", {"contractRevision": 1, "artifacts": [s.deliver(answer)],
                            "evidence": [evidence(["ac1", "ac2"])]}, **s.lease_fields(answer))
    s.accept_result(answer)
    owner_done = waiting_rows(s.owner.client)

    assert ("final-approval", s.mission_id, None) not in after_refusal
    assert ("approval-refused", s.mission_id, None) in coordinator_after_refusal
    assert owner_while_it_runs == []  # not answered by the owner; not done yet either
    assert ("approval-refused", s.mission_id, None) not in coordinator_answered
    assert ("final-approval", s.mission_id, None) in owner_done


def test_a_refusal_is_answered_by_a_result_accepted_after_it(scenario):
    s = scenario
    hc = human_coordinator(s)
    verified(s)
    in_flight = submitted_item(s)
    refuse(s, "wait for the last one, then I read it all")

    before = waiting_rows(hc.client), waiting_rows(s.owner.client)
    s.accept_result(in_flight)  # work.verified after the refusal: new work answers it
    after = waiting_rows(hc.client), waiting_rows(s.owner.client)
    approved = s.owner.client.post(mission_url(s, "approve"), {"comment": "read it all"})
    html = html_of(s.owner, mission_url(s))

    assert ("approval-refused", s.mission_id, None) in before[0]
    assert ("final-approval", s.mission_id, None) not in before[1]
    assert ("approval-refused", s.mission_id, None) not in after[0]
    assert ("final-approval", s.mission_id, None) in after[1]
    assert approved.status_code == 302
    # The agent delegate's acceptances are not human decisions: only the owner's two.
    assert decision_types(html) == ["mission.approval_refused", "mission.approved"]
    shown = text(section(html, "decisions"))
    assert f"Answered by work.verified of {in_flight}" in shown and "read it all" in shown
    assert 'id="approval-refusal"' not in html  # approved: the Decisions keep it


def test_a_message_does_not_answer_a_refusal(refused):
    s, hc, item_id = refused

    s.c.ok("conversation.post", {"kind": "message", "text": "looking into it"},
           workItemId=item_id)

    assert ("approval-refused", s.mission_id, None) in waiting_rows(hc.client)
    assert ("final-approval", s.mission_id, None) not in waiting_rows(s.owner.client)


def test_the_refusal_stands_on_the_mission_page_for_everyone_who_sees_it(refused):
    s, hc, item_id = refused
    observer = s.world.human("obs-" + s.world.group.slug, roles=("observer",))
    event = last_event(s)

    pages = {who.principal: html_of(who, mission_url(s)) for who in (s.owner, hc, observer)}
    s.authorize(goal="Add the Q4 figures")
    answered = html_of(observer, mission_url(s))

    for html in pages.values():
        shown = text(section(html, "approval-refusal"))
        assert "The final Approval was refused" in shown
        assert f"By {s.owner.principal}" in shown and f"event #{event.sequence}" in shown
        assert "the summary misses Q4" in shown and f"{item_id}: cite the sources" in shown
        assert "Not answered yet" in shown
        assert re.search(r'id="approval-refusal".*?<time datetime=', html, re.S)
    assert "nothing new or revised has answered it yet" in text(
        section(pages[s.owner.principal], "last-refusal"))
    shown = text(section(answered, "approval-refusal"))
    assert "Answered: work.authorized of" in shown and "the summary misses Q4" in shown


# --- 2. the Mission's Decisions ----------------------------------------------------------------

def test_the_decisions_list_every_human_decision_with_its_reason_in_order(scenario):
    s = scenario
    hc = human_coordinator(s)
    granted = s.queued(s.w1, risk=RISKY)
    s.owner.client.post(item_url(s, granted, "grant-execution"),
                        {"grant-comment": "backups checked"})
    s.start(granted)
    s.w1.ok("work.submit", {"contractRevision": 1, "artifacts": [s.deliver(granted)],
                            "evidence": [evidence(["ac1", "ac2"])]}, **s.lease_fields(granted))
    hc.client.post(item_url(s, granted, "accept"), {
        "note": "read every section", "override-ac1": "I read all five sections",
        "override-ac2": "412 words by my count"})
    refused_run = s.queued(s.w1, risk=RISKY)
    s.owner.client.post(item_url(s, refused_run, "refuse-execution"),
                        {"refuse-reason": "no rollback plan"})
    hc.client.post(item_url(s, refused_run, "cancel"), {"cancel-reason": "not without a plan"})
    by_agent = s.authorize(goal="Cancelled by the agent delegate")
    s.c.ok("work.cancel", {"reason": "an agent's call"}, workItemId=by_agent)
    failed = submitted_item(s)
    hc.client.post(item_url(s, failed, "fail"), {"reason": "misses section 3",
                                                 "criteria": ["ac1"], "permanent": "on"})
    refuse(s, "one item failed: redo it or end the Mission")
    s.c.ok("work.revise_contract", {"contract": contract(goal="Redo section 3")},
           workItemId=failed)  # an answer, not a human decision
    never_started = s.authorize(goal="Never started")
    s.owner.client.post(mission_url(s, "end"), {"end-how": "cancel",
                                                "end-reason": "not worth it any more"})

    html = html_of(hc, mission_url(s))
    entries = re.findall(r'<li class="decision-entry.*?</li>\n', section(html, "decisions"), re.S)
    shown = [text(e) for e in entries]

    assert decision_types(html) == [
        "approval.execution_granted", "work.verified", "approval.execution_refused",
        "work.cancelled", "work.failed", "mission.approval_refused", "mission.cancelled"]
    assert "Granted execution approval" in shown[0] and "backups checked" in shown[0]
    assert f"by {s.owner.principal}" in shown[0] and "for contract revision 1" in shown[0]
    assert f"Accepted the result {granted} — by {hc.principal}" in shown[1]
    assert "pass: I read all five sections for ac1" in shown[1]
    assert "pass: read every section for ac1, ac2" in shown[1]
    assert "overriding ac1, ac2" in shown[1]
    assert "no rollback plan" in shown[2] and "not without a plan" in shown[3]
    assert "misses section 3" in shown[4] and "permanent: no retry" in shown[4]
    assert "one item failed: redo it or end the Mission" in shown[5]
    assert f"Answered by work.contract_revised of {failed}" in shown[5]
    assert "Cancelled the Mission" in shown[6] and "not worth it any more" in shown[6]
    assert f"Ended with it: {never_started} (cancelled)" in shown[6]
    assert "an agent's call" not in html.split('id="decisions"')[1]
    assert all("<time datetime=" in e for e in entries)


def test_the_decisions_are_read_in_a_fixed_number_of_statements(scenario):
    s = scenario
    human_coordinator(s)

    def statements() -> int:
        with CaptureQueriesContext(connection) as captured:
            html_of(s.owner, mission_url(s))
        return sum("ledger_event" in q["sql"] for q in captured.captured_queries)

    verified(s)
    refuse(s, "first")
    few = statements()
    for index in range(4):
        s.authorize(goal=f"More {index}")
        refuse(s, f"again {index}")
    many = statements()

    assert few == many
    assert len(decision_types(html_of(s.owner, mission_url(s)))) == 5


def test_a_mission_ended_lists_the_work_it_ended_under_it(scenario):
    s = scenario
    hc = human_coordinator(s)
    open_item = s.authorize(goal="Never started")

    hc.client.post(mission_url(s, "end"), {"end-how": "cancel", "end-reason": "budget cut"})
    html = html_of(s.owner, mission_url(s))

    assert decision_types(html) == ["mission.cancelled"]
    shown = text(section(html, "decisions"))
    assert "Cancelled the Mission" in shown and "budget cut" in shown
    assert f"Ended with it: {open_item} (cancelled)" in shown


# --- 3. work whose owner has gone ------------------------------------------------------------

def test_a_queued_item_whose_owner_was_fenced_waits_on_the_coordinator(db, clock):
    s = Scenario()
    hc = human_coordinator(s)  # no automatic dispatch
    queued = s.queued(s.w1)
    active, _ = s.running(s.w2)
    later(clock, 3600)  # past the start-by deadline and the lease

    before_sweep = {(k, i) for k, _, i in waiting_rows(hc.client)}
    sweeper.sweep()
    fenced = s.item(queued)
    after_sweep = {(k, i) for k, _, i in waiting_rows(hc.client)}
    home = html_of(hc, "/")

    assert {("re-offer", queued), ("re-offer", active)} <= before_sweep
    assert (fenced["state"], fenced["owner"]) == ("queued", None)
    assert Event.objects.filter(group_id=s.world.group.id, work_item_id=queued,
                                type="work.ownership_expired").exists()
    assert {("re-offer", queued), ("re-offer", active)} <= after_sweep
    assert f"Its owner {s.w1.name} was fenced (its ownership expired): offer it again" in home


# --- 4. acceptance is a decision ---------------------------------------------------------------

def test_accepting_asks_for_confirmation_a_note_and_a_reason_per_pending_criterion(scenario):
    s = scenario
    hc = human_coordinator(s)
    item_id = submitted_item(s)  # no review ran here: ac1 and ac2 are pending
    head = s.world.head

    page = html_of(hc, item_url(s, item_id))
    form = section(page, "decide")
    no_note = hc.client.post(item_url(s, item_id, "accept"), {
        "override-ac1": "read", "override-ac2": "counted"})
    one_reason = hc.client.post(item_url(s, item_id, "accept"), {
        "note": "fine", "override-ac1": "read"})
    unchanged = s.world.head
    accepted = hc.client.post(item_url(s, item_id, "accept"), {
        "note": "fine", "override-ac1": "read every section", "override-ac2": "412 words"})
    event = last_event(s)

    assert re.search(r'<form[^>]*id="accept-form"[^>]*data-confirm="Accept the result of '
                     rf'{item_id}, overriding ac1, ac2\?', form)
    assert re.search(r'<textarea name="note"[^>]*required', form)
    assert re.search(r'<textarea name="override-ac1"[^>]*required', form)
    assert re.search(r'<textarea name="override-ac2"[^>]*required', form)
    assert "Why accept it although ac1 has not passed" in form
    assert no_note.status_code == one_reason.status_code == 400
    assert 'id="override-ac2-error"' in one_reason.content.decode() or \
        "This field is required." in one_reason.content.decode()
    assert unchanged == head
    assert accepted.status_code == 302
    assert event.type == "work.verified" and event.data["review"]["overridden"] == ["ac1", "ac2"]
    assert [(e["criteria"], e["result"]) for e in event.data["evidence"]] == [
        (["ac1", "ac2"], "pass: fine"), (["ac1"], "pass: read every section"),
        (["ac2"], "pass: 412 words")]


def test_a_passed_review_asks_only_for_the_note(transactional_db, eager):
    s = Scenario()
    hc = human_coordinator(s)
    reviewer = s.world.agent("rev-" + s.world.group.slug, roles=("reviewer",))
    item_id, name = submitted_json(s, {"title": "Q3 summary", "words": 320})
    reviewer.ok("evidence.record", {"evidence": [evidence(
        ["ac1"], producer=reviewer.principal, result="pass: all sections",
        artifacts=[name])]}, workItemId=item_id)

    form = section(html_of(hc, item_url(s, item_id)), "decide")
    accepted = hc.client.post(item_url(s, item_id, "accept"), {"note": "the review passed"})
    matrix = html_of(s.owner, mission_url(s))

    assert 'name="note"' in form and "override-" not in form and "override-preview" not in form
    assert accepted.status_code == 302
    assert last_event(s).data["review"]["overridden"] == []
    assert 'class="badge overridden"' not in matrix
    assert "The decision's Evidence, by " + hc.principal in matrix


def test_the_owners_matrix_shows_an_override_its_reason_and_who_only_where_it_failed(
        transactional_db, eager):
    s = Scenario()
    hc = human_coordinator(s)
    reviewer = s.world.agent("rev-" + s.world.group.slug, roles=("reviewer",))
    item_id, name = submitted_json(s, {"title": "Q3 summary", "words": 320})
    reviewer.ok("evidence.record", {"evidence": [evidence(
        ["ac1"], producer=reviewer.principal, result="fail: the outlook is missing",
        artifacts=[name])]}, workItemId=item_id)  # ac2 passed its size check

    form = section(html_of(hc, item_url(s, item_id)), "decide")
    accepted = hc.client.post(item_url(s, item_id, "accept"), {
        "note": "the rest is right", "override-ac1": "the outlook is out of scope, agreed"})
    matrix = html_of(s.owner, mission_url(s))
    rows = {m.group(1): m.group(0) for m in re.finditer(
        r'<tr data-criterion="([^"]+)"[^>]*>.*?</tr>', matrix, re.S)}
    event = last_event(s)

    assert 'name="override-ac1"' in form and 'name="override-ac2"' not in form
    assert accepted.status_code == 302 and event.data["review"]["overridden"] == ["ac1"]
    ac1, ac2 = text(rows["ac1"]), text(rows["ac2"])
    assert f"overridden by {hc.principal} at " in ac1
    assert f"(event #{event.sequence}): pass: the outlook is out of scope, agreed" in ac1
    assert "fail: the outlook is missing" in ac1  # the reviewer's Evidence, beside it
    assert "overridden" not in ac2 and "pass: the rest is right" in ac2
    assert "overriding ac1, which had not passed" in text(matrix)
    assert "overriding ac2" not in text(matrix)


# --- 5. the execution approval card ----------------------------------------------------------

def test_the_card_shows_start_by_capabilities_and_only_unfinished_work_downstream(scenario):
    s = scenario
    item_id = s.queued(s.w1, risk=RISKY)
    waiting = s.authorize(dependencies={"workItems": [item_id], "policy": "all_verified"})
    dropped = s.authorize(dependencies={"workItems": [item_id], "policy": "all_verified"})
    s.c.ok("work.cancel", {"reason": "not needed"}, workItemId=dropped)
    start_by = s.item(item_id)["startBy"]

    card = html_of(s.owner, item_url(s, item_id))
    granted = s.owner.client.post(item_url(s, item_id, "grant-execution"),
                                  {"grant-comment": "backups checked"})
    after = html_of(s.owner, item_url(s, item_id))

    assert "<code>summarize 1</code>" in section(card, "card-capabilities")
    assert f'<time datetime="{start_by}">' in section(card, "card-start-by")
    downstream = section(card, "downstream")
    assert waiting in downstream and dropped not in downstream
    assert granted.status_code == 302
    shown = text(section(after, "execution-decision"))
    assert f"Granted by {s.owner.principal}" in shown and "backups checked" in shown


def test_an_offered_item_says_when_start_by_will_be_set(scenario):
    s = scenario
    item_id = s.authorize(risk=RISKY)
    s.offer(item_id, s.w1)

    card = html_of(s.owner, item_url(s, item_id))

    assert "not set yet: a worker's acceptance sets it" in section(card, "card-start-by")

