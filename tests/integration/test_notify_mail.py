"""Notifications by e-mail (issue 28), against a real SMTP server (aiosmtpd, started here):
a Mission driven to "ready for final Approval" through real commands mails its owner once,
with a text and an HTML part and a link that opens the decision; a reminder comes after its
time; each person's choice per Group is kept (digest, nothing); a removed member's pending
mail is dropped; the operators' Mail page shows the caught mail. The tasks run here, in
this process (the fault test, tests/faults/test_notify_kills.py, runs a real worker)."""

import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from apps.identity import registry
from apps.notify import sending, tasks, waits
from apps.notify.models import Mail, Preference, Wait
from tests.integration.notify_smtp import smtp_server
from tests.integration.test_dashboard_owner import verified
from tests.support import Scenario, contract, evidence

pytestmark = pytest.mark.django_db

PUBLIC = "http://mw.example"
HOSTILE = 'Q3 <script>alert("t")</script> review'


@pytest.fixture
def smtp(settings):
    with smtp_server() as (inbox, port):
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
        settings.EMAIL_USE_TLS = False
        settings.MW_PUBLIC_URL = PUBLIC
        settings.MW_NOTIFY_REMIND_AFTER_SECONDS = 3600
        settings.MW_NOTIFY_REMINDERS = 1
        settings.MW_NOTIFY_DIGEST_HOUR = 0
        yield inbox


def ready_for_approval(title: str = HOSTILE) -> Scenario:
    """A Mission (with an agent-written title) whose only WorkItem is verified: its final
    Approval waits on the human owner, who has an address."""
    s = Scenario()
    s.mission_id = s.c.ok("mission.create", {"title": title, "ownerId": s.owner.principal,
                                             "coordinatorId": s.c.principal})[0]["missionId"]
    verified(s)
    address(s, "owner@example.org")
    return s


def address(s: Scenario, value: str) -> None:
    get_user_model().objects.filter(username=s.owner.name).update(email=value)


def parts(message) -> tuple[str, str]:
    return (message.get_body(preferencelist=("plain",)).get_content(),
            message.get_body(preferencelist=("html",)).get_content())


def test_the_owner_gets_the_final_approval_once_with_a_working_link_and_a_reminder(smtp):
    s = ready_for_approval()
    g = s.world.group.id
    now = timezone.now()

    tasks.notice(g)
    tasks.notice(g)  # a second hint, as a duplicated task would be: nothing new
    tasks.catch_up(now)

    (mail,) = smtp.wait_for(1)
    assert mail["To"] == "owner@example.org"
    assert mail["Subject"].startswith("[MissionWeave] Final Approval: Q3 <script>")
    assert mail["Message-ID"] == f"<mw-mail-{Mail.objects.get(group_id=g).id}.{g}@mw.example>"
    text, html = parts(mail)
    link = f"{PUBLIC}/g/{g}/missions/{s.mission_id}/#final-approval"
    assert link in text and f'href="{link}"' in html
    assert HOSTILE in text  # text is text
    assert "<script>" not in html and "Q3 &lt;script&gt;alert(&quot;t&quot;)" in html
    page = s.owner.client.get(link.removeprefix(PUBLIC).split("#")[0])
    assert page.status_code == 200
    assert 'id="final-approval"' in page.content.decode()
    assert len(smtp.messages) == 1  # once

    tasks.catch_up(now + timedelta(minutes=59))
    assert len(smtp.messages) == 1  # its time has not come
    tasks.catch_up(now + timedelta(minutes=61))
    reminder = smtp.wait_for(2)[1]
    assert reminder["Subject"].startswith("[MissionWeave] Reminder: Final Approval")
    assert reminder["Message-ID"] != mail["Message-ID"]
    assert link in parts(reminder)[0]
    tasks.catch_up(now + timedelta(hours=5))  # MW_NOTIFY_REMINDERS = 1
    assert len(smtp.messages) == 2

    # Decided: the wait is over, and nothing more comes.
    s.owner.ok("mission.approve", {"missionId": s.mission_id})
    tasks.notice(g)
    assert Wait.objects.get(group_id=g).resolved_at is not None
    tasks.catch_up(now + timedelta(days=3))
    assert len(smtp.messages) == 2


def test_the_daily_digest_and_no_mail_are_each_persons_choice(smtp):
    s = ready_for_approval("Digest me")
    g = s.world.group.id
    answer = s.owner.client.post("/notifications/", {"email": "owner@example.org",
                                                     f"choice-{g}": "digest"})
    assert answer.status_code == 302
    assert Preference.objects.get(group_id=g, principal=s.owner.principal).choice == "digest"
    now = timezone.now().replace(hour=12)

    tasks.notice(g)
    (notice,) = Mail.objects.filter(group_id=g, kind="notice")
    assert (notice.state, notice.reason) == ("dropped",
                                             "they chose the daily digest for this Group")
    tasks.catch_up(now)
    tasks.catch_up(now + timedelta(hours=1))  # the same day: no second digest
    (digest,) = smtp.wait_for(1)
    assert digest["Subject"] == f"[MissionWeave] 1 decision(s) wait on you in {g}"
    assert f"{PUBLIC}/g/{g}/missions/{s.mission_id}/#final-approval" in parts(digest)[0]
    tasks.catch_up(now + timedelta(days=1))  # the next day, it still waits
    assert len(smtp.wait_for(2)) == 2

    s.owner.client.post("/notifications/", {"email": "owner@example.org",
                                            f"choice-{g}": "nothing"})
    tasks.catch_up(now + timedelta(days=2))
    assert len(smtp.messages) == 2
    page = s.owner.client.get("/notifications/").content.decode()
    assert '<option value="nothing" selected>' in page


