"""A Celery worker SIGKILLed between the commit of the event that makes a decision wait and
the mail that says so (issue 28): nothing is lost and nothing is sent twice.

The test's own SMTP server (aiosmtpd, tests/integration/notify_smtp.py) stalls the
worker's conversation at a chosen point, which makes the moment certain; the worker is
killed there, and a new worker with beat takes over:

- at RCPT, before anything was delivered: the mail, claimed by the dead worker, is sent
  by the next one once the claim is stale (MW_NOTIFY_CLAIM_SECONDS): delivered once;
- after the message was received but before its answer (the answer is lost: the sender
  cannot know): sent again, with the same Message-ID, so it is recognisably the same
  message and a receiver that deduplicates by Message-ID shows it once.

The events were committed with no worker running: the hint waited in Redis, as a commit's
hint does when the workers are busy or down."""

import os
import signal
import time

import pytest
import redis
from django.conf import settings

from apps.bench.harness import database_url
from apps.notify.models import Mail
from tests.faults import procs
from tests.integration.notify_smtp import smtp_server
from tests.integration.test_notify_mail import ready_for_approval

pytestmark = pytest.mark.django_db(transaction=True)

CLAIM_SECONDS = 2


@pytest.mark.parametrize("at", ["rcpt", "data"])
def test_a_worker_killed_mid_send_has_the_mail_delivered_by_the_next(at, tmp_path, figure):
    with smtp_server() as (inbox, port):
        env = {**os.environ, "DATABASE_URL": database_url(), "MW_DATA_DIR": str(tmp_path),
               "EMAIL_HOST": "127.0.0.1", "EMAIL_PORT": str(port), "EMAIL_TIMEOUT": "120",
               "MW_PUBLIC_URL": "http://mw.example", "MW_NOTIFY_CATCH_UP_SECONDS": "1",
               "MW_NOTIFY_CLAIM_SECONDS": str(CLAIM_SECONDS)}
        env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        redis.Redis.from_url(settings.REDIS_URL).delete("celery")  # another run's tasks
        s = ready_for_approval("Killed mid-send")
        g = s.world.group.id
        committed = time.monotonic()
        inbox.hold(at)
        first, second = tmp_path / "worker-1.log", tmp_path / "worker-2.log"
        worker = procs.celery(env, first)
        try:
            procs.wait_until(inbox.held.is_set, 60, f"the mail's send stalled at {at}",
                             logs=[first], process=worker)
            procs.signal_group(worker, signal.SIGKILL)
            worker.wait(10)
        finally:
            procs.stop(worker)
        assert worker.returncode == -signal.SIGKILL
        (mail,) = Mail.objects.filter(group_id=g)
        assert mail.state == "sending"  # claimed by the dead worker, not marked sent
        assert len(inbox.messages) == (1 if at == "data" else 0)
        inbox.release()

        restarted = time.monotonic()
        again = procs.celery(env, second, "--beat", "--schedule", str(tmp_path / "beat"))
        try:
            procs.wait_until(lambda: Mail.objects.get(id=mail.id).state == "sent", 60,
                             "the mail sent again", logs=[second], process=again)
            delivered = time.monotonic()
            time.sleep(3)  # three more catch-ups: nothing more
        finally:
            procs.stop(again)

    ids = {m["Message-ID"] for m in inbox.messages}
    assert ids == {f"<mw-mail-{mail.id}.{g}@mw.example>"}  # one message, by its id
    assert len(inbox.messages) == (2 if at == "data" else 1)
    assert Mail.objects.get(id=mail.id).attempts == 2
    figure(f"worker SIGKILLed mid-send (stalled at {at}): the next worker's catch-up "
           f"delivered it {delivered - restarted:.1f} s after its start, "
           f"{delivered - committed:.1f} s after the commit (claims stale after "
           f"{CLAIM_SECONDS} s); {len(inbox.messages)} SMTP deliveries, one Message-ID")
