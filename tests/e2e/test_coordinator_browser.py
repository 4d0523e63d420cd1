"""The Coordinator's dashboard in a real browser (chromium through Playwright) against the
real ASGI server with Redis, so every page is live over its WebSocket; a real SDK worker
subprocess does the work and a real Celery worker runs the review (tests/e2e/conftest.py).

Each test drives the pages as a person does and checks what the page shows and what the
log holds. Screenshots of every page visited: see the conftest (MW_SCREENSHOTS)."""

import re

import pytest
from playwright.sync_api import expect

from apps.ledger.models import Event, Group
from apps.work.models import WorkItem
from tests.e2e.conftest import (
    follow,
    g_url,
    go,
    marker,
    presence_of,
    reload,
    sign_in,
    still_marked,
    submit,
)
from tests.faults.procs import wait_until
from tests.support import Scenario, World, contract

pytestmark = pytest.mark.django_db(transaction=True)

# ms for a live change: the WebSocket signal and the region's re-fetch take well under a
# second; the SDK worker's steps (its 1 s tick) and the Celery review a few seconds more.
LIVE = 10_000
DIAMOND = {"wi-a": [], "wi-b": ["wi-a"], "wi-c": ["wi-a"], "wi-d": ["wi-b", "wi-c"]}


def events_of(group_id: str, item_id: str | None = None) -> list:
    rows = Event.objects.filter(group_id=group_id).order_by("sequence")
    if item_id is not None:
        rows = rows.filter(work_item_id=item_id)
    return list(rows)


def head(group_id: str) -> int:
    return Group.objects.get(id=group_id).head_sequence


def item_doc(group_id: str, item_id: str) -> dict:
    return WorkItem.objects.get(group_id=group_id, work_item_id=item_id).doc


def flash(page, recorded: str) -> None:
    """The "Recorded: <event> #n" message after a POST sent from a live page (a live
    signal reaching the page being left must not take it: base.html, live.js)."""
    expect(page.locator("ul.messages")).to_contain_text(recorded, timeout=2000)


def fill_contract(page, goal: str, item_id: str | None = None) -> None:
    """The contract form of a new WorkItem: what the SDK worker's card can take."""
    if item_id:
        page.fill("#work_item_id", item_id)
    page.fill("#contract-goal", goal)
    page.fill("#contract-deliverables-0-id", "summary")
    page.fill("#contract-deliverables-0-description", "A short summary in markdown")
    page.fill("#contract-deliverables-0-mediaType", "text/markdown")
    page.fill("#contract-acceptanceCriteria-0-id", "written")
    page.fill("#contract-acceptanceCriteria-0-description", "The summary is not empty")
    page.fill("#contract-acceptanceCriteria-0-method", "check:non-empty")
    page.fill("#contract-capabilities-0-id", "summarize")
    page.fill("#contract-capabilities-0-version", "1")
    page.fill("#contract-budgets-wallClockSeconds", "600")
    page.fill("#contract-budgets-tokens", "20000")
    page.select_option("#contract-urgency", "high")


# --- 1. plan a diamond, refuse a cycle, offer, watch an SDK worker do it live, accept ------

