"""Sending the outbox's mails, each exactly once as far as this side can tell.

A mail is claimed by compare-and-set (pending -> sending, or a claim older than
MW_NOTIFY_CLAIM_SECONDS taken again: its sender died or the mail server failed), checked,
sent, and marked sent (healthchecks' sendalerts: a second sender that loses the claim
moves on). A sender killed after the server took the mail and before it was marked sent
sends it again later with the same Message-ID, so the mail is recognisably the same
message (a receiving server or client that deduplicates by Message-ID shows it once).

Checked at send time, in this order, each failure recorded on the mail as `dropped` with
its reason: the person is still a member of the Group (a removed member's pending mail is
dropped), the decision still waits (a notice or reminder), the person's choice for the
Group (every event / daily digest / nothing), and an e-mail address to send to."""

import logging
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection

from apps.identity.models import Membership

from . import messages
from .models import DIGEST, EVERY, NOTHING, Mail, Preference, Wait

log = logging.getLogger(__name__)


def send(mail_ids, now) -> dict:
    """Send each of these mails that can be claimed; {sent, dropped, failed} counts."""
    counts = {"sent": 0, "dropped": 0, "failed": 0}
    for mail_id in mail_ids:
        mail = _claim(mail_id, now)
        if mail is not None:
            counts[_deliver(mail, now)] += 1
    return counts


def unsent(now, limit: int = 500) -> list[int]:
    """Mails pending, or claimed too long ago and not sent: beat's catch_up sends them."""
    stale = now - timedelta(seconds=settings.MW_NOTIFY_CLAIM_SECONDS)
    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM notify_mail WHERE state = 'pending' OR (state = "
                       "'sending' AND claimed_at < %s) ORDER BY created_at, id LIMIT %s",
                       [stale, limit])
        return [row[0] for row in cursor.fetchall()]


def choice(group_id: str, principal: str) -> str:
    """The person's choice for the Group; every event unless they chose otherwise."""
    return Preference.objects.filter(group_id=group_id, principal=principal).values_list(
        "choice", flat=True).first() or EVERY


def _claim(mail_id: int, now) -> Mail | None:
    stale = now - timedelta(seconds=settings.MW_NOTIFY_CLAIM_SECONDS)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE notify_mail SET state = 'sending', claimed_at = %s, "
                       "attempts = attempts + 1 WHERE id = %s AND (state = 'pending' OR "
                       "(state = 'sending' AND claimed_at < %s)) RETURNING id",
                       [now, mail_id, stale])
        if cursor.fetchone() is None:
            return None  # sent, dropped, or another sender has it
    return Mail.objects.get(id=mail_id)


def _deliver(mail: Mail, now) -> str:
    why = _why_not(mail)
    if why is not None:
        _finish(mail, Mail.DROPPED, reason=why)
        return "dropped"
    user = get_user_model().objects.filter(username=mail.principal.removeprefix("user:")).first()
    address = (user.email if user else "").strip()
    if not address:
        _finish(mail, Mail.DROPPED, reason="no e-mail address: they can set one on the "
                                           "dashboard's Notifications page")
        return "dropped"
    message = messages.build(mail, address)
    if message is None:  # a digest with nothing left in it
        _finish(mail, Mail.DROPPED, reason="nothing waits on them any more")
        return "dropped"
    try:
        message.send()
    except Exception as error:  # the mail server refused or is away: sent again later
        log.warning("mail %s to %s not sent (attempt %s): %s", mail.id, mail.principal,
                    mail.attempts, type(error).__name__)
        if mail.attempts >= settings.MW_NOTIFY_ATTEMPTS:
            _finish(mail, Mail.DROPPED, reason=f"the mail server refused it "
                                               f"{mail.attempts} times ({type(error).__name__})")
        return "failed"
    _finish(mail, Mail.SENT, address=address, sent_at=now)
    return "sent"


def _why_not(mail: Mail) -> str | None:
    if not Membership.objects.filter(group_id=mail.group_id, principal=mail.principal,
                                     active=True).exists():
        return "no longer a member of the Group"
    if mail.wait_id is not None and not Wait.objects.filter(
            id=mail.wait_id, resolved_at__isnull=True).exists():
        return "decided before the mail went out"
    chosen = choice(mail.group_id, mail.principal)
    if chosen == NOTHING:
        return "they chose no mail for this Group"
    if chosen == DIGEST and mail.kind != Mail.DIGEST:
        return "they chose the daily digest for this Group"
    if chosen == EVERY and mail.kind == Mail.DIGEST:
        return "they chose a mail for each decision for this Group"
    return None


def _finish(mail: Mail, state: str, **fields) -> None:
    # Only our own claim: a mail another sender took again meanwhile is theirs to finish.
    Mail.objects.filter(id=mail.id, state=Mail.SENDING, claimed_at=mail.claimed_at).update(
        state=state, **fields)
