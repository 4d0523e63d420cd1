"""Managing a Group's webhooks (issue 28): the dashboard's pages for its owners and
coordinators (Django's test client, the whole stack), and `manage.py mw_webhook`.

Only owners and coordinators of the Group see or change its webhooks; another member
gets a 403 that says why, anyone else the 404 every page of a Group gives a non-member;
another Group's webhook is not found from this Group's pages. A secret is shown once."""

import io
import json
import re

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from apps.webhooks.models import Attempt, Delivery, Webhook
from tests.support import Scenario

CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
SECRET = re.compile(r"whsec_[A-Za-z0-9_-]+")

pytestmark = pytest.mark.usefixtures("private_allowed")


@pytest.fixture
def private_allowed(settings):
    settings.MW_WEBHOOK_ALLOW_PRIVATE = False  # the production default, shown to the forms


def webhooks_url(s: Scenario, rest: str = "") -> str:
    return f"/g/{s.world.group.id}/webhooks/{rest}"


def add(actor, s: Scenario, **fields):
    data = {"url": "https://hooks.example.com/mw", "format": "json", **fields}
    return actor.client.post(webhooks_url(s), data)


def test_an_owner_adds_a_webhook_and_sees_its_secret_once(scenario):
    s = scenario
    page = s.owner.client.get(f"/g/{s.world.group.id}/")
    assert 'id="group-webhooks"' in page.content.decode()

    response = add(s.owner, s, events=["work.authorized", "work.submitted"])
    assert response.status_code == 302
    webhook = Webhook.objects.get(group_id=s.world.group.id)
    assert response["Location"] == webhooks_url(s, f"{webhook.id}/")
    assert (webhook.url, webhook.format, webhook.event_types, webhook.created_by) == (
        "https://hooks.example.com/mw", "json", ["work.authorized", "work.submitted"],
        s.owner.principal)
    assert webhook.cursor == s.world.head  # from now on

    shown = s.owner.client.get(response["Location"]).content.decode()
    assert SECRET.findall(shown) == [webhook.secret]
    again = s.owner.client.get(response["Location"]).content.decode()
    assert SECRET.findall(again) == []  # once
    listing = s.owner.client.get(webhooks_url(s)).content.decode()
    assert webhook.id in listing and webhook.secret not in listing


def test_a_new_secret_is_shown_once_and_the_old_one_still_signs(scenario):
    s = scenario
    add(s.owner, s)
    webhook = Webhook.objects.get(group_id=s.world.group.id)
    response = s.owner.client.post(webhooks_url(s, f"{webhook.id}/rotate"))
    assert response.status_code == 302
    rotated = Webhook.objects.get(id=webhook.id)
    assert rotated.secret != webhook.secret and rotated.previous_secret == webhook.secret
    assert SECRET.findall(s.owner.client.get(response["Location"]).content.decode()) == [
        rotated.secret]


def test_a_refused_url_is_said_and_changes_nothing(scenario):
    s = scenario
    for url, said in [("http://169.254.169.254/latest/", "link-local"),
                      ("ftp://example.com/", "http:// or https://")]:
        response = add(s.owner, s, url=url)
        assert response.status_code == 400
        assert said in response.content.decode()
    response = add(s.owner, s, events=["no.such"])
    assert response.status_code == 400
    assert "no.such" in response.content.decode()
    assert not Webhook.objects.filter(group_id=s.world.group.id).exists()


ODD = ["", " ", "x" * 100_000, "é" * 5000, "http://é.com/", "https://" + "a" * 300 + ".com/",
       "http://[::1", "http://x:abc/", "http://x:0/", "https://\u202eexample.com/",
       "<script>alert(1)</script>", "http://0x7f000001/", "http://2130706433/",
       "https://[fe80::1%25eth0]/", "http://hooks.example.com/\x00", "//hooks.example.com/"]


@pytest.mark.parametrize("url", ODD)
def test_no_url_breaks_the_form(scenario, url):
    s = scenario
    response = add(s.owner, s, url=url, events=["work.offered", "no.such", ""])
    assert response.status_code in (302, 400), (url, response.status_code)
    response = add(s.owner, s, url=url)
    assert response.status_code in (302, 400), (url, response.status_code)
    made = Webhook.objects.filter(group_id=s.world.group.id)
    assert all(not w.url.startswith(("http://0x", "http://2130", "https://[fe80")) for w in made)


def test_a_coordinator_manages_them_too_and_sees_the_attempts(scenario):
    s = scenario
    human = s.world.human("hc-" + s.world.group.slug, roles=("coordinator",))
    assert add(human, s).status_code == 302
    webhook = Webhook.objects.get(group_id=s.world.group.id)
    Delivery.objects.create(id="whd_x", group_id=s.world.group.id, webhook_id=webhook.id,
                            event_id="evt_x", sequence=3, event_type="work.offered", body="{}",
                            state="pending", attempts=1, next_attempt_at=webhook.created_at,
                            created_at=webhook.created_at)
    Attempt.objects.create(group_id=s.world.group.id, delivery_id="whd_x", number=1,
                           started_at=webhook.created_at, duration_ms=12, status_code=502,
                           response_excerpt="<b>bad gateway</b>")
    page = human.client.get(webhooks_url(s, f"{webhook.id}/")).content.decode()
    assert 'data-delivery="whd_x"' in page and "HTTP 502" in page
    assert "&lt;b&gt;bad gateway&lt;/b&gt;" in page  # a receiver's answer, escaped

    response = human.client.post(webhooks_url(s, f"{webhook.id}/remove"))
    assert response.status_code == 302
    assert not Webhook.objects.filter(id=webhook.id).exists()
    assert not Delivery.objects.filter(id="whd_x").exists()
    assert not Attempt.objects.filter(delivery_id="whd_x").exists()


