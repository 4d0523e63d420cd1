"""Outgoing webhooks (issue 28) against a real HTTP receiver that checks each delivery's
signature and timestamp as docs/operations.md tells a receiver to, and deduplicates by
the delivery's id.

The first test runs it all as in production: commands through the pipeline, the commit's
hint sent to Redis by the process's thread, a real Celery worker that fans the log out
and sends with retries and backoff. The others drive the tasks directly (eager Celery,
or the functions), each on one property: filtering, the cursor's start, a lost send, a
lost answer, the claim, the addresses refused, the Slack text."""

import itertools
import json
import os
import signal
import threading
import time
import uuid
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from apps.ledger.hints import GroupHints
from apps.ledger.models import Event
from apps.webhooks import addresses, outbox, payloads, registry, sending, signing, tasks
from apps.webhooks.models import Attempt, Delivery, Webhook
from mission_weave.celery import app as celery_app
from mission_weave.protocol.errors import ProtocolError
from tests.faults.procs import signal_group, tail, wait_until
from tests.integration.celery_worker import celery_worker
from tests.support import Scenario


class Receiver:
    """An HTTP server on 127.0.0.1 that answers `statuses` in turn (then 200), checks
    every request's signature with `secret`, and accepts each delivery id once."""

    def __init__(self, statuses=(), delay: float = 0.0):
        self.secret = ""
        self.statuses = list(statuses)
        self.delay = delay
        self.requests: list[dict] = []
        self.accepted: dict[str, dict] = {}
        self.arrived = threading.Event()
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.took(self, body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def took(self, handler, body: bytes) -> None:
        signed = signing.verify(self.secret, handler.headers.get(signing.SIGNATURE, ""),
                                body, time.time())
        delivery_id = handler.headers.get(signing.ID)
        with self._lock:
            self.requests.append({"id": delivery_id, "signed": signed, "body": body,
                                  "headers": dict(handler.headers)})
            status = self.statuses.pop(0) if self.statuses else 200
            if signed and status == 200 and delivery_id not in self.accepted:
                self.accepted[delivery_id] = json.loads(body)
        self.arrived.set()
        if self.delay:
            time.sleep(self.delay)
        answer = b"ok" if status == 200 else b"not now"
        try:
            handler.send_response(status if signed else 401)
            handler.send_header("Content-Length", str(len(answer)))
            handler.end_headers()
            handler.wfile.write(answer)
        except OSError:  # the sender is gone (killed): its answer is lost
            pass

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    made = []

    def make(statuses=(), delay: float = 0.0) -> Receiver:
        made.append(Receiver(statuses, delay))
        return made[-1]

    yield make
    for r in made:
        r.close()


@pytest.fixture
def private_allowed(settings):
    settings.MW_WEBHOOK_ALLOW_PRIVATE = True  # the receiver is on 127.0.0.1


def add(s: Scenario, rec: Receiver, events=(), format_="json") -> Webhook:
    webhook, secret = registry.create(s.world.group.id, rec.url, list(events), format_,
                                      s.owner.principal, timezone.now())
    rec.secret = secret
    return webhook


# --- as in production: a real worker, retries with backoff -----------------------------------

@pytest.fixture
def broker(settings):
    """Celery as in production: tasks go to Redis, not run inline; the webhooks' on a
    queue of this test's own (MW_WEBHOOK_QUEUE), which its worker alone takes: tasks
    other tests left in the default queue (each commit hints the notifications too) do
    not stand before them. Yields the worker's arguments and environment."""
    if not os.environ.get("REDIS_URL"):
        pytest.skip("needs REDIS_URL as the broker")
    settings.MW_WEBHOOK_QUEUE = f"mw-webhooks-{uuid.uuid4().hex[:12]}"
    previous = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = False
    yield ("-Q", settings.MW_WEBHOOK_QUEUE), {"MW_WEBHOOK_QUEUE": settings.MW_WEBHOOK_QUEUE,
                                              "MW_WEBHOOK_ALLOW_PRIVATE": "1"}
    celery_app.conf.task_always_eager = previous


def test_a_failing_receiver_gets_the_event_once_signed_after_two_retries(
        transactional_db, tmp_path, receiver, private_allowed, broker):
    rec = receiver(statuses=[500, 500])
    s = Scenario()
    webhook = add(s, rec, events=["work.authorized"])
    args, env = broker
    with celery_worker(tmp_path, *args, **env, MW_WEBHOOK_BACKOFF_SECONDS="1",
                       MW_WEBHOOK_MAX_ATTEMPTS="5") as worker:
        item_id = s.authorize()  # a command through the pipeline: its commit hints
        s.offer(item_id)  # work.offered: not a type this webhook gets
        wait_until(lambda: Delivery.objects.filter(webhook_id=webhook.id,
                                                   state="delivered").exists(),
                   40, "the delivery", process=worker, logs=[tmp_path / "celery.log"])

    authorized = Event.objects.get(group_id=s.world.group.id, type="work.authorized")
    assert [r["signed"] for r in rec.requests] == [True, True, True]
    ids = {r["id"] for r in rec.requests}
    assert len(ids) == 1 and list(rec.accepted) == list(ids)  # one id, accepted once
    (delivery_id,) = ids
    assert delivery_id == payloads.delivery_id(webhook.id, authorized.event_id)
    document = rec.accepted[delivery_id]
    assert document["id"] == delivery_id and document["webhookId"] == webhook.id
    assert document["event"]["id"] == authorized.event_id
    assert document["event"]["workItemId"] == item_id
    assert document["event"]["hash"] == authorized.hash
    # The same bytes each time, signed each time with the time of its attempt.
    assert len({r["body"] for r in rec.requests}) == 1

    delivery = Delivery.objects.get(id=delivery_id)
    assert (delivery.state, delivery.attempts) == ("delivered", 3)
    attempts = list(Attempt.objects.filter(delivery_id=delivery_id).order_by("number"))
    assert [(a.number, a.status_code) for a in attempts] == [(1, 500), (2, 500), (3, 200)]
    assert [a.response_excerpt for a in attempts] == ["not now", "not now", "ok"]
    # The backoff: at least 1 s, then 2 s, between the attempts.
    gaps = [(b.started_at - a.started_at).total_seconds() for a, b in itertools.pairwise(attempts)]
    assert gaps[0] >= 0.9 and gaps[1] >= 1.9, gaps
    assert Delivery.objects.filter(webhook_id=webhook.id).count() == 1
    assert Webhook.objects.get(id=webhook.id).cursor == s.world.head


def test_a_hint_lost_with_its_process_is_delivered_by_beats_catch_up(
        transactional_db, tmp_path, receiver, private_allowed, broker, monkeypatch):
    rec = receiver()
    s = Scenario()
    webhook = add(s, rec, events=["work.authorized"])
    # The web process dies after the commit, before its thread sends the hint.
    monkeypatch.setattr(tasks.HINTS, "put", lambda group_id: None)
    item_id = s.authorize()
    assert Webhook.objects.get(id=webhook.id).cursor < s.world.head
    args, env = broker
    with celery_worker(tmp_path, "--beat", *args, **env,
                       MW_WEBHOOK_CATCH_UP_SECONDS="1") as worker:
        wait_until(lambda: rec.accepted, 40, "the delivery", process=worker,
                   logs=[tmp_path / "celery.log"])
    (document,) = rec.accepted.values()
    assert document["event"]["type"] == "work.authorized"
    assert document["event"]["workItemId"] == item_id
    assert len(rec.requests) == 1


@pytest.mark.slow
def test_a_worker_killed_mid_send_is_overtaken_and_the_resend_has_the_same_id(
        transactional_db, tmp_path, receiver, private_allowed, broker, settings):
    # The receiver stores the delivery, but the worker is killed before its answer
    # arrives: the claim runs out, catch_up sends again, the receiver sees the same id.
    settings.MW_WEBHOOK_TIMEOUT_SECONDS = 2
    rec = receiver(delay=1.5)
    s = Scenario()
    webhook = add(s, rec, events=["work.authorized"])
    args, env = broker
    with celery_worker(tmp_path, *args, **env, MW_WEBHOOK_TIMEOUT_SECONDS="2") as worker:
        s.authorize()
        assert rec.arrived.wait(40), tail(tmp_path / "celery.log")
        signal_group(worker, signal.SIGKILL)
        worker.wait(10)
    (delivery,) = Delivery.objects.filter(webhook_id=webhook.id)
    assert (delivery.state, delivery.attempts) == ("sending", 0)  # claimed, never recorded
    assert list(rec.accepted) == [delivery.id]

    rec.delay = 0
    celery_app.conf.task_always_eager = True  # the next beat's catch_up, here
    assert tasks.catch_up.apply().get()["deliveries"] == 0  # the claim still holds
    wait_until(lambda: Delivery.objects.get(id=delivery.id).claimed_until < timezone.now(),
               sending.claim_seconds() + 5, "the claim to run out")
    assert tasks.catch_up.apply().get()["deliveries"] == 1
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts) == ("delivered", 1)
    assert [r["id"] for r in rec.requests] == [delivery.id, delivery.id]
    assert list(rec.accepted) == [delivery.id]  # once


