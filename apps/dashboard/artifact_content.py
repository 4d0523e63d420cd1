"""The artifact reader's shell: an artifact's bytes for a viewer who may see it, verified
against the hash as they are read (apps/artifacts/blobs.py open_verified, §13.1), shown on
the artifact page by apps/dashboard/reader.py, or served raw from the content endpoint.

The raw bytes are served only from /g/<group>/artifacts/<hash>/content, with headers that
keep them from ever running on the dashboard's origin: `Content-Security-Policy: sandbox;
default-src 'none'` (a document opened from there has a unique origin, no script, no
plugin but the browser's PDF viewer, and loads nothing), `X-Content-Type-Options: nosniff`,
a Content-Type from reader.served_type (HTML, SVG and XML as text/plain), and a download
name from the manifest (reader.download_name)."""

from dataclasses import dataclass

from django.conf import settings
from django.http import HttpResponse
from django.utils.http import content_disposition_header

from apps.api.blob_views import ThreadedStreamingResponse
from apps.artifacts import blobs
from mission_weave.protocol.errors import ProtocolError

from . import reader

# The raw content's headers. Images are shown by <img> on the artifact page (a response's
# own CSP does not apply to an image embedded elsewhere, and the dashboard page's CSP
# allows img-src 'self'); opened on their own they are an image document, which the
# browser draws without fetching anything again. PDF may be framed by the dashboard
# (frame-ancestors 'self', X-Frame-Options SAMEORIGIN): Chromium refuses to show a PDF in
# an <iframe sandbox>, but shows it in a plain <iframe> whose response carries the CSP
# sandbox (docs/architecture.md, "The artifact reader").
CONTENT_CSP = "sandbox; default-src 'none'; frame-ancestors 'none'"
PDF_CSP = "sandbox; default-src 'none'; frame-ancestors 'self'"
# The dashboard pages that show agent content: scripts only from the dashboard's own
# static files, images and frames from its own endpoints, nothing from elsewhere. Inline
# styles stay allowed for htmx's indicator style (agent content never carries a style:
# the sanitizer drops every style attribute and element).
PAGE_CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
            "img-src 'self'; frame-src 'self'; object-src 'none'; base-uri 'none'; "
            "form-action 'self'; frame-ancestors 'none'")


class Unavailable(Exception):
    """The artifact is known but its bytes cannot be shown: never uploaded (NOT_FOUND) or
    no longer matching the hash (HASH_MISMATCH)."""

    def __init__(self, error: ProtocolError):
        super().__init__(error.message)
        self.code, self.message, self.status = error.code, error.message, error.http_status


def open_bytes(viewer, record: dict, now) -> blobs.Verified:
    """The artifact's bytes, verified against its hash before the first one is handed out
    (the viewer's membership of the artifact's Group was checked by the caller)."""
    try:
        return blobs.open_verified(record["hash"].removeprefix("sha256:"),
                                   viewer.principal.id, now)
    except ProtocolError as error:
        raise Unavailable(error) from error


def read_range(verified: blobs.Verified, start: int, end: int) -> bytes:
    """Bytes [start, end) of the verified blob, reading no further than `end`."""
    parts, position = [], 0
    try:
        for chunk in verified.chunks:
            following = position + len(chunk)
            if following > start:
                parts.append(chunk[max(0, start - position):max(0, end - position)])
            position = following
            if position >= end:
                break
    finally:
        verified.close()
    return b"".join(parts)


# --- the artifact page ----------------------------------------------------------------------

@dataclass
class Reading:
    """What the artifact page shows of the content."""
    kind: str
    media_type: str
    size: int
    download_name: str
    html: str | None = None      # rendered and sanitized (Markdown, JSON tree)
    text: str | None = None      # shown escaped in <pre> (text, source)
    table: reader.Table | None = None
    page: reader.Window | None = None
    as_text: bool = False        # a structured kind shown as its source text on request
    note: str | None = None      # why it is shown the way it is
    unavailable: str | None = None

    @property
    def paged(self) -> bool:
        return self.page is not None and self.page.count > 1


