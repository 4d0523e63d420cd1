"""The artifact reader's rendering, by media type: plain functions from bytes and text to
HTML that is safe to put on the dashboard's origin (DESIGN.md: "Agent output is
untrusted input").

- Markdown and text: markdown-it-py (CommonMark, tables, strikethrough) with its `html`
  option off, so raw HTML in the source is shown as text, and images off (an image would
  be a request to wherever the agent pointed it: it stays a link). Its output then goes
  through nh3's allow-list of tags and attributes; links keep http, https and mailto only
  and get rel="noopener noreferrer nofollow".
- JSON: pretty-printed as nested <details> (collapsible with no script), every string
  escaped here.
- CSV: the first rows as a table, the rest counted.
- Everything else that is text (HTML, SVG, XML, scripts, unknown text) is shown as
  escaped source, never rendered; images, PDF and binaries come from the content endpoint
  (apps/dashboard/artifact_content.py), never inline.

Text is paged by bytes (`page_bounds`), so a large artifact is never read whole for a page.
Nothing here reads the database, the blob store or the settings: the shell passes them in."""

import codecs
import csv
import difflib
import json
import mimetypes
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

import nh3
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

# --- media types ---------------------------------------------------------------------------

IMAGES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
PDF = "application/pdf"
JSON_TYPES = frozenset({"application/json", "text/json"})
CSV_TYPES = frozenset({"text/csv", "text/tab-separated-values", "application/csv"})
MARKDOWN_TYPES = frozenset({"text/markdown", "text/x-markdown"})
# Text a browser would run or render as a document: shown as source only, and served
# from the content endpoint as text/plain.
ACTIVE_TEXT = frozenset({"text/html", "application/xhtml+xml", "image/svg+xml",
                         "application/xml", "text/xml", "text/javascript",
                         "application/javascript", "application/ecmascript", "text/css"})
TEXTUAL_APPLICATIONS = frozenset({"application/x-ndjson", "application/yaml",
                                  "application/x-yaml", "application/toml",
                                  "application/sql", "application/x-sh"})

# What each kind shows on the artifact page.
MARKDOWN, TEXT, JSON, CSV, IMAGE, SOURCE, BINARY = (
    "markdown", "text", "json", "csv", "image", "source", "binary")
KIND_PDF = "pdf"
TEXT_KINDS = frozenset({MARKDOWN, TEXT, JSON, CSV, SOURCE})


def parse_media_type(media_type: str) -> tuple[str, str | None]:
    """(the lowercase type/subtype, its charset parameter if any)."""
    base, _, params = (media_type or "").partition(";")
    charset = None
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset":
            charset = value.strip().strip('"') or None
    return base.strip().lower(), charset


def kind_of(media_type: str) -> str:
    base, _ = parse_media_type(media_type)
    if base in MARKDOWN_TYPES:
        return MARKDOWN
    if base in JSON_TYPES or base.endswith("+json"):
        return JSON
    if base in CSV_TYPES:
        return CSV
    if base in IMAGES:
        return IMAGE
    if base == PDF:
        return KIND_PDF
    if base in ACTIVE_TEXT or base.endswith("+xml"):
        return SOURCE
    if base.startswith("text/") or base in TEXTUAL_APPLICATIONS:
        return TEXT
    return BINARY


def charset_of(media_type: str) -> str:
    """The declared charset if Python knows it, else UTF-8."""
    _, charset = parse_media_type(media_type)
    if charset:
        try:
            return codecs.lookup(charset).name
        except LookupError:
            pass
    return "utf-8"


def served_type(media_type: str) -> str:
    """The Content-Type the content endpoint declares for inline use: the four image
    types and PDF as themselves, anything textual as text/plain (so HTML, SVG and XML are
    never a document the browser renders), the rest as bytes to save."""
    base, _ = parse_media_type(media_type)
    kind = kind_of(media_type)
    if kind in (IMAGE, KIND_PDF):
        return base
    if kind in TEXT_KINDS:
        return f"text/plain; charset={charset_of(media_type)}"
    return "application/octet-stream"


# Python's own table (not the host's /etc/mime.types, which varies by machine), and the
# few it names oddly.
_MIME = mimetypes.MimeTypes()
_EXTENSIONS = {"text/markdown": ".md", "text/x-markdown": ".md", "application/xml": ".xml",
               "text/plain": ".txt", "application/x-ndjson": ".ndjson",
               "application/yaml": ".yaml", "application/x-yaml": ".yaml",
               "text/tab-separated-values": ".tsv", "image/jpeg": ".jpg"}
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def extension(media_type: str) -> str:
    base, _ = parse_media_type(media_type)
    return _EXTENSIONS.get(base) or _MIME.guess_extension(base) or ".bin"