# --- the outbox: which events, from where -----------------------------------------------------

def test_a_webhook_gets_its_types_from_its_creation_on(db, receiver, private_allowed, eager):
    rec, rec_chosen = receiver(), receiver()
    s = Scenario()
    before = s.world.head
    everything = add(s, rec)
    chosen = add(s, rec_chosen, events=["work.offered", "work.authorized"])
    item_id = s.authorize()
    s.offer(item_id)
    s.accept(item_id)

    for webhook in (everything, chosen):
        tasks.fan_out_group.apply(args=[s.world.group.id])  # no commit here: no hint
        assert Webhook.objects.get(id=webhook.id).cursor == s.world.head
    got = {w.id: list(Delivery.objects.filter(webhook_id=w.id).order_by("sequence")
                      .values_list("event_type", flat=True)) for w in (everything, chosen)}
    assert got[chosen.id] == ["work.authorized", "work.offered"]
    logged = list(Event.objects.filter(group_id=s.world.group.id, sequence__gt=before)
                  .order_by("sequence").values_list("type", flat=True))
    assert got[everything.id] == logged  # mission.created (before it) is not among them
    assert "mission.created" not in logged
    assert [json.loads(r["body"])["type"] for r in rec.requests] == logged
    assert [json.loads(r["body"])["type"] for r in rec_chosen.requests] == got[chosen.id]
    assert all(r["signed"] for r in rec.requests + rec_chosen.requests)

    # Fanned out again: nothing new, nothing sent twice.
    tasks.fan_out_group.apply(args=[s.world.group.id])
    assert Delivery.objects.filter(group_id=s.world.group.id).count() == len(logged) + 2
    assert len(rec.requests) + len(rec_chosen.requests) == len(logged) + 2


