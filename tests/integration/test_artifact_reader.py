"""The artifact reader (apps/dashboard/reader.py, artifact_content.py, submissions.py)
through Django's test client on PostgreSQL: the content endpoint's headers, its access
check, the download's name, paging, the renderer on hostile artifacts (nothing that runs
survives in the HTML the dashboard serves), bytes that no longer match their hash, and two
submissions of a WorkItem side by side."""

import hashlib
import json
import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from apps.artifacts import storage
from apps.identity import registry
from tests.integration.artifact_helpers import digest, published
from tests.support import Scenario, evidence

HOSTILE_MARKDOWN = b"""# Findings

<script>window.pwned = 1; alert("md")</script>

<img src=x onerror="window.pwned = 2">
<a href="javascript:window.pwned=3">raw link</a>

[a javascript: link](javascript:window.pwned=4) and [another](JaVaScRiPt:alert(5))
[vbscript](vbscript:msgbox) [data](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)
[an ftp link](ftp://files.example/x) <javascript:alert(6)>
![a tracking pixel](https://tracker.example/pixel.png)

| a | b |
|---|---|
| <b onmouseover=alert(7)>x</b> | [ok](https://example.org/ok) |
"""
HOSTILE_SVG = (b'<svg xmlns="http://www.w3.org/2000/svg" onload="window.pwned=8">'
               b'<script>window.pwned = 9</script><circle r="5"/></svg>')
HOSTILE_HTML = (b"<!doctype html><html><body onload=\"window.pwned=10\">"
                b"<script>window.pwned = 11</script><iframe src=\"javascript:alert(12)\">"
                b"</iframe></body></html>")
HOSTILE_JSON = json.dumps({"</script><script>window.pwned=13</script>": [
    "<img src=x onerror=alert(14)>", {"href": "javascript:alert(15)"}]}).encode()
HOSTILE_CSV = (b'name,link\n"<script>window.pwned=16</script>",javascript:alert(17)\n'
               b'"<img src=x onerror=alert(18)>",ok\n')