def test_a_coordinator_plans_a_diamond_offers_it_and_watches_a_worker_live(
        asgi_server, review_worker, sdk_worker, context, page, shot):
    world = World()
    group_id = world.group.id
    coordinator = world.human("coord-" + world.group.slug, roles=("coordinator",))
    owner = world.human("owner-" + world.group.slug, roles=("owner",))
    worker = sdk_worker(world.group)
    wait_until(lambda: presence_of(worker.agent_id) is not None, 30,
               "Presence from the SDK worker", process=worker.process,
               logs=[worker.folder / "stderr.txt"])

    sign_in(page, asgi_server.url, coordinator.name)
    follow(page, f"a[href='/g/{group_id}/']")
    follow(page, "#new-mission")
    page.fill("#id_title", "Launch notes")
    page.fill("#id_mission_id", "launch")
    page.select_option("#id_owner", owner.principal)
    expect(page.locator("#id_coordinator")).to_have_value(coordinator.principal)
    page.fill("#id_budget_wallClockSeconds", "7200")
    submit(page, "#create-mission")
    mission_url = g_url(asgi_server, group_id, "missions/launch/")
    expect(page).to_have_url(mission_url)
    expect(page.locator("ul.messages")).to_contain_text("mission.created")
    expect(page.locator("#mission-state")).to_have_text("active")

    for item_id in DIAMOND:
        follow(page, "#add-item")
        fill_contract(page, f"Write the {item_id} section of the launch notes", item_id)
        submit(page, "#send-contract")
        expect(page).to_have_url(g_url(asgi_server, group_id, f"work-items/{item_id}/"))
        expect(page.locator("ul.messages")).to_contain_text("work.authorized")
        expect(page.locator("#item-state")).to_have_text("open")
        follow(page, f"nav.crumbs a[href='/g/{group_id}/missions/launch/']")
    expect(page.locator("svg.graph a.node")).to_have_count(4)
    authorized = item_doc(group_id, "wi-a")["contract"]
    assert authorized["capabilities"] == [{"id": "summarize", "version": "1"}]
    assert authorized["acceptanceCriteria"][0]["method"] == "check:non-empty"
    assert authorized["budgets"] == {"tokens": 20000, "wallClockSeconds": 600}

    for dependant, dependencies in DIAMOND.items():
        for dependency in dependencies:
            page.select_option("#edge-dependant", dependant)
            page.select_option("#edge-dependency", dependency)
            submit(page, "#add-edge")
            flash(page, "work.contract_revised")
            expect(page.locator(f"path.edge[data-edge='{dependency}->{dependant}']")) \
                .to_have_count(1)
    expect(page.locator("svg.graph path.edge")).to_have_count(4)
    expect(page.locator("tr[data-item=wi-d]")).to_contain_text("wi-b, wi-c")
    assert item_doc(group_id, "wi-d")["depends_on"] == ["wi-b", "wi-c"]

    before = head(group_id)
    page.select_option("#edge-dependant", "wi-a")
    page.select_option("#edge-dependency", "wi-d")
    submit(page, "#add-edge")
    refused = page.locator(".refused")
    expect(refused).to_have_attribute("data-code", "DEPENDENCY_CYCLE")
    expect(refused).to_contain_text("Nothing changed.")
    cycle = page.locator("#cycle")
    expect(cycle).to_contain_text("Refused, the edge would close a cycle")
    cycle_text = cycle.inner_text()
    path = re.search(r"cycle: (.*)\. It is drawn", cycle_text)[1].split(" → ")
    assert path[0] == path[-1] and {"wi-a", "wi-d"} <= set(path), cycle_text
    assert {"wi-b", "wi-c"} & set(path), cycle_text
    expect(page.locator("path.edge.proposed[data-cycle=true]")).to_have_count(1)
    expect(page.locator("a.node.in-cycle")).to_have_count(len(set(path)))
    shot(page, "cycle-refused")
    assert head(group_id) == before  # nothing was appended
    assert item_doc(group_id, "wi-a")["depends_on"] == []

    # The Mission page, open in a second tab, watches the offer and the work live.
    watcher = context.new_page()
    go(watcher, mission_url)
    node_a = watcher.locator("svg.graph a.node[data-item=wi-a]")
    expect(node_a).to_have_attribute("data-state", "open")
    marker(watcher)

    go(page, mission_url)
    follow(page, "svg.graph a.node[data-item=wi-a]")
    expect(page.locator("#item-state")).to_have_text("open")
    candidates = page.locator("#candidates")
    expect(candidates.locator("tbody tr")).to_have_count(1)
    row = candidates.locator(f"tr[data-agent='{worker.agent_id}']")
    expect(row.locator("td").first).to_have_text("1")
    expect(row).to_contain_text("capability match: yes")
    expect(row).to_contain_text("requires summarize 1")
    expect(row).to_contain_text("authorization: eligible (worker role)")
    expect(row).to_contain_text("presence fresh")
    expect(page.locator("#offer-blocked")).to_have_count(0)
    expect(page.locator("#id_offer-auto")).to_be_checked()
    submit(page, "#send-offer")
    flash(page, "work.offered")
    expect(page.locator("#offers")).to_contain_text(worker.agent_id)
    marker(page)

    # From here on, no reload: the WebSocket tells both pages, they re-fetch their regions.
    state = page.locator("#item-state")
    expect(state).to_have_text("active", timeout=LIVE)
    expect(node_a).to_have_attribute("data-state", "active", timeout=LIVE)
    expect(page.locator("#owner")).to_contain_text(f"{worker.agent_id} (ownership epoch 1)")
    expect(page.locator("#timeline")).to_contain_text("drafting", timeout=LIVE)
    expect(page.locator("#lease")).not_to_have_text("none open")
    shot(page, "item-active")
    shot(watcher, "mission-active")

    worker.release()
    expect(state).to_have_text("submitted", timeout=LIVE)
    expect(node_a).to_have_attribute("data-state", "submitted", timeout=LIVE)
    # The Celery worker's review: integrity, the non-empty check, the evaluation.
    expect(page.locator("#evaluation-verdict")).to_have_text("pass", timeout=LIVE)
    expect(page.locator("tr[data-criterion=written]")).to_contain_text("check:non-empty")
    expect(page.locator("#accept-result")).to_be_enabled()
    assert still_marked(page) and still_marked(watcher)  # both changed without a reload
    shot(page, "item-reviewed")

    code, printed = worker.finish()
    assert code == 0, worker.log()[-3000:]
    assert '"outcome": "submitted"' in printed

    page.fill("#id_note", "the summary is written and the check passed")  # a decision
    submit(page, "#accept-result")  # the confirmation dialog is accepted (conftest)
    flash(page, "work.verified")
    expect(state).to_have_text("verified")
    decision = page.locator("#decision")
    expect(decision).to_contain_text("Why it is verified")
    expect(decision).to_contain_text(f"Accepted by {coordinator.principal}")
    expect(decision).to_contain_text("combined evaluation at that moment: pass")
    expect(node_a).to_have_attribute("data-state", "verified", timeout=LIVE)
    # B and C depend on A alone: their edges from A are met now, on the live Mission page.
    expect(watcher.locator("path.edge[data-edge='wi-a->wi-b']")) \
        .to_have_attribute("data-met", "true", timeout=LIVE)
    assert still_marked(watcher)
    shot(watcher, "mission-after-verified")

    types = [e.type for e in events_of(group_id, "wi-a")]
    expected = ["work.authorized", "work.offered", "work.offer_accepted", "work.started",
                "work.progress_reported", "work.submitted", "review.integrity_checked",
                "review.checks_completed", "review.evidence_requested", "review.evaluated",
                "work.verified"]
    assert [t for t in types if t in expected] == expected, types
    by_type = {e.type: e for e in events_of(group_id, "wi-a")}
    assert by_type["work.offered"].actor == coordinator.principal
    assert by_type["work.offered"].data["offers"][0]["agentId"] == worker.agent_id
    assert by_type["work.offer_accepted"].actor == worker.principal
    assert by_type["work.submitted"].actor == worker.principal
    assert by_type["review.evaluated"].data["verdict"] == "pass"
    assert by_type["work.verified"].actor == coordinator.principal
    assert [e.type for e in events_of(group_id) if e.type == "mission.created"] == \
        ["mission.created"]