def test_a_fan_out_takes_bounded_batches_and_says_more_is_left(db, settings, receiver,
                                                               private_allowed):
    settings.MW_WEBHOOK_BATCH = 2
    rec = receiver()
    s = Scenario()
    webhook = add(s, rec)
    s.authorize()
    s.authorize()
    s.authorize()
    made, more = outbox.fan_out(webhook.group_id, webhook.id, timezone.now())
    assert (len(made), more) == (2, True)
    made, more = outbox.fan_out(webhook.group_id, webhook.id, timezone.now())
    assert (len(made), more) == (1, False)
    assert Webhook.objects.get(id=webhook.id).cursor == s.world.head


def test_events_committed_while_a_fan_out_holds_the_webhook_are_not_left_behind(
        transactional_db, receiver, private_allowed, monkeypatch):
    # Fan-out A holds the webhook's row; an event commits and its own fan-out (B) skips
    # the locked row. A, after its commit, sees the head moved and takes that event too.
    rec = receiver()
    s = Scenario()
    webhook = add(s, rec, events=["work.authorized"])
    monkeypatch.setattr(tasks.HINTS, "put", lambda group_id: None)  # no other fan-out
    monkeypatch.setattr(tasks, "_enqueue", lambda task, *args: None)  # made, not sent
    s.authorize()
    holding, go = threading.Event(), threading.Event()
    read = outbox._events

    def slow_read(*args):
        found = read(*args)
        if not holding.is_set():
            holding.set()
            assert go.wait(10)
        return found

    monkeypatch.setattr(outbox, "_events", slow_read)
    made: list = []

    def fan_out_a():
        try:
            made.append(tasks._fan_out(webhook.group_id, webhook.id))
        finally:
            connection.close()

    a = threading.Thread(target=fan_out_a)
    a.start()
    assert holding.wait(10)
    s.authorize()  # committed while A holds the webhook
    assert outbox.fan_out(webhook.group_id, webhook.id, timezone.now()) == ([], False)  # B skips
    go.set()
    a.join(10)
    assert made == [2]
    assert Delivery.objects.filter(webhook_id=webhook.id).count() == 2
    assert Webhook.objects.get(id=webhook.id).cursor == s.world.head


