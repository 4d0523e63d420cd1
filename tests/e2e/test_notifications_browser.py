"""The notifications' two pages in a real browser (chromium through Playwright) against the
real ASGI server (tests/e2e/conftest.py), as a newcomer meets them (issue 28): an owner of
two Groups sets their address on /notifications/ (a bad one is refused with a readable
error) and chooses the daily digest for one Group; then a Mission of the other Group,
driven to "ready for final Approval" by real commands, mails them, the mail is caught in
files (Django's file backend, as `make run` does with no EMAIL_HOST), an operator reads it
on /mail/, and its link, followed in the owner's browser, opens the decision on the
Mission page. Photographed at 1280 and 420 px; at neither does a page scroll sideways.

The server reads the caught mail from its EMAIL_FILE_PATH, $MW_DATA_DIR/mail (settings.py):
the mail is written there from this process, with the server's address as MW_PUBLIC_URL.
The notice runs here, not in a Celery worker: a worker another test module started would
send it with its own MW_PUBLIC_URL, so this process's commit hints are not enqueued."""

import time
import uuid

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from apps.identity import registry
from apps.notify import mailbox, tasks
from apps.notify.models import Mail, Preference
from tests.e2e.conftest import PASSWORD, at_each_width, go, photographed, sign_in, submit
from tests.integration.test_dashboard_owner import verified
from tests.support import Scenario


def sent_notice(group_id: str, principal: str) -> Mail:
    """The one notice mailed to `principal`. The commit's own hint may be looking at the
    Group already (it holds the Group's cursor, so this look skips it): look again until
    its mail is sent."""
    deadline = time.monotonic() + 20
    while True:
        tasks.notice(group_id)
        sent = list(Mail.objects.filter(group_id=group_id, principal=principal,
                                        state=Mail.SENT))
        if sent or time.monotonic() > deadline:
            (mail,) = sent
            return mail
        time.sleep(0.1)

pytestmark = pytest.mark.django_db(transaction=True)

TITLE = "Ship the Q3 figures to the board"


@pytest.fixture
def caught_here(settings, asgi_server, monkeypatch):
    """Mail from this process is caught where the live server's /mail/ reads it, with
    links to the live server; commits here hint no Celery worker (the test looks itself)."""
    settings.EMAIL_BACKEND = mailbox.FILE_BACKEND
    settings.EMAIL_FILE_PATH = asgi_server.data_dir / "mail"
    settings.MW_PUBLIC_URL = asgi_server.url
    monkeypatch.setattr(tasks.HINTS, "put", lambda group_id: None)


def test_an_owner_chooses_a_digest_and_follows_a_caught_mails_link(asgi_server, page, shot,
                                                                    browser, caught_here):
    quiet, busy = Scenario(), Scenario()  # the owner's Groups: a digest, a mail each
    owner = quiet.owner
    registry.add_member(busy.world.group, owner.principal, ["owner"])
    sign_in(page, asgi_server.url, owner.name)
    go(page, f"{asgi_server.url}/notifications/")
    rows = page.locator("#notify-groups tbody tr")
    expect(rows).to_have_count(2)
    at_each_width(page, shot, "notifications")

    # A bad address: the browser says so before sending (an e-mail input) ...
    page.fill("input[name=email]", "owner at example dot org")
    page.click("#save-notifications")
    assert page.locator("input[name=email]").evaluate("(e) => e.validationMessage")
    assert page.url == f"{asgi_server.url}/notifications/"
    # ... and one the browser lets through (no dot in the domain) the server refuses, said
    # beside the field; nothing saved.
    page.fill("input[name=email]", "owner@example")
    submit(page, "#save-notifications")
    expect(page.locator("#notify-form")).to_contain_text("Enter a valid email address.")
    at_each_width(page, shot, "notifications-bad-address")
    assert get_user_model().objects.get(username=owner.name).email == ""
    assert not Preference.objects.filter(principal=owner.principal).exists()

    address = f"{owner.name}@example.org"
    page.fill("input[name=email]", address)
    page.select_option(f"#choice-{quiet.world.group.id}", "digest")
    submit(page, "#save-notifications")
    expect(page.locator("ul.messages")).to_contain_text("Saved.")
    expect(page.locator("input[name=email]")).to_have_value(address)
    expect(page.locator(f"#choice-{quiet.world.group.id}")).to_have_value("digest")
    expect(page.locator(f"#choice-{busy.world.group.id}")).to_have_value("every")
    at_each_width(page, shot, "notifications-saved")
    assert get_user_model().objects.get(username=owner.name).email == address
    assert dict(Preference.objects.filter(principal=owner.principal).values_list(
        "group_id", "choice")) == {quiet.world.group.id: "digest", busy.world.group.id: "every"}

    # The busy Group's Mission becomes ready for its final Approval: one mail, caught.
    g = busy.world.group.id
    busy.owner = owner
    busy.mission_id = busy.c.ok("mission.create", {
        "title": TITLE, "ownerId": owner.principal,
        "coordinatorId": busy.c.principal})[0]["missionId"]
    verified(busy)
    mail = sent_notice(g, owner.principal)
    assert (mail.kind, mail.state, mail.address) == ("notice", "sent", address)

    operator = get_user_model().objects.create_user(f"operator-{uuid.uuid4().hex[:8]}",
                                                    password=PASSWORD, is_staff=True)
    staff = photographed(browser, shot)
    staff_page = next(staff).new_page()
    try:
        sign_in(staff_page, asgi_server.url, operator.username)
        go(staff_page, f"{asgi_server.url}/mail/")
        caught = staff_page.locator("article.caught-mail", has_text=TITLE)
        expect(caught).to_have_count(1)
        expect(caught.locator("h3")).to_contain_text(f"Final Approval: {TITLE}")
        expect(caught).to_contain_text(f"To {address}")
        expect(staff_page.locator("#outbox tr[data-state=sent]", has_text=address)
               ).to_have_count(1)
        at_each_width(staff_page, shot, "mail")
        link = caught.locator("pre.mail-text a[href*='#final-approval']")
        expect(link).to_have_count(1)
        href = link.get_attribute("href")
        assert href == (f"{asgi_server.url}/g/{g}/missions/{busy.mission_id}/"
                        "#final-approval"), href
    finally:
        next(staff, None)  # its final shot, and closed

    # Followed in the owner's browser: the Mission page, at the decision.
    go(page, href)
    expect(page.locator("#final-approval")).to_be_visible()
    expect(page.locator("#final-approval")).to_be_in_viewport()
    expect(page.locator("h1")).to_contain_text(TITLE)