def test_a_bad_choice_or_address_is_refused_and_changes_nothing(smtp):
    s = ready_for_approval("Choices")
    g = s.world.group.id
    wrong = s.owner.client.post("/notifications/", {"email": "someone@example.org",
                                                    f"choice-{g}": "hourly"})
    assert wrong.status_code == 400
    assert f"For {g}, choose one of: digest, every, nothing." in wrong.content.decode()
    bad = s.owner.client.post("/notifications/", {"email": "not an address"})
    assert bad.status_code == 400 and "Enter a valid email address." in bad.content.decode()
    assert get_user_model().objects.get(username=s.owner.name).email == "owner@example.org"
    assert not Preference.objects.filter(group_id=g).exists()


def test_a_removed_members_pending_mail_is_dropped_and_no_address_is_said(smtp):
    s = ready_for_approval("Removed")
    g = s.world.group.id
    now = timezone.now()
    waits.look(g, now)  # the wait and its mail recorded, not sent yet
    registry.remove_member(s.world.group, s.owner.principal)
    sending.send(sending.unsent(now), now)
    (mail,) = Mail.objects.filter(group_id=g)
    assert (mail.state, mail.reason) == ("dropped", "no longer a member of the Group")

    other = ready_for_approval("No address")
    address(other, "")
    tasks.notice(other.world.group.id)
    (mail,) = Mail.objects.filter(group_id=other.world.group.id)
    assert mail.state == "dropped" and mail.reason.startswith("no e-mail address")
    assert smtp.messages == []


def test_a_human_coordinator_hears_of_a_result_to_review(smtp):
    s = Scenario()
    lead = s.world.human(f"lead-{s.world.group.slug}", roles=("coordinator",))
    get_user_model().objects.filter(username=lead.name).update(email="lead@example.org")
    s.coordinated_by(lead)
    item, _ = s.running()
    s.w1.ok("work.submit", {"contractRevision": 1, "artifacts": [s.deliver(item)],
                            "evidence": [evidence(["ac1", "ac2"])]}, **s.lease_fields(item))
    tasks.notice(s.world.group.id)
    (mail,) = smtp.wait_for(1)
    assert mail["To"] == "lead@example.org"
    assert mail["Subject"].startswith("[MissionWeave] A result to review: Q3 review")
    assert f"{PUBLIC}/g/{s.world.group.id}/work-items/{item}/#decide" in parts(mail)[0]


def test_a_human_coordinator_hears_of_work_proposed_until_it_is_authorized(smtp):
    s = Scenario()
    lead = s.world.human(f"lead-{s.world.group.slug}", roles=("coordinator",))
    get_user_model().objects.filter(username=lead.name).update(email="lead@example.org")
    s.coordinated_by(lead)
    proposed = s.w2.ok("work.propose", {"missionId": s.mission_id,
                                        "contract": contract(goal="Proofread the <b>draft</b>")})
    tasks.notice(s.world.group.id)
    (mail,) = smtp.wait_for(1)
    text, html = parts(mail)
    proposal_id = proposed[0]["data"]["proposalId"]
    lead.ok("work.authorize", {"missionId": s.mission_id, "proposalId": proposal_id,
                               "contract": contract(goal="Proofread the draft")})
    tasks.notice(s.world.group.id)

    assert mail["Subject"].startswith("[MissionWeave] Work proposed: Q3 review")
    assert f"Work proposed by {s.w2.principal}: “Proofread the <b>draft</b>”" in text
    assert "&lt;b&gt;draft&lt;/b&gt;" in html and "<b>draft</b>" not in html
    assert f"{PUBLIC}/g/{s.world.group.id}/missions/{s.mission_id}/#proposals" in text
    wait = Wait.objects.get(group_id=s.world.group.id, kind="proposals")
    assert wait.resolved_at is not None  # authorized: it waits no more


def test_the_operators_mail_page_shows_the_caught_mail(settings, tmp_path):
    settings.EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
    settings.EMAIL_FILE_PATH = tmp_path / "mail"
    settings.MW_PUBLIC_URL = PUBLIC
    s = ready_for_approval()
    tasks.notice(s.world.group.id)
    staff = get_user_model().objects.create_user("operator", password="pw", is_staff=True)
    operator = Client()
    operator.force_login(staff)

    page = operator.get("/mail/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Final Approval: Q3 &lt;script&gt;" in html and "<script>alert" not in html
    assert re.search(rf'<a href="{PUBLIC}/g/{s.world.group.id}/missions/{s.mission_id}/'
                     r'#final-approval"', html)
    refused = s.owner.client.get("/mail/")  # operators only
    assert refused.status_code == 403
    assert "for the server's operators" in refused.content.decode()