PNG = bytes.fromhex(  # a 1x1 transparent PNG
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")

OWN_SCRIPT = re.compile(r'<script src="/static/[^"]+" defer></script>')


def group_url(s: Scenario, path: str) -> str:
    return f"/g/{s.world.group.id}/{path}"


def artifact_url(s: Scenario, name: str, path: str = "") -> str:
    return group_url(s, f"artifacts/{name}/{path}")


def html_of(actor, path: str) -> str:
    response = actor.client.get(path)
    assert response.status_code == 200, (response.status_code, response.content[:300])
    assert response["Content-Type"].startswith("text/html")
    return response.content.decode()


CSRF_VALUE = re.compile(r'(name="csrfmiddlewaretoken" value=")[^"]+')


def page_bytes(response) -> str:
    """A page without its CSRF token (a new one each time)."""
    return CSRF_VALUE.sub(r"\1", response.content.decode())


def body(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


def assert_inert(html: str) -> None:
    """Nothing in the page runs but the dashboard's own scripts: no other <script, no
    element with an event handler attribute, no javascript: (or vbscript:, data:) URL in
    any attribute, no <svg>, <iframe>, <object>, <embed> or <img> but the reader's own,
    and every link's scheme is http, https or mailto (or none: a relative link). The
    words may stand in the text, escaped: that is the source shown as source."""
    assert "<script" not in OWN_SCRIPT.sub("", html), html
    for tag in re.findall(r"<[a-zA-Z][^>]*>", html):
        assert not re.search(r"\son[a-z]+\s*=", tag, re.IGNORECASE), tag
        for value in re.findall(r"""=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+))""", tag):
            url = "".join(value).strip().lower()
            assert not url.startswith(("javascript:", "vbscript:", "data:")), tag
    assert not re.search(r"<(svg|iframe|object|embed|math|style|base|meta http)", html.split(
        "</head>", 1)[1], re.IGNORECASE), html
    for tag in re.findall(r"<a\s[^>]*>", html):
        href = re.search(r'href="([^"]*)"', tag)
        scheme = re.match(r"([a-z][a-z0-9+.-]*):", href.group(1) if href else "", re.I)
        assert scheme is None or scheme.group(1).lower() in ("http", "https", "mailto"), tag


@pytest.fixture
def running(scenario):
    """An item run by w1, to publish artifacts for: (scenario, item id)."""
    item_id, _ = scenario.running(scenario.w1)
    return scenario, item_id


def publish(s: Scenario, item_id: str, data: bytes, media_type: str, **overrides) -> str:
    return published(s, item_id, data, mediaType=media_type, **overrides)


# --- the content endpoint --------------------------------------------------------------------

@pytest.mark.parametrize("media_type,data,served,framed", [
    ("text/markdown", b"# Report\n", "text/plain; charset=utf-8", False),
    ("application/json", b'{"a": 1}', "text/plain; charset=utf-8", False),
    ("text/csv", b"a,b\n1,2\n", "text/plain; charset=utf-8", False),
    ("text/html", HOSTILE_HTML, "text/plain; charset=utf-8", False),
    ("image/svg+xml", HOSTILE_SVG, "text/plain; charset=utf-8", False),
    ("application/xhtml+xml", HOSTILE_HTML, "text/plain; charset=utf-8", False),
    ("text/plain; charset=iso-8859-1", "café".encode("latin-1"),
     "text/plain; charset=iso8859-1", False),
    ("image/png", PNG, "image/png", False),
    ("application/pdf", b"%PDF-1.4\n%%EOF\n", "application/pdf", True),
    ("application/zip", b"PK\x03\x04 not really", "application/octet-stream", False),
])
def test_the_content_endpoint_serves_verified_bytes_sandboxed(running, media_type, data,
                                                             served, framed):
    s, item_id = running
    name = publish(s, item_id, data, media_type)

    response = s.owner.client.get(artifact_url(s, name, "content"))

    assert response.status_code == 200
    assert body(response) == data
    assert response["Content-Type"] == served
    csp = [part.strip() for part in response["Content-Security-Policy"].split(";")]
    assert csp[0] == "sandbox" and "default-src 'none'" in csp
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Cross-Origin-Resource-Policy"] == "same-origin"
    assert response["Content-Length"] == str(len(data))
    # Only a PDF may be framed, and only by the dashboard itself.
    assert ("frame-ancestors 'self'" in csp) == framed
    assert response["X-Frame-Options"] == ("SAMEORIGIN" if framed else "DENY")
    inline = media_type != "application/zip"
    assert response["Content-Disposition"].startswith("inline" if inline else "attachment")


def test_html_and_svg_are_never_served_as_a_document(running):
    s, item_id = running
    for media_type, data in (("text/html", HOSTILE_HTML), ("image/svg+xml", HOSTILE_SVG),
                             ("text/plain", HOSTILE_HTML), ("text/xml", HOSTILE_SVG)):
        name = publish(s, item_id, data + media_type.encode(), media_type)  # one per type
        for query in ("", "?download=1"):
            response = s.owner.client.get(artifact_url(s, name, "content") + query)
            kind = response["Content-Type"].split(";")[0]
            assert kind in ("text/plain", "application/octet-stream"), (media_type, kind)
            assert "sandbox" in response["Content-Security-Policy"]


@pytest.mark.parametrize("overrides,expected", [
    ({"mediaType": "text/markdown"}, "{item}.md"),
    ({"mediaType": "application/json"}, "{item}.json"),
    ({"mediaType": "text/csv"}, "{item}.csv"),
    ({"mediaType": "image/png"}, "{item}.png"),
    ({"mediaType": "application/pdf"}, "{item}.pdf"),
    ({"mediaType": "application/x-unknown"}, "{item}.bin"),
    ({"mediaType": "text/markdown", "uri": "s3://reports/Q3 final report.md"},
     "Q3_final_report.md"),
    ({"mediaType": "text/plain", "uri": "https://files.example/../evil.html"}, "evil.html.txt"),
    ({"mediaType": "text/plain", "uri": 'https://f.example/a";b\r\n.txt'}, "a_b.txt"),
])
def test_a_download_is_named_from_the_manifest(running, overrides, expected):
    s, item_id = running
    data = f"content for {expected}".encode()
    name = published(s, item_id, data, **overrides)

    response = s.owner.client.get(artifact_url(s, name, "content") + "?download=1")

    filename = expected.format(item=item_id)
    assert response.status_code == 200 and body(response) == data
    assert response["Content-Disposition"] == f'attachment; filename="{filename}"'
    assert response["Content-Type"] == "application/octet-stream"
    assert 'download="' + filename + '"' in html_of(s.owner, artifact_url(s, name))


def test_the_content_endpoint_takes_the_artifact_pages_access_check(running):
    s, item_id = running
    name = publish(s, item_id, b"# secret report\n", "text/markdown")
    outsider = Scenario()  # a member of another Group, in which this artifact does not exist
    missing = "sha256:" + "0" * 64

    own = s.owner.client.get(artifact_url(s, name, "content"))
    theirs_named_here = outsider.owner.client.get(artifact_url(s, name, "content"))
    theirs_missing = outsider.owner.client.get(artifact_url(s, missing, "content"))
    under_their_group = outsider.owner.client.get(
        f"/g/{outsider.world.group.id}/artifacts/{name}/content")
    nothing = outsider.owner.client.get(
        f"/g/{outsider.world.group.id}/artifacts/{missing}/content")
    malformed = s.owner.client.get(artifact_url(s, "sha256:xyz", "content"))
    anonymous = Client().get(artifact_url(s, name, "content"))
    agent = s.w1.client.get(artifact_url(s, name, "content"),
                            HTTP_AUTHORIZATION=f"Bearer {s.w1.token}")

    assert own.status_code == 200
    # Whoever may not see it gets what a missing artifact gets, byte for byte.
    for refused in (theirs_named_here, theirs_missing, under_their_group, nothing, malformed):
        assert refused.status_code == 404
        assert b"secret report" not in refused.content
    assert page_bytes(theirs_named_here) == page_bytes(theirs_missing)
    assert page_bytes(under_their_group) == page_bytes(nothing)
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/")
    assert agent.status_code == 302  # agents read blobs through the API, not the dashboard


def test_a_member_who_left_reads_nothing_more(running):
    s, item_id = running
    name = publish(s, item_id, b"# report\n", "text/markdown")
    registry.remove_member(s.world.group, s.owner.principal)

    assert s.owner.client.get(artifact_url(s, name, "content")).status_code == 404
    assert s.owner.client.get(artifact_url(s, name)).status_code == 404


def test_bytes_that_no_longer_match_their_hash_are_never_shown(running, blob_root):
    s, item_id = running
    data = b"# The original report\n"
    name = publish(s, item_id, data, "text/markdown")
    path = blob_root / "store" / storage.blob_name(hashlib.sha256(data).hexdigest())
    path.write_bytes(b"# A report changed behind the server's back\n")

    page = html_of(s.owner, artifact_url(s, name))
    raw = s.owner.client.get(artifact_url(s, name, "content"))

    assert 'id="reader-unavailable"' in page and "HASH_MISMATCH" in page
    assert "changed behind" not in page and "original report" not in page
    assert raw.status_code == 500 and b"HASH_MISMATCH" in raw.content
    assert b"changed behind" not in raw.content
    assert raw["Content-Type"].startswith("text/plain")
    assert "sandbox" in raw["Content-Security-Policy"]


# --- the artifact page: what each kind shows ---------------------------------------------------

def test_markdown_is_rendered_and_sanitized(running):
    s, item_id = running
    name = publish(s, item_id, HOSTILE_MARKDOWN, "text/markdown")

    html = html_of(s.owner, artifact_url(s, name))
    rendered = html.split('id="reader-rendered">', 1)[1].split("</div>", 1)[0]

    assert "<h1>Findings</h1>" in rendered and "<table>" in rendered
    assert_inert(html)
    # Raw HTML is shown as text; the links that remain are http(s), marked rel=nofollow.
    assert "&lt;script&gt;window.pwned = 1" in rendered
    assert ('<a href="https://example.org/ok" rel="noopener noreferrer nofollow">ok</a>'
            in rendered)
    assert not re.search(r'<a [^>]*href="(ftp|vbscript|data|javascript):', rendered, re.I)
    for link in re.findall(r"<a [^>]*>", rendered):
        assert 'rel="noopener noreferrer nofollow"' in link, link
    # An image is a request to wherever the agent points: it stays a link, never loaded.
    assert "<img" not in rendered and "tracker.example" in rendered
    assert "Content-Security-Policy" not in html  # the policy is a header, checked here:
    policy = s.owner.client.get(artifact_url(s, name))["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "img-src 'self'" in policy
    assert "default-src 'self'" in policy and "object-src 'none'" in policy


@pytest.mark.parametrize("media_type,data", [
    ("image/svg+xml", HOSTILE_SVG),
    ("text/html", HOSTILE_HTML),
    ("text/plain", HOSTILE_HTML),
    ("application/xml", HOSTILE_SVG),
])
def test_svg_html_and_xml_are_shown_as_source(running, media_type, data):
    s, item_id = running
    name = publish(s, item_id, data, media_type)

    html = html_of(s.owner, artifact_url(s, name))

    assert 'id="reader-text"' in html
    assert_inert(html)
    assert "&lt;script&gt;window.pwned" in html  # the source, escaped
    assert "<svg" not in html and "<iframe" not in html and "<body onload" not in html


def test_json_is_a_collapsible_tree(running):
    s, item_id = running
    name = publish(s, item_id, HOSTILE_JSON, "application/json")

    html = html_of(s.owner, artifact_url(s, name))

    assert 'class="json-tree"' in html and "<details open>" in html
    assert "[ 2 items ]" in html and "{ 1 key }" in html
    assert_inert(html)
    assert "&lt;/script&gt;&lt;script&gt;window.pwned=13" in html


def test_json_too_large_or_broken_is_shown_as_text(running, settings):
    s, item_id = running
    settings.MW_READER_JSON_MAX_BYTES = 20
    large = publish(s, item_id, json.dumps({"words": "x" * 50}).encode(), "application/json")
    broken = publish(s, item_id, b'{"words": <script>', "application/json")

    html_large = html_of(s.owner, artifact_url(s, large))
    html_broken = html_of(s.owner, artifact_url(s, broken))

    assert "MW_READER_JSON_MAX_BYTES" in html_large and 'id="reader-text"' in html_large
    assert "not valid JSON" in html_broken and "&lt;script&gt;" in html_broken
    assert_inert(html_broken)


def test_csv_shows_its_first_rows_and_counts_the_rest(running, settings):
    s, item_id = running
    settings.MW_READER_CSV_ROWS = 3
    rows = "\n".join(f"row {n},{n * n}" for n in range(1, 11))
    name = publish(s, item_id, f"name,square\n{rows}\n".encode(), "text/csv")
    hostile = publish(s, item_id, HOSTILE_CSV, "text/csv")

    html = html_of(s.owner, artifact_url(s, name))
    html_hostile = html_of(s.owner, artifact_url(s, hostile))

    table = html.split('id="reader-csv">', 1)[1].split("</table>", 1)[0]
    assert "<th>name</th><th>square</th>" in table
    assert table.count("<tr>") == 4  # the header and three rows
    assert "<td>row 3</td><td>9</td>" in table and "row 4" not in table
    assert "<strong>7 more rows</strong> not shown" in html
    assert_inert(html_hostile)
    assert "&lt;script&gt;window.pwned=16" in html_hostile


def test_an_image_is_shown_from_the_content_endpoint(running):
    s, item_id = running
    name = publish(s, item_id, PNG, "image/png")

    html = html_of(s.owner, artifact_url(s, name))

    assert f'<img class="reader-image" src="{artifact_url(s, name, "content")}"' in html


def test_a_pdf_is_framed_only_when_asked(running):
    s, item_id = running
    name = publish(s, item_id, b"%PDF-1.4\n%%EOF\n", "application/pdf")

    offered = html_of(s.owner, artifact_url(s, name))
    shown = html_of(s.owner, artifact_url(s, name) + "?pdf=show")

    assert 'id="show-pdf"' in offered and "<iframe" not in offered
    frame = re.search(r"<iframe[^>]*>", shown).group(0)
    assert f'src="{artifact_url(s, name, "content")}"' in frame
    # Chromium shows no PDF in an <iframe sandbox>: the sandbox is the response's CSP.
    assert "sandbox" not in frame


def test_a_binary_is_only_downloaded(running):
    s, item_id = running
    name = publish(s, item_id, b"\x00\x01PK binary", "application/zip")

    html = html_of(s.owner, artifact_url(s, name))

    assert 'id="reader-binary"' in html and "PK binary" not in html
    assert f'href="{artifact_url(s, name, "content")}?download=1"' in html


def test_text_is_paged(running, settings):
    s, item_id = running
    settings.MW_READER_PAGE_BYTES = 1024
    lines = [f"line {n:04d}: café ünïcödé {'x' * (n % 37)}" for n in range(400)]
    data = ("\n".join(lines) + "\n").encode()
    name = publish(s, item_id, data, "text/plain")

    pages, number = [], 1
    while True:
        html = html_of(s.owner, artifact_url(s, name) + f"?page={number}")
        text = html.split('id="reader-text">', 1)[1].split("</pre>", 1)[0]
        pages.append(text)
        if 'rel="next"' not in html:
            break
        number += 1

    count = -(-len(data) // 1024)
    assert len(pages) == count > 10
    assert f"Page 1 of {count}" in html_of(s.owner, artifact_url(s, name))
    assert "\ufffd" not in "".join(pages)  # no character cut in two at a page break
    assert all(page.endswith("\n") for page in pages)  # each page ends on a line
    assert "".join(pages).replace("&#x27;", "'") == data.decode()
    # Past the last page: the last page.
    assert f"Page {count} of {count}" in html_of(s.owner, artifact_url(s, name) + "?page=999")
    assert "Page 1 of" in html_of(s.owner, artifact_url(s, name) + "?page=x")


def test_markdown_too_is_paged_and_shown_as_source_on_request(running, settings):
    s, item_id = running
    settings.MW_READER_PAGE_BYTES = 1024
    data = "".join(f"## Section {n}\n\nParagraph {n} <b>bold?</b>\n\n" for n in range(80))
    name = publish(s, item_id, data.encode(), "text/markdown")

    first = html_of(s.owner, artifact_url(s, name))
    second = html_of(s.owner, artifact_url(s, name) + "?page=2")
    source = html_of(s.owner, artifact_url(s, name) + "?as=text&page=2")

    assert "<h2>Section 0</h2>" in first and "Section 79" not in first
    assert "<h2>" in second and "<h2>Section 0</h2>" not in second
    assert 'id="reader-text"' in source and "## Section" in source
    assert "&amp;as=text" in source  # the pager keeps showing the source


# --- the WorkItem page links to the reader -----------------------------------------------------

def test_the_work_item_page_links_each_artifact_to_the_reader(running):
    s, item_id = running
    name = publish(s, item_id, b"# report\n", "text/markdown")

    html = html_of(s.owner, group_url(s, f"work-items/{item_id}/"))

    assert f'href="{artifact_url(s, name)}" class="read-artifact">read</a>' in html
    assert f'href="{artifact_url(s, name, "content")}?download=1" download>' in html
    assert "/api/v1/blobs/" not in html


# --- two submissions side by side ------------------------------------------------------------

def submit(s: Scenario, item_id: str, data: bytes) -> str:
    name = published(s, item_id, data)
    s.w1.ok("work.submit", {"contractRevision": s.item(item_id)["contractRevision"],
                            "artifacts": [name], "evidence": [evidence(
                                ["ac1", "ac2"], artifacts=[name], result="pass: done")]},
            **s.lease_fields(item_id))
    return name


def test_a_second_submission_is_shown_beside_the_first_as_a_diff(scenario):
    s = scenario
    coordinator = s.world.human("hc-" + s.world.group.slug, roles=("coordinator",))
    s.coordinated_by(coordinator)
    item_id, _ = s.running(s.w1)
    first = submit(s, item_id, b"# Q3 report\n\nRevenue grew.\nCosts fell.\n"
                               b"<script>window.pwned=1</script>\n")
    s.c.ok("work.fail", {"reason": "the outlook is missing", "evidence": [evidence(
        ["ac1"], method="coordinator-review", result="fail: no outlook")]}, workItemId=item_id)
    s.offer(item_id, s.w1)
    s.accept(item_id)
    s.start(item_id)
    second = submit(s, item_id, b"# Q3 report\n\nRevenue grew.\nCosts fell.\n"
                                b"<script>window.pwned=1</script>\nOutlook: steady.\n")

    item_page = html_of(coordinator, group_url(s, f"work-items/{item_id}/"))
    url = group_url(s, f"work-items/{item_id}/submissions")
    compared = html_of(s.owner, url)
    by_coordinator = html_of(coordinator, url)

    assert 'id="submissions-compare"' in item_page and "Submitted 2 times" in item_page
    assert f'href="{url}"' in item_page
    assert "Submission 1 → submission 2" in compared
    assert f'data-old="{first}" data-new="{second}"' in compared
    assert "0 lines removed, 1 added" in compared
    assert '<tr class="diff-insert">' in compared and "Outlook: steady." in compared
    assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in compared  # escaped, both sides
    assert_inert(compared)
    assert by_coordinator.split('<main id="main">')[1] == compared.split('<main id="main">')[1]


def test_the_submissions_page_of_one_submission_says_there_is_nothing_to_compare(running):
    s, item_id = running
    submit(s, item_id, b"# only once\n")

    html = html_of(s.owner, group_url(s, f"work-items/{item_id}/submissions"))
    item_page = html_of(s.owner, group_url(s, f"work-items/{item_id}/"))

    assert 'id="no-comparison"' in html and "submitted 1 time" in html
    assert 'id="submissions-compare"' not in item_page


def test_the_submissions_page_is_a_members_page(running):
    s, item_id = running
    outsider = Scenario()

    assert outsider.owner.client.get(
        group_url(s, f"work-items/{item_id}/submissions")).status_code == 404


def test_a_user_without_a_membership_gets_404(running):
    s, item_id = running
    name = publish(s, item_id, b"# r\n", "text/markdown")
    get_user_model().objects.create_user("loner", password="pw")
    client = Client()
    client.login(username="loner", password="pw")

    assert client.get(artifact_url(s, name)).status_code == 404
    assert client.get(artifact_url(s, name, "content")).status_code == 404
    assert digest(b"# r\n") == name
