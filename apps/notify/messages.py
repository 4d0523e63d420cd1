"""The mails themselves: a text part and an HTML part from templates/notify/, each with the
absolute link to the decision (MW_PUBLIC_URL + the dashboard's page + the section's
anchor) and what it is about.

Titles, goals and reasons are written by agents: the HTML part escapes them (Django's
autoescape), the text part is text, and the subject keeps only their first line (a header
cannot hold a line break) and its first SUBJECT_TITLE characters."""

from urllib.parse import urlsplit

from django.conf import settings
from django.core.mail import EmailMultiAlternatives
from django.template.loader import render_to_string
from django.urls import reverse

from mission_weave.core.waiting import ANCHORS

from .models import Mail, Wait

SUBJECT_TITLE = 80
HEADINGS = {"execution-approval": "Execution approval", "final-approval": "Final Approval",
            "approval-refused": "Final Approval refused", "review": "A result to review",
            "unblock": "A blocked WorkItem", "ambiguity": "An open ambiguity",
            "execution-refused": "Execution refused", "re-offer": "Work without an owner",
            "proposals": "Work proposed"}


def link(wait: Wait) -> str:
    """The absolute address of the decision on its dashboard page."""
    if wait.work_item_id:
        path = reverse("dashboard:work_item", args=[wait.group_id, wait.work_item_id])
    else:
        path = reverse("dashboard:mission", args=[wait.group_id, wait.mission_id])
    return f"{settings.MW_PUBLIC_URL}{path}#{ANCHORS[wait.kind]}"


def message_id(mail: Mail) -> str:
    """The same for every attempt at the same mail: a resend is recognisably it."""
    host = urlsplit(settings.MW_PUBLIC_URL).hostname or "localhost"
    return f"<mw-mail-{mail.id}.{mail.group_id}@{host}>"


def build(mail: Mail, address: str) -> EmailMultiAlternatives | None:
    """The message for `mail`, or None for a digest with nothing in it."""
    if mail.kind == Mail.DIGEST:
        waits = list(Wait.objects.filter(group_id=mail.group_id, principal=mail.principal,
                                         resolved_at__isnull=True).order_by("opened_at", "id"))
        if not waits:
            return None
        context = {"entries": [_entry(w) for w in waits], "group_id": mail.group_id,
                   "day": mail.day, "count": len(waits)}
        subject = f"[MissionWeave] {len(waits)} decision(s) wait on you in {mail.group_id}"
        template = "notify/digest"
    else:
        wait = Wait.objects.get(id=mail.wait_id)
        context = {"entry": _entry(wait), "reminder": mail.kind == Mail.REMINDER,
                   "number": mail.number, "group_id": mail.group_id}
        prefix = "Reminder: " if mail.kind == Mail.REMINDER else ""
        subject = f"[MissionWeave] {prefix}{HEADINGS[wait.kind]}: {_one_line(wait.title)}"
        template = "notify/wait"
    context["preferences"] = f"{settings.MW_PUBLIC_URL}{reverse('dashboard:notifications')}"
    message = EmailMultiAlternatives(
        subject=subject, body=render_to_string(f"{template}.txt", context),
        to=[address], headers={"Message-ID": message_id(mail),
                               "X-MissionWeave-Group": mail.group_id,
                               "Auto-Submitted": "auto-generated"})
    message.attach_alternative(render_to_string(f"{template}.html", context), "text/html")
    return message


def _entry(wait: Wait) -> dict:
    return {"heading": HEADINGS[wait.kind], "what": wait.what, "title": wait.title,
            "mission_id": wait.mission_id, "item_id": wait.work_item_id, "since": wait.since,
            "link": link(wait), "kind": wait.kind}


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= SUBJECT_TITLE else line[:SUBJECT_TITLE - 1] + "…"