# --- 2. a revision of a queued item: the diff, and the owner's re-acceptance pending -------

def human_coordinated(s: Scenario):
    coordinator = s.world.human("coord-" + s.world.group.slug, roles=("coordinator",))
    s.coordinated_by(coordinator)  # the agent coordinator c plans as its delegate
    return coordinator


def test_revising_a_queued_items_contract_shows_the_diff_and_the_pending_reacceptance(
        asgi_server, page, shot):
    s = Scenario()
    coordinator = human_coordinated(s)
    item_id = s.queued()
    group_id = s.world.group.id

    sign_in(page, asgi_server.url, coordinator.name)
    go(page, g_url(asgi_server, group_id, f"work-items/{item_id}/"))
    expect(page.locator("#item-state")).to_have_text("queued")
    expect(page.locator("#acceptance")).to_have_text(f"{s.w1.name} accepted revision 1")
    expect(page.locator("#revisions")).to_have_count(0)

    follow(page, "#revise")
    expect(page.locator("h1")).to_contain_text(f"Revise {item_id} (now at revision 1)")
    expect(page.locator("main")).to_contain_text(
        f"The owner {s.w1.name} has to accept the revised contract again")
    expect(page.locator("#contract-goal")).to_have_value("Summarize the quarterly report")
    page.fill("#contract-goal", "Summarize the quarterly report for the board")
    page.fill("#contract-budgets-tokens", "50000")
    submit(page, "#send-contract")

    expect(page).to_have_url(g_url(asgi_server, group_id, f"work-items/{item_id}/"))
    expect(page.locator("ul.messages")).to_contain_text("work.contract_revised")
    revisions = page.locator("#revisions")
    expect(revisions).to_contain_text("revision 1 by")
    expect(revisions).to_contain_text(f"revision 2 by {coordinator.principal}")
    diff = revisions.locator("table.contract-diff")
    expect(diff.locator("caption")).to_have_text(
        "Contract revision 1 against revision 2: 2 fields differ")
    goal = diff.locator("tr.diff-changed", has=page.locator("th code", has_text="goal"))
    expect(goal.locator("td").nth(0)).to_contain_text('"Summarize the quarterly report"')
    expect(goal.locator("td").nth(1)).to_contain_text("for the board")
    tokens = diff.locator("tr.diff-changed", has=page.locator("th code", has_text="tokens"))
    expect(tokens.locator("td").nth(0)).to_have_text("100000")
    expect(tokens.locator("td").nth(1)).to_have_text("50000")
    acceptance = page.locator("#acceptance")
    expect(acceptance).to_contain_text(
        f"{s.w1.name} has not accepted revision 2 yet (accepted revision 1)")
    expect(page.locator("h1")).to_contain_text("for the board")
    shot(page, "revised")

    revised = [e for e in events_of(group_id, item_id) if e.type == "work.contract_revised"]
    assert [(e.actor, e.data["contractRevision"]) for e in revised] == \
        [(coordinator.principal, 2)]
    assert revised[0].data["contract"]["budgets"]["tokens"] == 50000
    item = s.item(item_id)
    assert (item["state"], item["contractRevision"], item["owner"]) == \
        ("queued", 2, s.w1.name)