def download_name(manifest: dict) -> str:
    """The file name a download is saved as: the manifest's name if it has one (a `name`,
    else the last segment of its `uri` when that looks like a file name), else the
    WorkItem's id (or the hash's first digits); always ending in an extension of its
    media type, so a name cannot make a text artifact an .html file. Only [A-Za-z0-9._-]."""
    ext = extension(manifest.get("mediaType", ""))
    named = manifest.get("name") if isinstance(manifest.get("name"), str) else None
    if not named:
        last = urlsplit(manifest.get("uri") or "").path.rsplit("/", 1)[-1]
        named = last if "." in last.strip(".") else None
    stem = _UNSAFE.sub("_", named or "").strip("._-")[:100]
    if not stem:
        fallback = manifest.get("workItemId") or \
            "artifact-" + (manifest.get("hash") or "").removeprefix("sha256:")[:12]
        stem = _UNSAFE.sub("_", fallback).strip("._-")[:100] or "artifact"
    if not stem.lower().endswith(ext):
        stem += ext
    return stem


# --- paging --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Window:
    """The bytes to read for page `number` (1-based) of `count`: [start, end) of `size`."""
    number: int
    count: int
    start: int
    end: int
    size: int
    page_bytes: int


def window(size: int, page_bytes: int, number: int) -> Window:
    """Which bytes page `number` needs: its nominal range [k·N, (k+1)·N) widened by a
    quarter page before (to end the page before on a line) and 4 bytes after (to finish
    a UTF-8 sequence). Out-of-range numbers are clamped."""
    count = max(1, -(-size // page_bytes))
    number = min(max(1, number), count)
    k = number - 1
    return Window(number, count, max(0, k * page_bytes - page_bytes // 4),
                  min(size, (k + 1) * page_bytes + 4), size, page_bytes)


def _boundary(data: bytes, w: Window, offset: int) -> int:
    """Where a page break near `offset` falls: just after the last line break in the
    quarter page before it, else at the next byte that starts a UTF-8 sequence."""
    if offset <= 0:
        return 0
    if offset >= w.size:
        return w.size
    at = offset - w.start
    newline = data.rfind(b"\n", max(0, at - w.page_bytes // 4), at)
    if newline != -1:
        return w.start + newline + 1
    for _ in range(3):
        if at < len(data) and data[at] & 0xC0 == 0x80:
            at += 1
    return w.start + at


def page_text(data: bytes, w: Window, charset: str) -> str:
    """The text of the page whose window `data` is (as read for `window`)."""
    k = w.number - 1
    begin = _boundary(data, w, k * w.page_bytes)
    end = _boundary(data, w, (k + 1) * w.page_bytes)
    return data[begin - w.start:end - w.start].decode(charset, errors="replace")


# --- Markdown ------------------------------------------------------------------------------

_MARKDOWN = (MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
             .enable(["table", "strikethrough"]).disable("image"))
TAGS = frozenset({"a", "abbr", "b", "blockquote", "br", "code", "dd", "del", "dl", "dt", "em",
                  "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "kbd", "li", "ol", "p", "pre",
                  "s", "strong", "sub", "sup", "table", "tbody", "td", "tfoot", "th", "thead",
                  "tr", "ul"})
ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}, "th": {"align"}, "td": {"align"}}
URL_SCHEMES = frozenset({"http", "https", "mailto"})
LINK_REL = "noopener noreferrer nofollow"


def sanitize(html: str) -> SafeString:
    """nh3 (ammonia): only TAGS with ATTRIBUTES, URLs of URL_SCHEMES (or relative), links
    rel=LINK_REL; script and style elements dropped with their content; comments dropped."""
    return mark_safe(nh3.clean(html, tags=set(TAGS), attributes=ATTRIBUTES,
                               url_schemes=set(URL_SCHEMES), link_rel=LINK_REL,
                               strip_comments=True))


def markdown(text: str) -> SafeString:
    return sanitize(_MARKDOWN.render(text))


# --- JSON ----------------------------------------------------------------------------------

JSON_MAX_DEPTH = 64       # deeper values are shown as compact JSON text
JSON_MAX_NODES = 20_000   # past this many values the tree stops, with a note
OPEN_DEPTH = 2            # levels open when the page loads


def json_tree(text: str) -> SafeString | None:
    """The JSON document as nested <details> (objects and arrays, open for OPEN_DEPTH
    levels), or None when it does not parse (it is then shown as text)."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    budget = [JSON_MAX_NODES]
    parts: list[str] = []
    _json_node(value, 0, budget, parts)
    if budget[0] < 0:
        parts.append(f'<p class="meta">Shown up to {JSON_MAX_NODES} values; read the rest '
                     "as text.</p>")
    return mark_safe('<div class="json-tree">' + "".join(parts) + "</div>")


def _json_node(value, depth: int, budget: list, out: list) -> None:
    budget[0] -= 1
    if budget[0] < 0:
        out.append('<span class="j-more">…</span>')
        return
    if isinstance(value, (dict, list)) and value and depth < JSON_MAX_DEPTH:
        is_object = isinstance(value, dict)
        count = len(value)
        label = (f"{{ {count} key{'s' if count != 1 else ''} }}" if is_object
                 else f"[ {count} item{'s' if count != 1 else ''} ]")
        out.append(f'<details{" open" if depth < OPEN_DEPTH else ""}>'
                   f'<summary class="j-count">{label}</summary><ul>')
        entries = value.items() if isinstance(value, dict) else enumerate(value)
        for key, child in entries:
            if budget[0] < 0:
                break
            name = (f'<span class="j-key">{escape(json.dumps(key))}</span>: ' if is_object
                    else f'<span class="j-index">{key}</span>: ')
            out.append(f"<li>{name}")
            _json_node(child, depth + 1, budget, out)
            out.append("</li>")
        out.append("</ul></details>")
        return
    if isinstance(value, str):
        css = "j-str"
    elif isinstance(value, bool) or value is None:
        css = "j-lit"
    elif isinstance(value, (int, float)):
        css = "j-num"
    else:  # a container too deep, or empty
        css = "j-raw"
    shown = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    out.append(f'<span class="{css}">{escape(shown)}</span>')


def pretty_json(text: str) -> str | None:
    """The document indented (for the diff of two revisions), or None."""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False, sort_keys=True)
    except (ValueError, RecursionError):
        return None


# --- CSV -----------------------------------------------------------------------------------

CSV_MAX_COLUMNS = 50
CSV_MAX_CELL = 500  # characters shown of one cell


@dataclass
class Table:
    header: list
    rows: list
    more_rows: int = 0        # rows after the ones shown
    more_columns: int = 0     # columns after CSV_MAX_COLUMNS (in the widest row shown)
    error: str | None = None  # why reading stopped early, if it did


def lines(chunks, charset: str):
    """Text lines (with their endings) decoded incrementally from byte chunks."""
    decoder = codecs.getincrementaldecoder(charset)(errors="replace")
    carry = ""
    for chunk in chunks:
        text = carry + decoder.decode(chunk)
        parts = text.splitlines(keepends=True)
        carry = parts.pop() if parts and not parts[-1].endswith(("\n", "\r")) else ""
        yield from parts
    rest = carry + decoder.decode(b"", final=True)
    if rest:
        yield rest


def csv_table(text_lines, rows: int, delimiter: str = ",") -> Table:
    """The first `rows` data rows after the header, and how many rows follow them
    (counted by reading on through every line)."""
    table = Table(header=[], rows=[])
    reader = csv.reader(text_lines, delimiter=delimiter)
    try:
        for index, row in enumerate(reader):
            if index > rows:
                table.more_rows += 1
                continue
            table.more_columns = max(table.more_columns, len(row) - CSV_MAX_COLUMNS)
            cells = [cell if len(cell) <= CSV_MAX_CELL else cell[:CSV_MAX_CELL] + "…"
                     for cell in row[:CSV_MAX_COLUMNS]]
            if index == 0:
                table.header = cells
            else:
                table.rows.append(cells)
    except csv.Error as error:
        table.error = f"line {reader.line_num}: {error}"
    return table


def delimiter_of(media_type: str) -> str:
    return "\t" if parse_media_type(media_type)[0] == "text/tab-separated-values" else ","


# --- two revisions side by side -------------------------------------------------------------

CONTEXT_LINES = 3


@dataclass(frozen=True)
class DiffRow:
    tag: str            # "equal", "delete", "insert", "replace", or "skip" (lines elided)
    old_no: int | None
    old: str
    new_no: int | None
    new: str


def side_by_side(old: str, new: str) -> dict:
    """difflib's changes of `new` against `old`, line by line in two columns, each change
    with CONTEXT_LINES lines around it; the lines are plain text (escaped by the template)."""
    a, b = old.splitlines(), new.splitlines()
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    rows, added, removed, shown_to = [], 0, 0, 0
    for group in matcher.get_grouped_opcodes(CONTEXT_LINES):
        if group[0][1] > shown_to:
            rows.append(DiffRow("skip", None, "", None, ""))
        shown_to = group[-1][2]
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                rows += [DiffRow(tag, i + 1, a[i], j + 1, b[j])
                         for i, j in zip(range(i1, i2), range(j1, j2))]
                continue
            removed += i2 - i1
            added += j2 - j1
            for offset in range(max(i2 - i1, j2 - j1)):
                i, j = i1 + offset, j1 + offset
                rows.append(DiffRow(tag if i < i2 and j < j2 else
                                    ("delete" if i < i2 else "insert"),
                                    i + 1 if i < i2 else None, a[i] if i < i2 else "",
                                    j + 1 if j < j2 else None, b[j] if j < j2 else ""))
    if rows and shown_to < len(a):
        rows.append(DiffRow("skip", None, "", None, ""))
    return {"rows": rows, "added": added, "removed": removed, "same": a == b}