def test_a_send_lost_after_the_commit_is_sent_by_catch_up(db, settings, receiver,
                                                          private_allowed, eager):
    # The crash between commit and send: the deliveries are made, nothing sends them.
    settings.MW_WEBHOOK_CATCH_UP_SECONDS = 0
    rec = receiver()
    s = Scenario()
    webhook = add(s, rec, events=["work.authorized"])
    s.authorize()
    made, _ = outbox.fan_out(webhook.group_id, webhook.id, timezone.now())
    assert len(made) == 1 and rec.requests == []

    assert tasks.catch_up.apply().get() == {"webhooks": 0, "deliveries": 1, "pruned": 0}
    assert list(rec.accepted) == made
    # A webhook behind its Group (its hint lost): catch_up fans it out and sends.
    s.authorize()
    assert tasks.catch_up.apply().get() == {"webhooks": 1, "deliveries": 0, "pruned": 0}
    assert len(rec.accepted) == 2
    assert tasks.catch_up.apply().get() == {"webhooks": 0, "deliveries": 0, "pruned": 0}


def test_finished_deliveries_are_forgotten_after_their_days_and_not_sent_again(
        db, settings, receiver, private_allowed, eager):
    settings.MW_WEBHOOK_KEEP_DAYS = 30
    rec = receiver()
    s = Scenario()
    webhook = add(s, rec, events=["work.authorized"])
    s.authorize()
    s.authorize()
    outbox.fan_out(webhook.group_id, webhook.id, timezone.now())
    old, recent = Delivery.objects.filter(webhook_id=webhook.id).order_by("sequence")
    for delivery in (old, recent):
        assert sending.attempt(delivery.id, timezone.now()).state == "delivered"
    Delivery.objects.filter(id=old.id).update(created_at=timezone.now() - timedelta(days=31))

    assert tasks.catch_up.apply().get() == {"webhooks": 0, "deliveries": 0, "pruned": 1}
    assert [d.id for d in Delivery.objects.filter(webhook_id=webhook.id)] == [recent.id]
    assert not Attempt.objects.filter(delivery_id=old.id).exists()
    assert Attempt.objects.filter(delivery_id=recent.id).count() == 1
    tasks.fan_out_group.apply(args=[s.world.group.id])  # the cursor is past it: not again
    assert len(rec.requests) == 2 and Delivery.objects.filter(webhook_id=webhook.id).count() == 1