# --- 3. an open ambiguity disables the offer live; answer, revise, enabled again -----------

def test_an_ambiguity_disables_the_offer_live_until_the_contract_is_revised(
        asgi_server, page, shot):
    s = Scenario()
    coordinator = human_coordinated(s)
    item_id = s.authorize()
    group_id = s.world.group.id
    item_url = g_url(asgi_server, group_id, f"work-items/{item_id}/")

    sign_in(page, asgi_server.url, coordinator.name)
    go(page, item_url)
    offer = page.locator("#send-offer")
    expect(offer).to_be_enabled()
    expect(page.locator("#offer-blocked")).to_have_count(0)
    marker(page)

    events = s.w1.ok("conversation.post", {"kind": "ambiguity",
                                           "text": "Which quarter: Q3 or Q4?"},
                     workItemId=item_id)
    message_id = events[0]["data"]["messageId"]
    expect(offer).to_be_disabled(timeout=LIVE)
    blocked = page.locator("#offer-blocked")
    expect(blocked).to_contain_text(f"the ambiguity {message_id} is open")
    expect(offer).to_have_attribute("title", re.compile(f"ambiguity {message_id} is open"))
    expect(offer).to_have_attribute("aria-describedby", "offer-blocked")
    expect(page.locator(f".ambiguity-open[data-ambiguity='{message_id}']")) \
        .to_contain_text("Which quarter: Q3 or Q4?")
    expect(page.locator("#open-ambiguities")).to_contain_text(message_id)
    assert still_marked(page)
    shot(page, "ambiguity-open")

    answer = page.locator("form.post-message input[name=message-kind][value=resolution]")
    # An ambiguity that arrived live can be answered without a reload.
    expect(answer).to_have_count(1)
    expect(page.locator(f"#conversation-resolves option[value='{message_id}']")) \
        .to_have_count(1, timeout=3000)
    page.fill("#conversation-text", "Q3: the report of July to September.")
    answer.check()
    page.select_option("#conversation-resolves", message_id)
    submit(page, "#post-message")
    flash(page, "conversation.message_posted")
    expect(page.locator("li.message-resolution")).to_contain_text("July to September")
    expect(offer).to_be_disabled()  # an answer does not clear it (§10.1)

    follow(page, "#revise")
    expect(page.locator("#resolves")).to_contain_text(message_id)
    page.fill("#contract-goal", "Summarize the Q3 (July to September) quarterly report")
    submit(page, "#send-contract")
    expect(page).to_have_url(item_url)
    expect(page.locator("ul.messages")).to_contain_text("work.contract_revised")
    expect(offer).to_be_enabled()
    expect(page.locator("#offer-blocked")).to_have_count(0)
    expect(page.locator(f"tr[data-ambiguity='{message_id}']")) \
        .to_have_attribute("data-open", "false")
    shot(page, "ambiguity-cleared")

    posted = [e for e in events_of(group_id, item_id) if e.type == "conversation.message_posted"]
    assert [(e.actor, e.data["kind"]) for e in posted] == [
        (s.w1.principal, "ambiguity"), (coordinator.principal, "resolution")]
    assert posted[1].data["resolves"] == message_id and posted[1].data["cleared"] is False
    assert item_doc(group_id, item_id)["open_ambiguities"] == []


