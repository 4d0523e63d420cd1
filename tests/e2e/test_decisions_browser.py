"""Every decision reads back where it was taken (issue 25), in Chromium against the live
ASGI server with a real Celery review (tests/e2e/conftest.py); agents are driven through
the API helpers of tests/support.py, humans through the pages.

- The refusal's full loop: the MissionOwner refuses the final Approval with a reason; the
  Coordinator finds it in Waiting on me and on the Mission page, with the reason, who
  and when; new work answers it (a WorkItem authorized, done by a worker, accepted); the
  owner sees the refusal answered, the Mission back in Waiting on me for approval, and
  approves. The Decisions list it all.
- An acceptance that overrides a failed criterion: the form names it and will not send
  without its reason; the owner's Evidence matrix then shows it overridden, with the
  reason and who, and only that criterion.

Pages are photographed at 1280 and at 420 px (MW_SCREENSHOTS); at 420 px none may scroll
sideways."""

import pytest
from playwright.sync_api import expect

from apps.work.models import WorkItem
from tests.e2e.conftest import at_each_width, follow, g_url, go, photographed, sign_in, submit
from tests.faults.procs import wait_until
from tests.integration.artifact_helpers import submitted_json
from tests.support import Scenario, contract, evidence

pytestmark = pytest.mark.django_db(transaction=True)

LIVE = 10_000  # ms


def rows(page) -> list:
    """(kind, item) of each Waiting on me row."""
    return [tuple(r) for r in page.locator("#waiting tbody tr").evaluate_all(
        "rows => rows.map(r => [r.dataset.kind, r.dataset.item || null])")]


def item_doc(s: Scenario, item_id: str) -> dict:
    return WorkItem.objects.get(group_id=s.world.group.id, work_item_id=item_id).doc


def done_by_a_worker(s: Scenario, **contract_overrides) -> str:
    """A WorkItem authorized, offered, accepted, started and submitted by w1 (API)."""
    item_id, _ = s.running(s.w1, **contract_overrides)
    s.w1.ok("work.submit", {"contractRevision": 1, "artifacts": [s.deliver(item_id)],
                            "evidence": [evidence(["ac1", "ac2"], result="pass: done")]},
            **s.lease_fields(item_id))
    return item_id


@pytest.fixture
def other_context(browser, shot):
    """A second browser context (its own cookies: another person signed in), set up as
    the conftest's `context`: dialogs accepted, every load photographed."""
    yield from photographed(browser, shot)


@pytest.fixture
def coordinated(asgi_server, review_worker, settings):
    """A Scenario whose Mission a human Coordinator coordinates (the agent coordinator is
    its delegate, for what the API helpers do): (scenario, coordinator)."""
    # The deliverables this process uploads go where the server's Celery review reads them.
    settings.MW_BLOB_ROOT = asgi_server.data_dir / "blobs"
    s = Scenario()
    coordinator = s.world.human("hc-" + s.world.group.slug, roles=("coordinator",))
    s.coordinated_by(coordinator)
    return s, coordinator