def test_a_resend_after_a_lost_answer_has_the_same_id(db, settings, receiver,
                                                      private_allowed):
    # The receiver takes the delivery, but its 200 comes after the timeout: to the
    # sender a failure, so it sends again; the receiver sees the id it took already.
    settings.MW_WEBHOOK_TIMEOUT_SECONDS = 1
    rec = receiver(delay=1.5)
    s = Scenario()
    webhook = add(s, rec, events=["work.authorized"])
    s.authorize()
    (delivery_id,), _ = outbox.fan_out(webhook.group_id, webhook.id, timezone.now())

    first = sending.attempt(delivery_id, timezone.now())
    assert first.state == "pending" and first.retry_in == settings.MW_WEBHOOK_BACKOFF_SECONDS
    assert sending.attempt(delivery_id, timezone.now()).state == "skipped"  # not due yet
    rec.delay = 0
    later = timezone.now() + timedelta(seconds=first.retry_in)
    assert sending.attempt(delivery_id, later).state == "delivered"

    assert [r["id"] for r in rec.requests] == [delivery_id, delivery_id]
    assert list(rec.accepted) == [delivery_id]
    attempts = Attempt.objects.filter(delivery_id=delivery_id).order_by("number")
    assert attempts[0].status_code is None and "Timeout" in attempts[0].error
    assert attempts[1].status_code == 200


def test_one_worker_sends_a_delivery_at_a_time(db, receiver, private_allowed):
    rec = receiver()
    s = Scenario()
    webhook = add(s, rec, events=["work.authorized"])
    s.authorize()
    (delivery_id,), _ = outbox.fan_out(webhook.group_id, webhook.id, timezone.now())
    now = timezone.now()
    # Another worker's claim, still running: this one leaves the delivery alone.
    Delivery.objects.filter(id=delivery_id).update(
        state="sending", claim="other", claimed_until=now + timedelta(seconds=30))
    assert sending.attempt(delivery_id, now).state == "skipped"
    assert rec.requests == []
    # That worker died: once its claim has run out the delivery is taken over.
    assert sending.attempt(delivery_id, now + timedelta(seconds=31)).state == "delivered"
    assert len(rec.accepted) == 1
    # The dead worker's late write changes nothing: its claim is no longer the row's.
    assert sending._record(delivery_id, s.world.group.id, "other", 2, now, 5, 500, "",
                           "").state == "skipped"
    assert Delivery.objects.get(id=delivery_id).state == "delivered"


def test_attempts_stop_at_the_limit_and_the_delivery_fails_until_sent_again(
        db, settings, receiver, private_allowed, eager):
    settings.MW_WEBHOOK_MAX_ATTEMPTS = 2
    rec = receiver(statuses=[503, 503])
    s = Scenario()
    webhook = add(s, rec, events=["work.authorized"])
    s.authorize()
    (delivery_id,), _ = outbox.fan_out(webhook.group_id, webhook.id, timezone.now())
    assert sending.attempt(delivery_id, timezone.now()).state == "pending"
    assert sending.attempt(delivery_id, timezone.now() + timedelta(hours=1)).state == "failed"
    assert sending.attempt(delivery_id, timezone.now() + timedelta(hours=2)).state == "skipped"
    assert len(rec.requests) == 2 and rec.accepted == {}

    # The receiver is back; a person sends it again from the webhook's page: one attempt.
    page = s.owner.client.get(f"/g/{s.world.group.id}/webhooks/{webhook.id}/")
    assert "Send again" in page.content.decode()
    again = s.owner.client.post(f"/g/{s.world.group.id}/webhooks/{webhook.id}/send-again",
                                {"delivery": delivery_id})
    assert again.status_code == 302
    delivery = Delivery.objects.get(id=delivery_id)
    assert (delivery.state, delivery.attempts) == ("delivered", 3)
    assert list(rec.accepted) == [delivery_id]
    # Only a failed delivery can be sent again.
    assert s.owner.client.post(f"/g/{s.world.group.id}/webhooks/{webhook.id}/send-again",
                               {"delivery": delivery_id}).status_code == 404


