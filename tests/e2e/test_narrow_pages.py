"""The WorkItem and Mission pages at 1280 px and at a 420 px viewport, in Chromium against
the live server (tests/e2e/conftest.py), and the "Recorded: …" message after an action
(issue 25). The WorkItem page grew to 923 px at 420: long hashes, ids and URLs, tables and
pre blocks pushed it wide. At 420 px the page must not scroll sideways: tables and pre
blocks scroll inside their own box, long words wrap, nothing is hidden. Screenshots at both
widths (MW_SCREENSHOTS)."""

import pytest
from playwright.sync_api import expect

from apps.ledger.models import Group
from tests.e2e.conftest import g_url, go, marker, sign_in, still_marked, submit
from tests.support import Scenario, contract, evidence

pytestmark = pytest.mark.django_db(transaction=True)

LIVE = 10_000  # ms
LONG_URL = "https://reports.example.org/" + "quarterly-figures-" * 8 + "appendix.csv"
SCHEMA = {"type": "object", "required": ["summary", "sources"],
          "properties": {"summary": {"type": "string", "description": "One page, " * 12},
                         "sources": {"type": "array", "items": {"type": "string",
                                                                "format": "uri"}}}}
WIDTHS = (1280, 420)

SIDEWAYS = """() => ({scrollWidth: document.documentElement.scrollWidth,
                      clientWidth: document.documentElement.clientWidth})"""
# The elements that reach past the viewport's right edge without a box of their own that
# scrolls them: what makes the page scroll sideways.
WIDE = """(width) => {
  const scrolls = (e) => { for (let p = e.parentElement; p; p = p.parentElement) {
      const x = getComputedStyle(p).overflowX;
      if ((x === 'auto' || x === 'scroll' || x === 'hidden') && p !== document.documentElement
          && p !== document.body) return true; } return false; };
  const wide = (e) => { const r = e.getBoundingClientRect();
      return r.width > 0 && r.right > width + 1 && !scrolls(e); };
  // The outermost ones: an element inside a wide one comes along with it.
  return [...document.body.querySelectorAll('*')].filter((e) => wide(e)
      && !(e.parentElement && e.parentElement !== document.body && wide(e.parentElement))
  ).map((e) => `${e.tagName.toLowerCase()}#${e.id}.${e.className} ${Math.round(
      e.getBoundingClientRect().right)}`).slice(0, 20);
}"""


def rich(s: Scenario) -> tuple[str, str]:
    """A submitted WorkItem with everything that makes a page wide (a schema in a pre
    block, a long URL, artifacts named by their hash, an offer with its basis, a revised
    contract, a Conversation), and a verified one beside it: (submitted, verified)."""
    overrides = dict(
        goal="Summarize the quarterly report's figures with every source cited " + LONG_URL,
        deliverables=[{"id": "summary", "description": "A one-page summary " + LONG_URL,
                       "mediaType": "text/markdown", "schema": SCHEMA}],
        inputs=[{"ref": LONG_URL, "description": "the figures"}])
    done, _ = s.running(s.w1, **overrides)
    s.w1.ok("work.submit", {"contractRevision": 1, "artifacts": [s.deliver(done, s.w1)],
                            "evidence": [evidence(["ac1", "ac2"], result="pass: " + LONG_URL,
                                                  producer=s.w1.principal)]},
            **s.lease_fields(done))
    s.accept_result(done)
    item_id = s.authorize(**overrides)
    s.c.ok("work.revise_contract", {"contract": {**contract(**overrides),
                                                 "goal": overrides["goal"] + " (revised)"}},
           workItemId=item_id)
    s.offer(item_id, s.w1, s.w2)
    s.accept(item_id, s.w1)
    s.start(item_id, s.w1)
    s.w1.ok("conversation.post", {"kind": "message", "text": "Reading " + LONG_URL},
            workItemId=item_id)
    s.w1.ok("work.submit", {"contractRevision": 2, "artifacts": [s.deliver(item_id, s.w1)],
                            "evidence": [evidence(["ac1", "ac2"], result="pass: " + LONG_URL,
                                                  producer=s.w1.principal)]},
            **s.lease_fields(item_id))
    return item_id, done


def fits(page, shot, name: str) -> None:
    """At each width: photographed, and no sideways scrolling of the page, with every
    <details> open (a schema's pre block, a refusal's details) so nothing is left out."""
    page.evaluate("document.querySelectorAll('details').forEach((d) => { d.open = true; })")
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        shot(page, f"{name}-{width}")
        sideways = page.evaluate(SIDEWAYS)
        assert sideways["scrollWidth"] <= width, (
            f"{width}: {sideways}: " + "; ".join(page.evaluate(WIDE, width)))
    page.set_viewport_size({"width": 1280, "height": 900})


def test_the_work_item_and_mission_pages_fit_a_420_px_viewport(asgi_server, page, shot,
                                                                settings):
    settings.MW_BLOB_ROOT = asgi_server.data_dir / "blobs"
    s = Scenario()
    coordinator = s.world.human("coord-" + s.world.group.slug, roles=("coordinator",))
    s.coordinated_by(coordinator)
    item_id, done = rich(s)
    group_id = s.world.group.id

    sign_in(page, asgi_server.url, coordinator.name)
    go(page, g_url(asgi_server, group_id, f"work-items/{item_id}/"))
    expect(page.locator("#item-state")).to_have_text("submitted")
    fits(page, shot, "work-item-submitted")
    go(page, g_url(asgi_server, group_id, f"work-items/{done}/"))
    expect(page.locator("#item-state")).to_have_text("verified")
    fits(page, shot, "work-item-verified")
    go(page, g_url(asgi_server, group_id, f"missions/{s.mission_id}/"))
    fits(page, shot, "mission")
    go(page, asgi_server.url + "/")
    fits(page, shot, "home")


def test_recorded_is_shown_once_and_goes_with_the_first_live_change(asgi_server, page, shot):
    s = Scenario()
    coordinator = s.world.human("coord-" + s.world.group.slug, roles=("coordinator",))
    s.coordinated_by(coordinator)
    item_id = s.authorize()
    url = g_url(asgi_server, s.world.group.id, f"work-items/{item_id}/")

    sign_in(page, asgi_server.url, coordinator.name)
    go(page, url)
    page.check("#id_offer-candidates_0")
    page.uncheck("#id_offer-auto")
    submit(page, "#send-offer")
    expect(page.locator("ul.messages")).to_contain_text("Recorded: work.offered")
    expect(page.locator("#item-state")).to_have_text("offered")
    marker(page)
    head = Group.objects.get(id=s.world.group.id).head_sequence
    shot(page, "recorded")

    s.accept(item_id, s.w1)  # the page moves on, live

    expect(page.locator("#item-state")).to_have_text("queued", timeout=LIVE)
    assert still_marked(page)  # a live re-render, not a reload
    assert Group.objects.get(id=s.world.group.id).head_sequence > head
    expect(page.locator("ul.messages")).to_have_count(0)
    shot(page, "after-live-change")
    go(page, url)
    expect(page.locator("ul.messages")).to_have_count(0)  # and it does not come back
