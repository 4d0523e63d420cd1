"""The MissionOwner's dashboard in a real browser against the live ASGI server (see
tests/e2e/conftest.py): "Waiting on me" across three Groups, execution approval granted
and refused, the Evidence matrix that gates the final Approval (enabled live once the
last item is verified), refusing a second Mission's Approval, which the Coordinator then
finds in their own inbox; a member of another Group sees none of it, and the operator's
admin refuses any edit of the log. Screenshots as in the conftest (MW_SCREENSHOTS)."""

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from apps.identity import registry
from apps.ledger.models import Event
from apps.work.models import WorkItem
from tests.e2e.conftest import PASSWORD, follow, g_url, go, marker, sign_in, still_marked, submit
from tests.faults.procs import wait_until
from tests.support import Scenario, evidence

pytestmark = pytest.mark.django_db(transaction=True)

RISKY = {"class": "high", "requiresExecutionApproval": True}
LIVE = 10_000  # ms


def submitted(s: Scenario) -> str:
    item_id, _ = s.running(s.w1)
    s.w1.ok("work.submit", {"contractRevision": 1, "artifacts": [s.deliver(item_id)],
                            "evidence": [evidence(["ac1", "ac2"], result="pass: done")]},
            **s.lease_fields(item_id))
    return item_id


def reviewed(s: Scenario, item_id: str) -> None:
    wait_until(lambda: (WorkItem.objects.get(group_id=s.world.group.id, work_item_id=item_id)
                        .doc.get("review") or {}).get("evaluation"), 30, "review")


def owned_by(s: Scenario, owner, coordinator=None) -> None:
    """A new Mission of `s` whose MissionOwner is `owner` (a member here from now on)."""
    registry.add_member(s.world.group, owner.principal, ["owner"])
    s.owner = owner
    s.mission_id = s.c.ok("mission.create", {
        "title": f"Mission in {s.world.group.slug}", "ownerId": owner.principal,
        "coordinatorId": (coordinator or s.c).principal,
        "delegates": [s.c.principal] if coordinator else []})[0]["missionId"]


def rows(page) -> list:
    return page.locator("#waiting tbody tr").evaluate_all(
        "rows => rows.map(r => [r.dataset.kind, r.dataset.item || null])")