# --- 4. an observer: no controls, and forged POSTs change nothing ----------------------------

ACTION_IDS = ("#new-mission", "#add-item", "#edge-form", "#approve-mission", "#end-mission",
              "#refuse-approval", "#refuse-execution",
              "#send-offer", "#revise", "#preempt", "#unblock", "#cancel-item", "#create-child",
              "#accept-result", "#fail-result", "#grant-execution", "#send-contract")


def assert_no_controls(page, allowed_posts: set) -> None:
    """None of the known controls, no form that posts but `allowed_posts` (paths), and no
    button outside those or a form that only reads (method get)."""
    for selector in ACTION_IDS:
        expect(page.locator(selector)).to_have_count(0)
    posts = {urlsplit_path(a) for a in page.locator("form[method=post]").evaluate_all(
        "forms => forms.map(f => f.action)")}
    assert posts == allowed_posts, posts
    stray = page.locator("button").evaluate_all("""(buttons, allowed) => buttons
        .filter(b => !(b.form && (b.form.method === 'get'
                                  || allowed.includes(new URL(b.form.action).pathname))))
        .map(b => b.outerHTML)""", sorted(allowed_posts))
    assert stray == [], stray


def urlsplit_path(url: str) -> str:
    return re.sub(r"^https?://[^/]+", "", url)


