"""The dashboard in a real browser: Playwright's Python client drives Debian's `chromium`
(tests/e2e/conftest.py) against a live server (pytest-django's live_server; WSGI is enough
for pages that need not be live) on the test PostgreSQL database. The MissionOwner logs
in, finds a submitted-and-accepted WorkItem, reads why it was verified, and approves the
Mission.

No browser is downloaded: the tests use the system's chromium, and skip (saying so) only
when that binary is absent; `apt-get install chromium` provides it."""

import pytest
from playwright.sync_api import expect

from apps.ledger.models import Event
from tests.e2e.conftest import follow, go, sign_in, submit
from tests.integration.artifact_helpers import submitted_json
from tests.support import Scenario, evidence

pytestmark = pytest.mark.usefixtures("blob_root")


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


def test_the_owner_sees_why_an_item_was_verified_and_approves_the_mission(live_server, eager,
                                                                          page, shot):
    s = Scenario()
    item_id = accepted_item(s)
    group_id = s.world.group.id

    stylesheet = page.request.get(f"{live_server.url}/static/dashboard/dashboard.css")
    assert stylesheet.ok  # vendored, served by the app: no CDN
    go(page, f"{live_server.url}/")
    expect(page).to_have_url(f"{live_server.url}/login/?next=/")
    sign_in(page, live_server.url, s.owner.name)

    follow(page, f"a[href='/g/{group_id}/']")
    follow(page, f"a[href='/g/{group_id}/missions/{s.mission_id}/']")
    follow(page, f"svg.graph a[href='/g/{group_id}/work-items/{item_id}/']")
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
    shot(page, "why-verified")

    follow(page, f"a[href='/g/{group_id}/missions/{s.mission_id}/']")
    page.fill("input[name=comment]", "read the Evidence")
    submit(page, "#approve-mission")  # the confirmation dialog is accepted (conftest)
    expect(page.locator("#mission-state")).to_have_text("approved")
    expect(page.locator("ul.messages")).to_contain_text("mission.approved")
    expect(page.locator("#approve-mission")).to_have_count(0)

    approval = Event.objects.get(group_id=group_id, type="mission.approved")
    assert (approval.actor, approval.data["comment"]) == (s.owner.principal, "read the Evidence")