def test_a_refusal_reads_back_until_new_work_answers_it_then_the_owner_approves(
        asgi_server, coordinated, other_context, page, shot):
    s, coordinator = coordinated
    first = done_by_a_worker(s, goal="Summarize Q3")
    s.accept_result(first)
    mission_url = g_url(asgi_server, s.world.group.id, f"missions/{s.mission_id}/")

    # The owner: the final Approval waits on them; they refuse it, with reasons.
    sign_in(page, asgi_server.url, s.owner.name)
    assert ("final-approval", None) in rows(page)
    follow(page, "#waiting tr[data-kind='final-approval'] a")
    page.click("#refuse summary")
    page.fill("#id_refuse-reason", "The summary stops at Q3: add the Q4 outlook")
    page.fill("#id_refuse-item_0", "cite the ledger export for every figure")
    submit(page, "#refuse-approval")
    refusal = page.locator("#approval-refusal")
    expect(refusal).to_contain_text("The summary stops at Q3: add the Q4 outlook")
    expect(refusal).to_contain_text(f"By {s.owner.principal}")
    expect(refusal).to_contain_text("Not answered yet")
    expect(page.locator("#decisions li[data-type='mission.approval_refused']")).to_contain_text(
        "cite the ledger export for every figure")
    at_each_width(page, shot, "owner-refused")
    go(page, f"{asgi_server.url}/")
    assert ("final-approval", None) not in rows(page)  # it waits on the Coordinator now

    # The Coordinator: the refusal in Waiting on me, and on the Mission page.
    theirs = other_context.new_page()
    sign_in(theirs, asgi_server.url, coordinator.name)
    refused_row = theirs.locator("#waiting tr[data-kind='approval-refused']")
    expect(refused_row).to_contain_text("refused the final Approval: The summary stops at Q3")
    follow(theirs, "#waiting tr[data-kind='approval-refused'] a")
    refusal = theirs.locator("#approval-refusal")
    expect(refusal).to_contain_text("The summary stops at Q3: add the Q4 outlook")
    expect(refusal).to_contain_text(s.owner.principal)
    expect(refusal.locator("time")).to_have_count(1)
    expect(refusal).to_contain_text(f"{first}: cite the ledger export for every figure")
    at_each_width(theirs, shot, "coordinator-reads-the-refusal")

    # New work answers it: a WorkItem for Q4 (authorized, the live page says so at once),
    # done by a worker and accepted.
    second = done_by_a_worker(s, goal="Add the Q4 outlook, every figure cited")
    expect(theirs.locator("#refusal-status")).to_contain_text("Answered: work.authorized",
                                                              timeout=LIVE)
    expect(theirs.locator("#refusal-status")).to_contain_text(second)
    s.accept_result(second)
    expect(theirs.locator(f"tr[data-item='{second}'] .state")).to_have_text("verified",
                                                                          timeout=LIVE)
    shot(theirs, "coordinator-answered")

    # The owner: the Mission is back in Waiting on me; the refusal reads answered; approve.
    go(page, f"{asgi_server.url}/")
    assert ("final-approval", None) in rows(page)
    follow(page, "#waiting tr[data-kind='final-approval'] a")
    expect(page.locator("#approval-refusal")).to_contain_text("Answered: work.authorized")
    expect(page.locator("#last-refusal")).to_contain_text("read the work again")
    expect(page.locator(f"table.matrix[data-matrix-item='{second}']")).to_be_visible()
    at_each_width(page, shot, "owner-sees-it-answered")
    page.fill("#approve-comment", "Q4 is in and every figure is cited")
    submit(page, "#approve-mission")
    expect(page.locator("#mission-state")).to_have_text("approved")
    decisions = page.locator("#decisions li.decision-entry")
    expect(decisions).to_have_count(2)  # the agent delegate's acceptances are not listed
    expect(decisions.nth(0)).to_contain_text("Refused the final Approval")
    expect(decisions.nth(0)).to_contain_text(f"Answered by work.authorized of {second}")
    expect(decisions.nth(1)).to_contain_text("Approved the Mission")
    expect(decisions.nth(1)).to_contain_text("Q4 is in and every figure is cited")
    at_each_width(page, shot, "owner-approved")
    go(theirs, mission_url)
    expect(theirs.locator("#decisions li.decision-entry")).to_have_count(2)