def test_an_observer_sees_no_controls_and_forged_posts_are_refused(asgi_server, page, shot):
    s = Scenario()
    observer = s.world.human("obs-" + s.world.group.slug, roles=("observer",))
    group_id, mission_id = s.world.group.id, s.mission_id
    first, item_id = "wi-first", "wi-second"
    for new, risk in ((first, "low"), (item_id, "high")):
        s.c.ok("work.authorize", {"missionId": mission_id, "workItemId": new, "contract": contract(
            risk={"class": risk, "requiresExecutionApproval": risk == "high"})})
    proposal_id = s.w1.ok("work.propose", {"missionId": mission_id, "contract": contract(
        goal="Also chart the numbers")})[0]["data"]["proposalId"]
    from apps.dashboard.contract_form import ContractForm
    contract_post = ContractForm.from_contract(contract(), []).as_post()

    sign_in(page, asgi_server.url, observer.name)
    logout = "/logout/"
    go(page, g_url(asgi_server, group_id))
    expect(page.locator("#missions")).to_contain_text(mission_id)
    expect(page.locator("header .who")).to_contain_text("observer")
    assert_no_controls(page, {logout})
    go(page, g_url(asgi_server, group_id, f"missions/{mission_id}/"))
    expect(page.locator("svg.graph a.node")).to_have_count(2)
    for section in ("#plan", "#final-approval", "#end"):
        expect(page.locator(section)).to_have_count(0)
    assert_no_controls(page, {logout})
    item_path = f"/g/{group_id}/work-items/{item_id}/"
    go(page, asgi_server.url + item_path)
    expect(page.locator("#item-state")).to_have_text("open")
    expect(page.locator("#steer")).to_have_count(0)
    assert_no_controls(page, {logout, item_path + "messages"})
    # The Conversation's form is there, for plain messages only.
    kinds = page.locator("form.post-message input[name=message-kind]")
    expect(kinds).to_have_count(1)
    expect(kinds).to_have_attribute("value", "message")

    token = page.locator("input[name=csrfmiddlewaretoken]").first.input_value()
    cookie = {c["name"]: c["value"] for c in page.context.cookies()}["csrftoken"]
    assert token and cookie
    m, w = f"/g/{group_id}/missions/{mission_id}", f"/g/{group_id}/work-items/{item_id}"
    forged = {
        f"/g/{group_id}/missions/new": {"title": "Forged", "owner": s.owner.principal,
                                        "coordinator": s.c.principal},
        f"{m}/approve": {"comment": "forged"},
        f"{m}/refuse-approval": {"refuse-reason": "forged"},
        f"{m}/end": {"end-how": "cancel", "end-reason": "forged"},
        f"{m}/edges": {"dependant": item_id, "dependency": first, "op": "add"},
        f"{m}/work-items/new": {**contract_post, "work_item_id": "wi-forged"},
        f"{m}/proposals/{proposal_id}/authorize": contract_post,
        f"{w}/revise": contract_post,
        f"{w}/offer": {"offer-auto": "on", "offer-mode": "sequential",
                       "offer-expires_in_minutes": "10"},
        f"{w}/preempt": {"preempt-reason": "forged"},
        f"{w}/unblock": {"unblock-reason": "forged"},
        f"{w}/cancel": {"cancel-reason": "forged"},
        f"{w}/child": {"child-title": "Forged child", "child-child_failure_policy": "block"},
        f"{w}/messages": {"message-kind": "ambiguity", "message-text": "forged ambiguity"},
        f"{w}/accept": {"note": "forged"},
        f"{w}/fail": {"reason": "forged", "criteria": "ac1"},
        f"{w}/grant-execution": {"comment": "forged"},
        f"{w}/refuse-execution": {"refuse-reason": "forged"},
    }
    before = head(group_id)
    answers = {}
    for path, form in forged.items():
        response = page.request.post(asgi_server.url + path, max_redirects=0,
                                     form={**form, "csrfmiddlewaretoken": token})
        answers[path] = (response.status, response.text())
    assert {path: status for path, (status, _) in answers.items()
            if status not in (400, 403, 409)} == {}
    for path, (status, text) in answers.items():
        assert "Nothing changed." in text, (path, status, text[:500])
    assert "Refused: FORBIDDEN" in answers[f"{w}/offer"][1]
    assert "Refused: FORBIDDEN" in answers[f"{w}/messages"][1]
    assert head(group_id) == before
    assert not Event.objects.filter(group_id=group_id, sequence__gt=before).exists()

    # Without the CSRF token even what an observer may do is refused by Django ...
    plain = {"message-kind": "message", "message-text": "Looks good from here."}
    without = page.request.post(asgi_server.url + f"{w}/messages", max_redirects=0, form=plain)
    assert without.status == 403 and "CSRF" in without.text()
    assert head(group_id) == before
    # ... and with it, the plain message goes through: the token was all it lacked.
    with_token = page.request.post(asgi_server.url + f"{w}/messages", max_redirects=0,
                                   form={**plain, "csrfmiddlewaretoken": token})
    assert with_token.status == 302
    posted = events_of(group_id)[-1]
    assert (posted.type, posted.actor, posted.data["kind"]) == \
        ("conversation.message_posted", observer.principal, "message")
    reload(page)
    expect(page.locator("li.message-message")).to_contain_text("Looks good from here.")
    shot(page, "observer-item")


