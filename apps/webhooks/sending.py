"""One attempt to send a delivery: claim it, POST it signed, log the attempt, decide what
comes next (delivered on a 2xx; else another attempt after a backoff, or failed after
MW_WEBHOOK_MAX_ATTEMPTS).

The claim is a compare-and-set on the delivery's row, so two workers never send it at
once; it holds for claim_seconds(), after which a worker that died mid-send is taken
over (beat's catch_up re-sends it). The POST runs outside any
transaction. A receiver may still see a delivery twice (its 2xx lost on the way back,
or a worker killed between the answer and the write): it has the same id each time,
MissionWeave-Webhook-Id, to deduplicate on."""

import logging
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta

import httpx
from django.conf import settings
from django.db import connection, transaction

from mission_weave.protocol.errors import ProtocolError

from . import addresses, signing
from .models import Attempt, Delivery, Webhook

log = logging.getLogger(__name__)

DELIVERIES, ATTEMPTS = Delivery._meta.db_table, Attempt._meta.db_table
EXCERPT = 500  # bytes of a response body kept with an attempt
USER_AGENT = "MissionWeave-Webhooks/1"


@dataclass(frozen=True)
class Outcome:
    state: str  # delivered | pending | failed | skipped (not claimed: done, taken, gone, not due)
    retry_in: float | None = None  # seconds until the next attempt, when pending


def claim_seconds() -> int:
    """How long a claim holds: connecting, sending and reading the answer each have the
    timeout, and a margin. A worker still sending after it may be overtaken by another
    (the receiver then sees the id twice); one that died is overtaken after it."""
    return 3 * settings.MW_WEBHOOK_TIMEOUT_SECONDS + 5


def backoff(attempts: int) -> float:
    """Seconds before attempt attempts + 1: BACKOFF, doubling, at most BACKOFF_MAX."""
    base, cap = settings.MW_WEBHOOK_BACKOFF_SECONDS, settings.MW_WEBHOOK_BACKOFF_MAX_SECONDS
    return float(min(cap, base * 2 ** max(0, attempts - 1)))


def attempt(delivery_id: str, now) -> Outcome:
    claim = uuid.uuid4().hex
    until = now + timedelta(seconds=claim_seconds())
    with connection.cursor() as cursor:
        # Due (a second's slack: the worker that counted the retry's countdown down may
        # have a clock a little ahead of this one's), or claimed by a worker whose claim
        # ran out.
        cursor.execute(
            f"UPDATE {DELIVERIES} SET state = 'sending', claim = %s, claimed_until = %s "
            f"WHERE id = %s AND ((state = 'pending' AND next_attempt_at <= %s) "
            f"OR (state = 'sending' AND claimed_until < %s)) "
            f"RETURNING group_id, webhook_id, body, attempts",
            [claim, until, delivery_id, now + timedelta(seconds=1), now])
        row = cursor.fetchone()
    if row is None:
        return Outcome("skipped")
    group_id, webhook_id, body, attempts = row
    webhook = Webhook.objects.filter(id=webhook_id, group_id=group_id).first()
    if webhook is None:  # removed meanwhile (its deliveries go with it)
        return Outcome("skipped")
    started, clock = now, time.monotonic()
    status, error, excerpt = post(webhook, delivery_id, body.encode(), now)
    duration_ms = int((time.monotonic() - clock) * 1000)
    return _record(delivery_id, group_id, claim, attempts + 1, started, duration_ms,
                   status, error, excerpt)


def post(webhook: Webhook, delivery_id: str, body: bytes, now) -> tuple:
    """(HTTP status or None, error text, the response body's first EXCERPT bytes)."""
    timestamp = int(now.timestamp())
    keys = [webhook.secret]
    if webhook.previous_secret and webhook.previous_secret_until and \
            webhook.previous_secret_until > now:
        keys.append(webhook.previous_secret)
    try:
        target = addresses.resolve(webhook.url)  # checked again: DNS may have changed
    except ProtocolError as refused:
        return None, f"refused: {refused.message}", ""
    headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT,
               signing.ID: delivery_id, signing.TIMESTAMP: str(timestamp),
               signing.SIGNATURE: signing.header(keys, timestamp, body),
               "Host": _host_header(target)}
    extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
    try:
        # Connect to the address that was checked, naming the host for HTTP and TLS.
        url = httpx.URL(webhook.url).copy_with(host=target.address)
        with httpx.Client(timeout=settings.MW_WEBHOOK_TIMEOUT_SECONDS,
                          follow_redirects=False, trust_env=False) as client, \
                client.stream("POST", url, content=body, headers=headers,
                              extensions=extensions) as response:
            excerpt = b""
            for chunk in response.iter_bytes():
                excerpt += chunk
                if len(excerpt) >= EXCERPT:
                    break
            return response.status_code, "", excerpt[:EXCERPT].decode("utf-8", "replace")
    except Exception as failure:
        # Any failure is this attempt's, logged with it: raising would leave the delivery
        # claimed, to be taken over and fail the same way without a trace.
        return None, f"{type(failure).__name__}: {failure}"[:500], ""


def _host_header(target: addresses.Target) -> str:
    host = f"[{target.host}]" if ":" in target.host else target.host
    default = 443 if target.scheme == "https" else 80
    return host if target.port == default else f"{host}:{target.port}"


def _record(delivery_id, group_id, claim, number, started, duration_ms, status, error,
            excerpt) -> Outcome:
    ok = status is not None and 200 <= status < 300
    done = started + timedelta(milliseconds=duration_ms)
    if ok:
        state, retry_in = "delivered", None
    elif number >= settings.MW_WEBHOOK_MAX_ATTEMPTS:
        state, retry_in = "failed", None
    else:
        state, retry_in = "pending", backoff(number)
    due = done + timedelta(seconds=retry_in or 0)
    with transaction.atomic(), connection.cursor() as cursor:
        # Only the claim's holder writes: a worker whose claim ran out and was taken over
        # leaves the row to the one that took it.
        cursor.execute(
            f"UPDATE {DELIVERIES} SET state = %s, attempts = %s, next_attempt_at = %s, "
            f"claim = '', claimed_until = NULL, delivered_at = %s "
            f"WHERE id = %s AND claim = %s AND state = 'sending'",
            [state, number, due, done if ok else None, delivery_id, claim])
        if cursor.rowcount != 1:
            log.warning("webhook delivery %s: claim lost before attempt %s was recorded",
                        delivery_id, number)
            return Outcome("skipped")
        cursor.execute(
            f"INSERT INTO {ATTEMPTS} (group_id, delivery_id, number, started_at, duration_ms, "
            f"status_code, error, response_excerpt) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            [group_id, delivery_id, number, started, duration_ms, status, error[:500],
             excerpt.replace("\x00", "")[:EXCERPT]])
    log.info("webhook delivery %s attempt %s: %s -> %s", delivery_id, number,
             status if status is not None else error, state)
    return Outcome(state, retry_in)