def test_the_backoff_doubles_up_to_its_cap(settings):
    settings.MW_WEBHOOK_BACKOFF_SECONDS, settings.MW_WEBHOOK_BACKOFF_MAX_SECONDS = 10, 60
    assert [sending.backoff(n) for n in range(1, 6)] == [10, 20, 40, 60, 60]


def test_a_rotated_secret_signs_beside_the_old_one(db, receiver, private_allowed):
    rec = receiver()
    s = Scenario()
    webhook = add(s, rec, events=["work.authorized"])
    old = rec.secret
    webhook, new = registry.rotate(webhook.id, s.world.group.id, timezone.now())
    assert new != old and webhook.secret == new
    s.authorize()
    (delivery_id,), _ = outbox.fan_out(webhook.group_id, webhook.id, timezone.now())
    assert sending.attempt(delivery_id, timezone.now()).state == "delivered"
    (request,) = rec.requests
    header = request["headers"][signing.SIGNATURE]
    assert header.count("v1=") == 2
    assert signing.verify(old, header, request["body"], time.time())
    assert signing.verify(new, header, request["body"], time.time())


# --- where a webhook may point ----------------------------------------------------------------

@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/", "https://10.1.2.3/x",
                                 "http://169.254.169.254/latest/meta-data/", "http://[::1]/",
                                 "http://[::ffff:192.168.0.1]/", "http://0.0.0.0/"])
def test_private_addresses_are_refused_unless_allowed(settings, url):
    settings.MW_WEBHOOK_ALLOW_PRIVATE = False
    with pytest.raises(ProtocolError) as refused:
        addresses.check_url(url)
    assert refused.value.code == "VALIDATION_ERROR"
    assert "MW_WEBHOOK_ALLOW_PRIVATE" in refused.value.message
    settings.MW_WEBHOOK_ALLOW_PRIVATE = True
    assert addresses.check_url(url) == url


@pytest.mark.parametrize(("url", "said"), [
    ("ftp://example.com/", "http:// or https://"), ("javascript:alert(1)", "http://"),
    ("https://user:pw@example.com/", "user name or password"), ("", "needs a URL"),
    ("http:///nohost", "no host"), ("http://example.com:99999/", "cannot be read"),
    ("http://exa mple.com/", "spaces")])
def test_urls_a_webhook_cannot_have(url, said):
    with pytest.raises(ProtocolError) as refused:
        addresses.check_url(url)
    assert said in refused.value.message


def test_a_name_that_resolves_inside_is_refused_at_send_time(db, settings, receiver):
    # Saved while allowed (or while its name pointed elsewhere): the send checks again.
    settings.MW_WEBHOOK_ALLOW_PRIVATE = True
    rec = receiver()
    s = Scenario()
    webhook = add(s, rec, events=["work.authorized"])
    Webhook.objects.filter(id=webhook.id).update(url=rec.url.replace("127.0.0.1", "localhost"))
    s.authorize()
    (delivery_id,), _ = outbox.fan_out(webhook.group_id, webhook.id, timezone.now())
    settings.MW_WEBHOOK_ALLOW_PRIVATE = False
    assert sending.attempt(delivery_id, timezone.now()).state == "pending"
    (attempt,) = Attempt.objects.filter(delivery_id=delivery_id)
    assert attempt.status_code is None and attempt.error.startswith("refused: localhost")
    assert rec.requests == []


def test_a_name_that_resolves_inside_is_refused_when_saved(db, settings):
    settings.MW_WEBHOOK_ALLOW_PRIVATE = False
    s = Scenario()
    with pytest.raises(ProtocolError) as refused:
        registry.create(s.world.group.id, "http://localhost:8000/hook", [], "json", "user:x",
                        timezone.now())
    assert "localhost resolves to 127.0.0.1" in refused.value.message
    # A name that does not resolve (yet) is kept: the send checks it again.
    webhook, _ = registry.create(s.world.group.id, "https://hooks.invalid/x", [], "json",
                                 "user:x", timezone.now())
    assert list(Webhook.objects.filter(group_id=s.world.group.id)) == [webhook]