# --- 5. layout: widths, dark mode, keyboard ---------------------------------------------------

LONG_GOAL = ("Reconcile the quarterly ledger exports of every subsidiary against the bank "
             "statements and list each unexplained difference with its account number")


def diamond(s: Scenario) -> None:
    for item_id, depends_on in DIAMOND.items():
        s.c.ok("work.authorize", {"missionId": s.mission_id, "workItemId": item_id,
                                  "contract": contract(
                                      goal=LONG_GOAL if item_id == "wi-d" else
                                      f"Summarize part {item_id} of the report",
                                      dependencies={"workItems": depends_on,
                                                    "policy": "all_verified"})})


OVERFLOW = """() => ({scrollWidth: document.documentElement.scrollWidth,
                      clientWidth: document.documentElement.clientWidth})"""
BOXES = """() => [...document.querySelectorAll('.scroll, .graph-box')].map(box => {
  const rect = box.getBoundingClientRect(), content = box.querySelector('table, svg') || box;
  return {id: content.id, overflowX: getComputedStyle(box).overflowX, right: rect.right,
          scrollWidth: box.scrollWidth, clientWidth: box.clientWidth,
          contentWidth: content.getBoundingClientRect().width};
})"""


# The words of the selected elements that the layout broke across two lines (a header
# "WorkItem" drawn as "WorkIt / em", a state chip "open" as "ope / n").
BROKEN_WORDS = """(selector) => {
  const broken = [];
  for (const element of document.querySelectorAll(selector)) {
    const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const word of node.data.matchAll(/\\S+/g)) {
        const range = document.createRange();
        range.setStart(node, word.index);
        range.setEnd(node, word.index + word[0].length);
        const tops = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
        if (tops.size > 1) broken.push(word[0]);
      }
    }
  }
  return broken;
}"""
READABLE = "#work-items th, #work-items .state, #work-items td:first-child a"


def tab_until(page, selector: str, limit: int = 120) -> int:
    """Press Tab from the top of the page until `selector` has the focus; how many."""
    page.locator("body").focus()
    page.evaluate("document.activeElement && document.activeElement.blur()")
    for presses in range(1, limit + 1):
        page.keyboard.press("Tab")
        if page.evaluate("(s) => document.activeElement.matches(s)", selector):
            return presses
    raise AssertionError(f"Tab never reached {selector} in {limit} presses")