def reading(viewer, record: dict, now, page: int = 1, as_text: bool = False) -> Reading:
    manifest = record["manifest"]
    media_type = manifest["mediaType"]
    kind = reader.kind_of(media_type)
    shown = Reading(kind, media_type, manifest["size"], reader.download_name(manifest),
                    as_text=as_text and kind in (reader.MARKDOWN, reader.JSON, reader.CSV))
    if kind not in reader.TEXT_KINDS:
        return shown  # images, PDF and binaries come from the content endpoint
    charset = reader.charset_of(media_type)
    try:
        verified = open_bytes(viewer, record, now)
        if kind == reader.CSV and not shown.as_text:
            return _table(shown, verified, media_type, charset)
        if kind == reader.JSON and not shown.as_text:
            if verified.size > settings.MW_READER_JSON_MAX_BYTES:
                shown.note = (f"Larger than {settings.MW_READER_JSON_MAX_BYTES} bytes "
                              "(MW_READER_JSON_MAX_BYTES): shown as text, page by page.")
            else:
                tree = reader.json_tree(read_range(verified, 0, verified.size)
                                        .decode(charset, errors="replace"))
                if tree is not None:
                    shown.html = tree
                    return shown
                shown.note = "This is not valid JSON: shown as text."
                verified = open_bytes(viewer, record, now)  # read again, for the page
        return _page(shown, verified, page, charset)
    except Unavailable as error:
        shown.unavailable = f"{error.code}: {error.message}"
        return shown


def _page(shown: Reading, verified: blobs.Verified, number: int, charset: str) -> Reading:
    window = reader.window(verified.size, settings.MW_READER_PAGE_BYTES, number)
    text = reader.page_text(read_range(verified, window.start, window.end), window, charset)
    shown.page = window
    if shown.kind == reader.MARKDOWN and not shown.as_text:
        shown.html = reader.markdown(text)
    else:
        shown.text = text
    return shown


def _table(shown: Reading, verified: blobs.Verified, media_type: str, charset: str) -> Reading:
    try:
        shown.table = reader.csv_table(reader.lines(verified.chunks, charset),
                                       settings.MW_READER_CSV_ROWS,
                                       reader.delimiter_of(media_type))
    finally:
        verified.close()
    return shown


def text_of(viewer, record: dict, now, limit: int) -> tuple[str | None, bool]:
    """The first `limit` bytes of a textual artifact as text (JSON re-indented), for the
    comparison of two submissions: (text, whether it was cut), or (None, False) for a kind
    that is not text or bytes that cannot be read."""
    media_type = record["manifest"]["mediaType"]
    kind = reader.kind_of(media_type)
    if kind not in reader.TEXT_KINDS:
        return None, False
    try:
        verified = open_bytes(viewer, record, now)
    except Unavailable:
        return None, False
    cut = verified.size > limit
    text = read_range(verified, 0, min(limit, verified.size)).decode(
        reader.charset_of(media_type), errors="replace")
    if kind == reader.JSON and not cut:
        text = reader.pretty_json(text) or text
    return text, cut


# --- the content endpoint -------------------------------------------------------------------

def response(viewer, record: dict, now, download: bool):
    """The raw bytes, inline (an image, a PDF, text as text/plain) or as an attachment."""
    manifest = record["manifest"]
    kind = reader.kind_of(manifest["mediaType"])
    try:
        verified = open_bytes(viewer, record, now)
    except Unavailable as error:
        return refusal(error.status, f"{error.code}: {error.message}\n")
    inline = not download and kind != reader.BINARY
    answer = ThreadedStreamingResponse(
        verified.chunks, content_type=reader.served_type(manifest["mediaType"])
        if inline else "application/octet-stream")
    answer._resource_closers.append(verified.close)
    answer["Content-Length"] = str(verified.size)
    answer["Content-Disposition"] = content_disposition_header(
        not inline, reader.download_name(manifest))
    answer["ETag"] = f'"{verified.name}"'
    # The bytes of a hash never change; who may read them can, so only the viewer's own
    # browser keeps them, and not for long.
    answer["Cache-Control"] = "private, max-age=3600"
    return guarded(answer, framed=inline and kind == reader.KIND_PDF)


def refusal(status: int, text: str) -> HttpResponse:
    return guarded(HttpResponse(text, status=status, content_type="text/plain; charset=utf-8"))


def guarded(answer, framed: bool = False):
    answer["Content-Security-Policy"] = PDF_CSP if framed else CONTENT_CSP
    answer["X-Content-Type-Options"] = "nosniff"
    answer["Cross-Origin-Resource-Policy"] = "same-origin"
    answer["Referrer-Policy"] = "no-referrer"
    answer["X-Frame-Options"] = "SAMEORIGIN" if framed else "DENY"
    return answer