def test_an_owner_decides_everything_from_waiting_on_me(asgi_server, review_worker, page, context,
                                                       shot, settings):
    # The deliverables this process uploads go where the server's Celery review reads them.
    settings.MW_BLOB_ROOT = asgi_server.data_dir / "blobs"
    first, second, third = Scenario(), Scenario(), Scenario()
    owner = first.owner
    reviewer_of_third = third.world.human("coord-" + third.world.group.slug,
                                          roles=("coordinator",))
    owned_by(second, owner)
    owned_by(third, owner, coordinator=reviewer_of_third)
    grant_me = first.queued(first.w1, risk=RISKY)
    refuse_me = second.queued(second.w1, risk=RISKY)
    done = submitted(first)
    reviewed(first, done)  # the Celery review checks its artifact's hash first
    first.accept_result(done)
    pending = submitted(first)
    finished = submitted(third)
    third.accept_result(finished)

    sign_in(page, asgi_server.url, owner.name)
    expect(page.locator("h1")).to_have_text("Waiting on me")
    assert sorted(rows(page), key=str) == sorted(
        [["execution-approval", grant_me], ["execution-approval", refuse_me],
         ["final-approval", None]], key=str)  # first's Mission is not done: no approval yet
    shot(page, "waiting-on-me")

    # Grant one execution approval from its card...
    follow(page, f"#waiting tr[data-item='{grant_me}'] a")
    card = page.locator("#execution-approval")
    expect(card).to_contain_text("Budget at stake")
    expect(card).to_contain_text("high")
    page.fill("#id_grant-comment", "backups checked")
    submit(page, "#grant-execution")
    expect(page.locator("#execution-approval")).to_have_count(0)
    expect(page.locator("ul.messages")).to_contain_text("approval.execution_granted")

    # ...and refuse the other, with a reason.
    go(page, f"{asgi_server.url}/")
    follow(page, f"#waiting tr[data-item='{refuse_me}'] a")
    page.fill("#id_refuse-reason", "no rollback plan")
    submit(page, "#refuse-execution")
    expect(page.locator("#execution-refusal")).to_contain_text("no rollback plan")

    # The Evidence matrix of the first Mission; no Approval while an item is unverified.
    go(page, g_url(asgi_server, first.world.group.id, f"missions/{first.mission_id}/"))
    matrix = page.locator(f"table.matrix[data-matrix-item='{done}']")
    expect(matrix).to_contain_text("pass: done")
    expect(matrix.locator("tr.artifacts")).to_contain_text("hash verified", timeout=LIVE)
    approve = page.locator("#approve-mission")
    expect(approve).to_be_disabled()
    expect(page.locator("#approval-blocked")).to_contain_text(pending)
    shot(page, "approval-blocked")
    marker(page)

    first.accept_result(pending)  # the Coordinator decides; the owner's page follows live
    # grant_me is still unfinished: cancel it so that every item is verified or cancelled.
    first.c.ok("work.cancel", {"reason": "not needed after all"}, workItemId=grant_me)
    expect(approve).to_be_enabled(timeout=LIVE)
    assert still_marked(page)
    page.once("dialog", lambda dialog: dialog.accept())
    page.fill("#approve-comment", "read every row of the matrix")
    submit(page, "#approve-mission")
    expect(page.locator("#mission-state")).to_have_text("approved")

    # Refuse the third Mission's Approval, with a reason per WorkItem too.
    go(page, g_url(asgi_server, third.world.group.id, f"missions/{third.mission_id}/"))
    page.click("#refuse summary")
    page.fill("#id_refuse-reason", "the figures are not sourced")
    page.fill("#id_refuse-item_0", "cite the ledger export")
    submit(page, "#refuse-approval")
    expect(page.locator("#mission-state")).to_have_text("active")
    expect(page.locator("#last-refusal")).to_contain_text("the figures are not sourced")
    shot(page, "approval-refused")

    # The Coordinator of the third Mission finds it in their own inbox.
    coordinator_page = context.new_page()
    sign_in(coordinator_page, asgi_server.url, reviewer_of_third.name)
    refusal = coordinator_page.locator("#waiting tr[data-kind='approval-refused']")
    expect(refusal).to_contain_text("refused the final Approval: the figures are not sourced")
    shot(coordinator_page, "coordinator-inbox")

    kinds = [e.type for e in Event.objects.filter(group_id=third.world.group.id)]
    assert "mission.approval_refused" in kinds and "mission.approved" not in kinds
    refused = Event.objects.get(group_id=second.world.group.id, type="approval.execution_refused")
    assert (refused.actor, refused.data["reason"]) == (owner.principal, "no rollback plan")


def test_a_member_of_another_group_sees_none_of_it(asgi_server, page, shot):
    theirs, mine = Scenario(), Scenario()
    item_id = theirs.queued(theirs.w1, risk=RISKY)

    sign_in(page, asgi_server.url, mine.owner.name)
    expect(page.locator("#nothing-waiting")).to_be_visible()
    expect(page.locator("main")).not_to_contain_text(theirs.world.group.id)
    answer = page.goto(g_url(asgi_server, theirs.world.group.id, f"work-items/{item_id}/"))
    shot(page, "not-found")

    assert answer.status == 404


def test_the_admin_refuses_any_edit_of_the_log(asgi_server, page, shot):
    s = Scenario()
    s.authorize()
    get_user_model().objects.create_superuser("operator-" + s.world.group.slug,
                                              password=PASSWORD)
    event = Event.objects.filter(group_id=s.world.group.id).order_by("sequence").first()
    before = (event.type, event.data, event.hash)

    go(page, f"{asgi_server.url}/admin/login/")
    page.fill("input[name=username]", "operator-" + s.world.group.slug)
    page.fill("input[name=password]", PASSWORD)
    submit(page, "input[type=submit]")
    go(page, f"{asgi_server.url}/admin/ledger/event/{event.pk}/change/")
    expect(page.locator("#content")).to_contain_text(event.type)
    expect(page.locator("input[name=_save]")).to_have_count(0)
    expect(page.locator("a.deletelink")).to_have_count(0)
    shot(page, "admin-event")
    token = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    change = page.request.post(f"{asgi_server.url}/admin/ledger/event/{event.pk}/change/",
                               form={"csrfmiddlewaretoken": token, "type": "forged"},
                               headers={"Referer": page.url})
    delete = page.request.post(f"{asgi_server.url}/admin/ledger/event/{event.pk}/delete/",
                               form={"csrfmiddlewaretoken": token, "post": "yes"},
                               headers={"Referer": page.url})
    add = page.request.get(f"{asgi_server.url}/admin/ledger/event/add/")

    assert (change.status, delete.status, add.status) == (403, 403, 403)
    event.refresh_from_db()
    assert (event.type, event.data, event.hash) == before