def test_the_mission_page_fits_wide_and_narrow_screens_dark_mode_and_the_keyboard(
        asgi_server, page, shot):
    s = Scenario()
    coordinator = human_coordinated(s)
    diamond(s)
    group_id = s.world.group.id
    mission_url = g_url(asgi_server, group_id, f"missions/{s.mission_id}/")

    sign_in(page, asgi_server.url, coordinator.name)
    go(page, mission_url)
    expect(page.locator("svg.graph a.node")).to_have_count(4)
    wide = page.evaluate(OVERFLOW)
    assert wide["scrollWidth"] <= wide["clientWidth"], wide
    shot(page, "mission-1280")
    # With one long goal, no header or state chip breaks mid-word.
    _no_broken_words(page.evaluate(BROKEN_WORDS, READABLE))

    page.set_viewport_size({"width": 420, "height": 900})
    narrow = page.evaluate(OVERFLOW)
    boxes = page.evaluate(BOXES)
    shot(page, "mission-420")
    assert {b["id"] for b in boxes} >= {"work-items", "work-graph"}, boxes
    for box in boxes:
        # Each table (and the graph) stays inside the viewport and scrolls inside its box.
        assert box["overflowX"] in ("auto", "scroll"), box
        assert box["right"] <= 420, box
        if box["contentWidth"] > box["clientWidth"] + 1:
            assert box["scrollWidth"] > box["clientWidth"], box
    graph = next(b for b in boxes if b["id"] == "work-graph")
    assert graph["contentWidth"] > graph["clientWidth"]  # the graph keeps its size, scrolls
    assert narrow["scrollWidth"] <= narrow["clientWidth"], (narrow, boxes)
    table = next(b for b in boxes if b["id"] == "work-items")
    # The six-column table keeps its width and scrolls inside its box.
    _scrolls(table)
    _no_broken_words(page.evaluate(BROKEN_WORDS, READABLE))

    page.set_viewport_size({"width": 1280, "height": 900})
    page.emulate_media(color_scheme="dark")
    colours = page.evaluate("""() => ({
        body: getComputedStyle(document.body).backgroundColor,
        text: getComputedStyle(document.body).color,
        node: getComputedStyle(document.querySelector('#work-graph .node rect')).fill,
        table: getComputedStyle(document.querySelector('#work-items')).backgroundColor})""")
    assert colours["body"] == "rgb(20, 24, 29)", colours  # --bg of the dark theme
    assert colours["text"] == "rgb(227, 232, 238)", colours
    assert colours["table"] == "rgb(28, 33, 40)", colours  # --panel, not white
    assert colours["node"] == "rgb(43, 51, 61)", colours  # an open node's dark fill
    dark = page.evaluate(OVERFLOW)
    assert dark["scrollWidth"] <= dark["clientWidth"], dark
    shot(page, "mission-dark")
    page.emulate_media(color_scheme="light")

    presses = tab_until(page, "#edge-dependant")
    expect(page.locator("#edge-dependant")).to_be_focused()
    page.keyboard.press("Tab")
    expect(page.locator("#edge-dependency")).to_be_focused()
    page.keyboard.press("Tab")
    expect(page.locator("#add-edge")).to_be_focused()
    assert presses < 60, presses
    shot(page, "edge-form-focused")

    go(page, g_url(asgi_server, group_id, "work-items/wi-a/"))
    expect(page.locator("#send-offer")).to_be_enabled()
    tab_until(page, "#send-offer", limit=150)
    expect(page.locator("#send-offer")).to_be_focused()
    shot(page, "send-offer-focused")
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline == "solid", outline  # :focus-visible shows where the focus is


def _no_broken_words(broken: list) -> None:
    assert broken == [], f"words broken across lines: {broken}"


def _scrolls(box: dict) -> None:
    assert box["scrollWidth"] > box["clientWidth"], f"the table is squeezed into its box: {box}"


# --- 6. a dropped connection -------------------------------------------------------------------

def test_a_dropped_connection_is_said_and_caught_up_when_it_is_back(asgi_server, page, shot):
    s = Scenario()
    coordinator = human_coordinated(s)
    s.authorize(goal="Planned before the outage")
    status = page.locator("#live-status")
    # The page's WebSocket goes through Playwright, which can drop it as a network would
    # (1011, which the htmx extension reconnects after) and refuse reconnections meanwhile.
    outage, live = {"on": False}, []

    def route(socket):
        if outage["on"]:
            socket.close(code=1011, reason="outage")
        else:
            socket.connect_to_server()
            live.append(socket)

    page.route_web_socket(re.compile(r"/ws/dashboard/"), route)
    sign_in(page, asgi_server.url, coordinator.name)
    go(page, g_url(asgi_server, s.world.group.id, f"missions/{s.mission_id}/"))
    expect(status).to_be_hidden()
    marker(page)
    outage["on"] = True
    live[-1].close(code=1011, reason="outage")
    expect(status).to_contain_text("Live updates paused: reconnecting", timeout=LIVE)
    shot(page, "offline")
    added = s.authorize(goal="Added while the page was offline")
    outage["on"] = False

    # The extension retries with a growing delay (at most a few seconds this early).
    expect(page.locator(f"#work-items tr[data-item='{added}']")).to_contain_text(
        "Added while the page was offline", timeout=2 * LIVE)
    # So is the list of what would end with the Mission (a region of its own: the form
    # under it is not refreshed).
    expect(page.locator("#ending")).to_contain_text(added)
    expect(status).to_be_hidden()
    assert still_marked(page)  # caught up without a reload
    shot(page, "caught-up")