def test_an_acceptance_overrides_a_failed_criterion_with_a_reason_the_owner_reads(
        asgi_server, coordinated, other_context, page, shot):
    s, coordinator = coordinated
    reviewer = s.world.agent("rev-" + s.world.group.slug, roles=("reviewer",))
    item_id, name = submitted_json(s, {"title": "Q3 summary", "words": 320})
    wait_until(lambda: ((item_doc(s, item_id).get("review") or {}).get("checks")), 30,
               "the review's checks")
    reviewer.ok("evidence.record", {"evidence": [evidence(
        ["ac1"], producer=reviewer.principal, result="fail: the outlook section is missing",
        artifacts=[name])]}, workItemId=item_id)
    wait_until(lambda: ((item_doc(s, item_id).get("review") or {}).get("evaluation") or {})
               .get("verdict") == "fail", 30, "the failed evaluation")
    item_url = g_url(asgi_server, s.world.group.id, f"work-items/{item_id}/")

    # The Coordinator: the form names the failed criterion and wants its reason.
    sign_in(page, asgi_server.url, coordinator.name)
    go(page, item_url)
    expect(page.locator("#evaluation-verdict")).to_have_text("fail")
    preview = page.locator("#override-preview")
    expect(preview).to_contain_text("the criteria that have not passed: ac1")
    reason = page.locator("textarea[name='override-ac1']")
    expect(reason).to_be_visible()
    expect(page.locator("textarea[name='override-ac2']")).to_have_count(0)  # ac2 passed
    at_each_width(page, shot, "accept-form")
    page.fill("textarea[name='note']", "the rest of the summary is right")
    page.click("#accept-result")  # the browser will not send it without the reason
    assert reason.evaluate("e => e.validity.valueMissing")
    expect(page.locator("#item-state")).to_have_text("submitted")
    asked = []
    page.once("dialog", lambda dialog: asked.append(dialog.message))  # the conftest accepts
    reason.fill("the outlook is out of scope: agreed with the owner on 3 Dec")
    submit(page, "#accept-result")
    assert asked and "overriding ac1" in asked[0] and "This is final" in asked[0], asked
    expect(page.locator("ul.messages")).to_contain_text("work.verified")
    expect(page.locator("#decision-override")).to_contain_text(
        "criteria overridden by the decision's own Evidence: ac1")
    expect(page.locator("#criteria tr[data-criterion='ac1'] div.override")).to_contain_text(
        "the outlook is out of scope")
    at_each_width(page, shot, "accepted-over-ac1")

    # The owner: the matrix shows the override, its reason and who, on ac1 only.
    owners = other_context.new_page()
    sign_in(owners, asgi_server.url, s.owner.name)
    go(owners, g_url(asgi_server, s.world.group.id, f"missions/{s.mission_id}/"))
    matrix = owners.locator(f"table.matrix[data-matrix-item='{item_id}']")
    expect(matrix.locator("caption")).to_contain_text("overriding ac1, which had not passed")
    ac1 = matrix.locator("tr[data-criterion='ac1']")
    expect(ac1.locator("div.override")).to_contain_text(f"overridden by {coordinator.principal}")
    expect(ac1.locator("div.override")).to_contain_text(
        "pass: the outlook is out of scope: agreed with the owner on 3 Dec")
    expect(ac1).to_contain_text("fail: the outlook section is missing")  # the reviewer's
    ac2 = matrix.locator("tr[data-criterion='ac2']")
    expect(ac2.locator("div.override")).to_have_count(0)
    expect(ac2).to_contain_text("pass: the rest of the summary is right")
    accepted = owners.locator(f"#decisions li[data-item='{item_id}']")
    expect(accepted).to_contain_text(f"Accepted the result {item_id}")
    expect(accepted).to_contain_text("overriding ac1")
    at_each_width(owners, shot, "owner-matrix-override")


def test_work_proposed_waits_on_the_coordinator_and_leads_to_the_list(coordinated, page,
                                                                       asgi_server, shot):
    s, coordinator = coordinated
    s.w2.ok("work.propose", {"missionId": s.mission_id, "contract": contract(
        goal="Add a one-page summary for the board")})
    sign_in(page, asgi_server.url, coordinator.name)
    expect(page.locator("#waiting tr[data-kind='proposals']")).to_contain_text(
        f"Work proposed by {s.w2.principal}: “Add a one-page summary for the board”")
    at_each_width(page, shot, "coordinator-proposal-waiting")
    follow(page, "#waiting tr[data-kind='proposals'] a")
    expect(page.locator("#proposals")).to_contain_text("Add a one-page summary for the board")
    assert page.url.endswith("#proposals")
    at_each_width(page, shot, "coordinator-proposals-list")