def test_workers_reviewers_and_observers_may_not(scenario):
    s = scenario
    add(s.owner, s)
    webhook = Webhook.objects.get(group_id=s.world.group.id)
    for roles in (("worker",), ("reviewer",), ("observer",)):
        member = s.world.human(f"{roles[0]}-{s.world.group.slug}", roles=roles)
        assert 'id="group-webhooks"' not in member.client.get(
            f"/g/{s.world.group.id}/").content.decode()
        for path, method in [("", "get"), ("", "post"), (f"{webhook.id}/", "get"),
                             (f"{webhook.id}/remove", "post"), (f"{webhook.id}/rotate", "post"),
                             (f"{webhook.id}/send-again", "post")]:
            response = getattr(member.client, method)(webhooks_url(s, path),
                                                      {"url": "https://x.example/"})
            assert response.status_code == 403, (roles, path, method)
            assert "owners and coordinators" in response.content.decode()
            assert webhook.secret not in response.content.decode()
    assert Webhook.objects.filter(group_id=s.world.group.id).count() == 1
    assert Webhook.objects.get(id=webhook.id).secret == webhook.secret


def test_non_members_and_other_groups_see_nothing(scenario):
    s = scenario
    other = Scenario()
    add(other.owner, other)
    theirs = Webhook.objects.get(group_id=other.world.group.id)

    # An owner of this Group, on the other Group's webhook through this Group's URLs.
    for path, method in [(f"{theirs.id}/", "get"), (f"{theirs.id}/remove", "post"),
                         (f"{theirs.id}/rotate", "post"), (f"{theirs.id}/send-again", "post")]:
        assert getattr(s.owner.client, method)(webhooks_url(s, path)).status_code == 404
    assert theirs.id not in s.owner.client.get(webhooks_url(s)).content.decode()
    # Through the other Group's URLs, of which they are not a member.
    for path, method in [("", "get"), ("", "post"), (f"{theirs.id}/", "get"),
                         (f"{theirs.id}/remove", "post")]:
        assert getattr(s.owner.client, method)(webhooks_url(other, path)).status_code == 404
    assert Webhook.objects.get(id=theirs.id).secret == theirs.secret

    anonymous = Client()
    assert anonymous.get(webhooks_url(other)).status_code == 302  # to the login


def test_the_forms_need_a_csrf_token(scenario):
    s = scenario
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(get_user_model().objects.get(username=s.owner.name))
    refused = strict.post(webhooks_url(s), {"url": "https://hooks.example.com/"})
    assert refused.status_code == 403
    form = strict.get(webhooks_url(s)).content.decode()
    token = CSRF.search(form).group(1)
    sent = strict.post(webhooks_url(s), {"url": "https://hooks.example.com/", "format": "json",
                                         "csrfmiddlewaretoken": token})
    assert sent.status_code == 302
    assert Webhook.objects.filter(group_id=s.world.group.id).count() == 1


# --- mw_webhook --------------------------------------------------------------------------------

def command(*args) -> dict:
    out = io.StringIO()
    call_command("mw_webhook", *args, stdout=out)
    return json.loads(out.getvalue())


def test_mw_webhook_adds_lists_and_removes(scenario):
    s = scenario
    added = command("add", s.world.group.id, "https://hooks.example.com/a",
                    "--events", "work.authorized,work.offered", "--format", "slack")
    webhook = Webhook.objects.get(id=added["id"])
    assert added["secret"] == webhook.secret and added["secret"].startswith("whsec_")
    assert (added["groupId"], added["format"], added["events"]) == (
        s.world.group.id, "slack", ["work.authorized", "work.offered"])
    assert webhook.created_by == "operator"

    other = Scenario()
    command("add", other.world.group.id, "https://hooks.example.com/b")
    listed = command("list", s.world.group.id)["webhooks"]
    assert [w["id"] for w in listed] == [webhook.id]
    assert "secret" not in listed[0] and webhook.secret not in json.dumps(listed)
    assert len(command("list")["webhooks"]) >= 2

    rotated = command("rotate", webhook.id)
    assert rotated["secret"] != added["secret"]

    assert command("remove", webhook.id) == {"removed": webhook.id, "groupId": s.world.group.id}
    assert command("list", s.world.group.id) == {"webhooks": []}


@pytest.mark.parametrize(("args", "said"), [
    (("add", "grp_nope", "https://hooks.example.com/"), "NOT_FOUND: no Group grp_nope"),
    (("add", "{group}", "http://127.0.0.1/"), "VALIDATION_ERROR"),
    (("add", "{group}", "https://hooks.example.com/", "--events", "nope"), "unknown event type"),
    (("remove", "wh_nope"), "NOT_FOUND: no webhook wh_nope"),
    (("add", "{group}", "https://hooks.example.com/", "--secret", "mine"), "unrecognized"),
])
def test_mw_webhook_refusals_say_why(scenario, args, said):
    args = [a.replace("{group}", scenario.world.group.id) for a in args]
    with pytest.raises(CommandError) as refused:
        command(*args)
    assert said in str(refused.value)
    assert not Webhook.objects.exists()
