"""A Group's webhooks in a real browser (chromium through Playwright) against the real ASGI
server (tests/e2e/conftest.py): an owner finds them from the Group's page, adds one with
the form and reads its secret once, and reads a webhook's deliveries with every attempt.
Photographed at 1280 and 420 px, and at neither does the page scroll sideways.

The server runs with DEBUG off, so it refuses webhooks to 127.0.0.1 as production does:
the one that delivers to this test's receiver is made here, with private addresses
allowed, and its attempts are made here too (sending.attempt), so the page shows them
whether or not a Celery worker of another test is also running."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from apps.webhooks import outbox, registry, sending
from apps.webhooks.models import Attempt, Delivery, Webhook
from tests.e2e.conftest import at_each_width, follow, g_url, go, sign_in, submit
from tests.faults.procs import wait_until
from tests.support import Scenario

pytestmark = pytest.mark.django_db(transaction=True)

LONG_URL = "https://hooks.example.com/services/" + "T0123456789/B0123456789/" * 4 + "x"


class Failing(BaseHTTPRequestHandler):
    """Answers 503 with an HTML body (shown escaped on the attempts page)."""

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        body = b"<html><b>Service Unavailable</b> " + b"retry later " * 60 + b"</html>"
        self.send_response(503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def failing_receiver():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Failing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/hook"
    server.shutdown()
    server.server_close()


def test_an_owner_adds_a_webhook_and_reads_its_deliveries(asgi_server, page, shot, settings,
                                                          failing_receiver):
    s = Scenario()
    group_id = s.world.group.id
    sign_in(page, asgi_server.url, s.owner.name)
    go(page, g_url(asgi_server, group_id))
    follow(page, "#group-webhooks")
    expect(page.locator("#no-webhooks")).to_be_visible()
    at_each_width(page, shot, "webhooks-empty")

    page.fill("input[name=url]", LONG_URL)
    page.check("input[name=format][value=slack]")
    page.check("input[name=events][value='work.submitted']")
    page.check("input[name=events][value='mission.approved']")
    submit(page, "#add-webhook")
    webhook = Webhook.objects.get(group_id=group_id)
    assert (webhook.url, webhook.format, webhook.event_types) == (
        LONG_URL, "slack", ["mission.approved", "work.submitted"])
    expect(page.locator("#secret-value")).to_have_text(webhook.secret)
    at_each_width(page, shot, "webhook-secret-once")
    go(page, page.url)
    expect(page.locator("#webhook-secret")).to_have_count(0)  # once

    # A refused URL: said on the form, nothing made.
    go(page, g_url(asgi_server, group_id, "webhooks/"))
    page.fill("input[name=url]", "http://169.254.169.254/latest/meta-data/")
    page.click("#add-webhook")
    expect(page.locator(".refused")).to_contain_text("link-local")
    at_each_width(page, shot, "webhook-refused")
    assert Webhook.objects.filter(group_id=group_id).count() == 1

    # Deliveries and their attempts, to a receiver that fails.
    settings.MW_WEBHOOK_ALLOW_PRIVATE = True
    failing, _ = registry.create(group_id, failing_receiver, ["work.authorized"], "json",
                                 s.owner.principal, timezone.now())
    s.authorize()
    s.authorize()
    outbox.fan_out(failing.group_id, failing.id, timezone.now())
    deliveries = list(Delivery.objects.filter(webhook_id=failing.id))
    assert len(deliveries) == 2
    for delivery in deliveries:
        sending.attempt(delivery.id, timezone.now())
    wait_until(lambda: Attempt.objects.filter(
        delivery_id__in=[d.id for d in deliveries]).count() >= 2, 10, "the attempts")

    go(page, g_url(asgi_server, group_id, "webhooks/"))
    expect(page.locator(f"tr[data-webhook='{failing.id}']")).to_contain_text("pending 2")
    at_each_width(page, shot, "webhooks-list")
    follow(page, f"tr[data-webhook='{failing.id}'] a")
    rows = page.locator("#deliveries li[data-delivery]")
    expect(rows).to_have_count(2)
    expect(rows.first).to_contain_text("HTTP 503")
    page.evaluate("document.querySelectorAll('details').forEach((d) => { d.open = true; })")
    expect(rows.first.locator("pre")).to_contain_text("<html><b>Service Unavailable</b>")
    at_each_width(page, shot, "webhook-deliveries")

    # Removed: gone from the list, with its deliveries.
    submit(page, "#remove-webhook")
    expect(page.locator("ul.messages")).to_contain_text(f"Webhook {failing.id}")
    assert not Delivery.objects.filter(webhook_id=failing.id).exists()
