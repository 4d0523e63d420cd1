"""Log records as JSON lines (MW_LOG_FORMAT=json), and the request id every record of a
request carries.

Loaded by Django's LOGGING before the apps are, so it imports nothing of ours.
"""

import logging
from contextvars import ContextVar

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter as _JsonFormatter

# The id of the HTTP request this thread is serving (apps/operations/middleware.py).
REQUEST_ID: ContextVar[str | None] = ContextVar("mw_request_id", default=None)


_CONTROL = {code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F)}


def printable(text: str) -> str:
    """`text` with control characters escaped, for a message of the plain format: a path
    or a command type from a client must not start a line of its own."""
    return text.translate(_CONTROL)


class JsonFormatter(_JsonFormatter):
    """{"time", "level", "logger", "message", ...the record's extra fields}.

    Django's own request records (django.request) carry the HttpRequest as `request`,
    whose text would include the query string: it is left out."""

    def __init__(self, fmt=("levelname", "name", "message"), *args, **kwargs):
        kwargs.setdefault("reserved_attrs", [*RESERVED_ATTRS, "request"])
        kwargs.setdefault("rename_fields", {"levelname": "level", "name": "logger"})
        kwargs.setdefault("timestamp", "time")
        super().__init__(list(fmt), *args, **kwargs)

    def process_log_record(self, log_data):
        # The time first, where a person reading the lines looks for it.
        return {"time": log_data.pop("time", None), **log_data}


class RequestIdFilter(logging.Filter):
    """Adds `requestId` to each record logged while a request is served."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "requestId"):
            request_id = REQUEST_ID.get()
            if request_id is not None:
                record.requestId = request_id
        return True