def test_unknown_event_types_and_formats_are_refused(db, settings):
    settings.MW_WEBHOOK_ALLOW_PRIVATE = True
    s = Scenario()
    with pytest.raises(ProtocolError) as refused:
        registry.create(s.world.group.id, "https://example.com/", ["work.nope"], "json",
                        "user:x", timezone.now())
    assert "unknown event type: work.nope" in refused.value.message
    with pytest.raises(ProtocolError) as refused:
        registry.create(s.world.group.id, "https://example.com/", [], "xml", "user:x",
                        timezone.now())
    assert "json, slack" in refused.value.message
    assert not Webhook.objects.exists()


# --- the Slack format ---------------------------------------------------------------------------

def test_the_slack_text_escapes_what_agents_wrote(db, receiver, private_allowed):
    rec = receiver()
    s = Scenario()
    webhook = add(s, rec, events=["work.authorized"], format_="slack")
    s.authorize(goal="<!channel> & <https://evil.example|click here>")
    (delivery_id,), _ = outbox.fan_out(webhook.group_id, webhook.id, timezone.now())
    assert sending.attempt(delivery_id, timezone.now()).state == "delivered"
    (payload,) = rec.accepted.values()
    assert list(payload) == ["text"]
    text = payload["text"]
    assert "work.authorized by agent:c-" in text
    assert "&lt;!channel&gt; &amp; &lt;https://evil.example|click here&gt;" in text
    assert "<" not in text and ">" not in text


def test_hints_of_a_busy_group_make_few_fan_outs_and_none_for_a_group_without(monkeypatch):
    sent = []
    hints = GroupHints("test-hints", sent.append, lambda: frozenset({"grp_a"}),
                       pause_seconds=tasks.PAUSE_SECONDS)
    for _ in range(1000):
        hints.put("grp_a")
        hints.put("grp_b")
    hints.flush()
    assert 1 <= len(sent) <= 5
    assert set(sent) == {"grp_a"}


def test_the_outbox_adds_nothing_to_the_command(db):
    # The hint is all a commit does for webhooks, and it only queues the Group id.
    sent = []
    previous = tasks.HINTS.put
    tasks.HINTS.put = sent.append
    try:
        with connection.execute_wrapper(lambda *args: pytest.fail("a query")):
            tasks.hint("grp_x", [{"type": "work.authorized"}])
    finally:
        tasks.HINTS.put = previous
    assert sent == ["grp_x"]


def test_the_receiver_check_in_the_docs_accepts_a_delivery_and_refuses_a_forgery(
        db, receiver, private_allowed):
    text = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    section = text[text.index("**Checking a delivery.**"):]
    start = section.index("```python\n") + len("```python\n")
    code = section[start:section.index("```", start)]
    namespace: dict = {}
    exec(code, namespace)  # the snippet as an operator would copy it
    verified = namespace["verified"]

    rec = receiver()
    s = Scenario()
    webhook = add(s, rec, events=["work.authorized"])
    s.authorize()
    (delivery_id,), _ = outbox.fan_out(webhook.group_id, webhook.id, timezone.now())
    assert sending.attempt(delivery_id, timezone.now()).state == "delivered"
    (request,) = rec.requests
    assert verified(rec.secret, request["headers"], request["body"])
    assert not verified("whsec_other", request["headers"], request["body"])
    assert not verified(rec.secret, request["headers"], request["body"] + b" ")
    stale = {**request["headers"], signing.SIGNATURE: signing.header(
        [rec.secret], int(time.time()) - 301, request["body"])}
    assert not verified(rec.secret, stale, request["body"])
