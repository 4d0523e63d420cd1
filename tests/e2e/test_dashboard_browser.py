"""The dashboard in a real browser: Playwright's Python client drives Debian's `chromium`
against a live server (pytest-django's live_server; WSGI is enough for pages) on the test
PostgreSQL database. The MissionOwner logs in, finds a submitted-and-accepted WorkItem,
reads why it was verified, and approves the Mission.

No browser is downloaded: the test uses the system's chromium, and skips (saying so) only
when that binary is absent; `apt-get install chromium` provides it."""

import shutil

import pytest
from playwright.sync_api import expect, sync_playwright

from apps.ledger.models import Event
from tests.integration.artifact_helpers import submitted_json
from tests.support import Scenario, evidence

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install -y "
    "chromium); Playwright downloads no browser here"), pytest.mark.usefixtures("blob_root")]


def accepted_item(s: Scenario) -> str:
    """A WorkItem submitted with a JSON artifact, reviewed (pipeline and a reviewer's
    Evidence) and accepted by the Coordinator: the Mission's only item."""
    reviewer = s.world.agent("rev-" + s.world.group.slug, roles=("reviewer",))
    item_id, name = submitted_json(s, {"title": "Q3 in one page", "words": 320},
                                   result="pass: all sections")
    reviewer.ok("evidence.record", {"evidence": [evidence(
        ["ac1"], producer=reviewer.principal, result="pass: every section is summarized",
        method="read against the report", artifacts=[name])]}, workItemId=item_id)
    s.c.ok("work.accept_result", {"evidence": [evidence(
        ["ac1", "ac2"], result="pass: the review passed and I agree")]}, workItemId=item_id)
    return item_id


def test_the_owner_sees_why_an_item_was_verified_and_approves_the_mission(live_server, eager):
    s = Scenario()
    item_id = accepted_item(s)
    group_id = s.world.group.id
    # Playwright's sync API runs an event loop in this thread, where Django refuses
    # database calls: everything the test reads from the database is read before or after.

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=["--no-sandbox", "--disable-gpu",
                                                   "--disable-dev-shm-usage"])
        page = browser.new_page()
        page.on("dialog", lambda dialog: dialog.accept())  # the Approval's confirmation
        stylesheet = page.request.get(f"{live_server.url}/static/dashboard/dashboard.css")
        assert stylesheet.ok  # vendored, served by the app: no CDN
        page.goto(f"{live_server.url}/")
        expect(page).to_have_url(f"{live_server.url}/login/?next=/")
        page.fill("input[name=username]", s.owner.name)
        page.fill("input[name=password]", "pw")
        page.click("button[type=submit]")

        page.click(f"a[href='/g/{group_id}/']")
        page.click(f"a[href='/g/{group_id}/missions/{s.mission_id}/']")
        page.click(f"svg.graph a[href='/g/{group_id}/work-items/{item_id}/']")
        expect(page.locator("#item-state")).to_have_text("verified")
        decision = page.locator("#decision")
        expect(decision).to_contain_text("Why it is verified")
        expect(decision).to_contain_text(f"Accepted by {s.c.principal}")
        expect(decision).to_contain_text("combined evaluation at that moment: pass")
        ac1 = page.locator("tr[data-criterion=ac1]")
        expect(ac1).to_contain_text("pass: every section is summarized")
        expect(ac1).to_contain_text("pass: all sections")
        expect(page.locator("tr[data-criterion=ac2]")).to_contain_text("check:max-size:1024")
        expect(page.locator("#evaluation-verdict")).to_have_text("pass")
        expect(page.locator("#accept-result")).to_have_count(0)  # an owner, not a coordinator

        page.click(f"a[href='/g/{group_id}/missions/{s.mission_id}/']")
        page.fill("input[name=comment]", "read the Evidence")
        page.click("#approve-mission")
        expect(page.locator("#mission-state")).to_have_text("approved")
        expect(page.locator("ul.messages")).to_contain_text("mission.approved")
        expect(page.locator("#approve-mission")).to_have_count(0)
        browser.close()

    approval = Event.objects.get(group_id=group_id, type="mission.approved")
    assert (approval.actor, approval.data["comment"]) == (s.owner.principal, "read the Evidence")
