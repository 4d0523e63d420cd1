"""The caught mail: with no EMAIL_HOST, Django's file backend writes each mail under
EMAIL_FILE_PATH (settings.py), and the operators' Mail page (/mail/) reads it back here,
so that the try-out's mail can be read without a mail server."""

import email
import email.policy
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

SEPARATOR = b"\n" + b"-" * 79 + b"\n"  # what the file backend writes after each message
FILE_BACKEND = "django.core.mail.backends.filebased.EmailBackend"


@dataclass(frozen=True)
class Caught:
    message_id: str
    subject: str
    to: str
    sender: str
    date: str
    text: str
    html: str


def catching() -> bool:
    return settings.EMAIL_BACKEND == FILE_BACKEND


def caught(limit: int = 100) -> list[Caught]:
    """The newest `limit` caught mails, newest first."""
    folder = Path(settings.EMAIL_FILE_PATH)
    if not folder.is_dir():
        return []
    found: list[Caught] = []
    for path in sorted(folder.glob("*.log"), key=lambda p: (p.stat().st_mtime, p.name),
                       reverse=True):
        for raw in reversed(path.read_bytes().split(SEPARATOR)):
            if raw.strip():
                found.append(_parse(raw))
                if len(found) >= limit:
                    return found
    return found


def _parse(raw: bytes) -> Caught:
    message = email.message_from_bytes(raw, policy=email.policy.default)
    text = message.get_body(preferencelist=("plain",))
    html = message.get_body(preferencelist=("html",))
    return Caught(message_id=str(message.get("Message-ID", "")),
                  subject=str(message.get("Subject", "")), to=str(message.get("To", "")),
                  sender=str(message.get("From", "")), date=str(message.get("Date", "")),
                  text=text.get_content() if text is not None else "",
                  html=html.get_content() if html is not None else "")
