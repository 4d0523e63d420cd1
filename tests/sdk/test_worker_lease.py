"""The Worker stops a handler the moment its lease is gone, and never leaves a refused
submission `active` (§11.3, §11.5), without a server: a scripted Client answers
`work.start`, then refuses (or cannot deliver) `lease.renew` or `work.submit`."""

import asyncio
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from mission_weave.protocol.timefmt import format_time
from mission_weave.sdk import worker_cli
from mission_weave.sdk.client import ApiError
from mission_weave.sdk.worker import Outcome, Worker
from tests.sdk.test_queues import G, Log, accepted, authorized

CARD = {"version": "1", "maxConcurrency": 1,
        "capabilities": [{"id": "summarize", "version": "1"}]}


class ScriptedClient:
    """Answers commands as a server would, with `refuse[type]` raising instead: an
    ApiError (refused) or a transport error (unreachable); a list is used up in turn."""

    agent_id, principal = "w1", "agent:w1"

    def __init__(self, lease_seconds: float = 1.5, **refuse):
        self.lease_seconds = lease_seconds
        self.refuse = refuse
        self.commands = []

    def expires(self) -> str:
        return format_time(datetime.now(UTC) + timedelta(seconds=self.lease_seconds))

    async def command(self, group_id, type_, body=None, **fields):
        self.commands.append((type_, fields.get("workItemId"), body, fields))
        refusal = self.refuse.get(type_)
        if isinstance(refusal, list):
            refusal = refusal.pop(0) if refusal else None
        if refusal is not None:
            raise refusal
        if type_ == "work.start":
            return {"events": [{"type": "work.started", "data": {
                "leaseId": "lease-1", "expiresAt": self.expires(), "ownershipEpoch": 1,
                "capabilityToken": {"id": "tok-1"}}}]}
        if type_ == "lease.renew":
            return {"events": [{"type": "lease.renewed", "data": {
                "leaseId": "lease-1", "expiresAt": self.expires(), "ownershipEpoch": 1}}]}
        return {"events": []}

    def sent(self, type_) -> list:
        return [c for c in self.commands if c[0] == type_]

    async def presence(self, *args, **kwargs):
        return {}

    def known_membership(self, group_id):
        return {"roles": ["worker"]}


class Slow:
    """A handler that works for `seconds` and notes whether it was cancelled."""

    def __init__(self, seconds: float = 10, ignore_cancel: bool = False):
        self.seconds, self.ignore_cancel = seconds, ignore_cancel
        self.cancelled = False
        self.finished = False

    async def __call__(self, ctx):
        try:
            await asyncio.sleep(self.seconds)
        except asyncio.CancelledError:
            self.cancelled = True
            if not self.ignore_cancel:
                raise
        self.finished = True
        return {"evidence": [ctx.evidence(["ac1", "ac2"], "test", "pass")]}


def run_one(client, handler, once=True) -> Worker:
    """One accepted item `a`, run by a Worker to its end."""
    log = Log()
    authorized(log, "a")
    accepted(log, "a")
    worker = Worker(client, [G], handler, ":memory:", once=once)
    worker.card = CARD
    worker.slots.declare(1)
    for event in log.events:
        worker._fold(event)

    async def go():
        worker._stop = asyncio.Event()
        await worker._tick()
        await asyncio.wait_for(asyncio.gather(*(t for t, _ in list(worker.slots.running.values()))),
                               20)
    asyncio.run(go())
    return worker


@pytest.mark.parametrize("code", ["STALE_LEASE", "LEASE_EXPIRED", "STALE_OWNERSHIP",
                                  "STALE_SESSION"])
def test_a_refused_renewal_cancels_the_handler_and_nothing_is_submitted(code):
    client = ScriptedClient(lease_seconds=1.5,
                            **{"lease.renew": ApiError(409, code, "the lease is closed")})
    handler = Slow(seconds=10)

    worker = run_one(client, handler)

    assert handler.cancelled and not handler.finished
    assert client.sent("lease.renew") and not client.sent("work.submit")
    assert not client.sent("work.fail")  # not the lease holder any more: it cannot
    assert worker.submitted == []
    assert (worker.outcome.state, worker.outcome.ok) == ("lease-lost", False)
    assert code in worker.outcome.message


def test_a_handler_that_swallows_the_cancellation_still_does_not_submit():
    client = ScriptedClient(**{"lease.renew": ApiError(409, "STALE_LEASE", "closed")})
    handler = Slow(seconds=10, ignore_cancel=True)

    worker = run_one(client, handler)

    assert handler.cancelled and handler.finished
    assert not client.sent("work.submit")
    assert worker.outcome.state == "lease-lost"


def test_a_renewal_that_cannot_reach_the_server_before_the_expiry_cancels_the_handler():
    unreachable = httpx.ConnectError("the server is unreachable")
    client = ScriptedClient(lease_seconds=1.5, **{"lease.renew": unreachable})
    handler = Slow(seconds=10)
    began = asyncio.run(_now())

    worker = run_one(client, handler)

    waited = (datetime.now(UTC) - began).total_seconds()
    assert handler.cancelled and not client.sent("work.submit")
    assert 1.4 <= waited < 6  # kept working until the lease's expiry, not past it
    assert len(client.sent("lease.renew")) >= 2  # it kept trying while the lease lived
    assert "did not reach the server" in worker.outcome.message


def test_a_renewal_that_fails_once_and_then_succeeds_keeps_the_handler_running():
    client = ScriptedClient(lease_seconds=1.5, **{"lease.renew": [
        httpx.ConnectError("a blip")]})
    handler = Slow(seconds=2.5)

    worker = run_one(client, handler)

    assert handler.finished and not handler.cancelled
    assert len(client.sent("lease.renew")) >= 2
    assert len(client.sent("work.submit")) == 1
    assert worker.outcome.state == "submitted"


def test_the_lease_closed_in_the_log_cancels_the_handler():
    client = ScriptedClient(lease_seconds=30)
    handler = Slow(seconds=10)
    log = Log()
    authorized(log, "a")
    accepted(log, "a")
    worker = Worker(client, [G], handler, ":memory:", once=True)
    worker.card = CARD
    worker.slots.declare(1)
    for event in log.events:
        worker._fold(event)

    async def go():
        worker._stop = asyncio.Event()
        await worker._tick()
        task, _ = worker.slots.running[(G, "a")]
        while worker.slots.running[(G, "a")][1] is None:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        revoked = log.add("lease.revoked", "a", leaseId="lease-1", reason="cancelled")
        await worker._on_event(revoked)
        await asyncio.wait_for(task, 5)
    asyncio.run(go())

    assert handler.cancelled and not client.sent("work.submit")
    assert worker.outcome.state == "lease-lost"
    assert "lease.revoked in the log (cancelled)" in worker.outcome.message


def test_a_refused_submission_fails_the_item_with_the_refusal_as_evidence():
    client = ScriptedClient(lease_seconds=30, **{"work.submit": ApiError(
        409, "EVIDENCE_INCOMPLETE", "no Evidence for acceptance criteria ['ac2']")})

    worker = run_one(client, Slow(seconds=0))

    [(_, item, body, fields)] = client.sent("work.fail")
    assert item == "a" and fields["leaseId"] == "lease-1" and fields["ownershipEpoch"] == 1
    [evidence] = body["evidence"]
    assert evidence["producer"] == "agent:w1"
    assert evidence["method"] == "submission-refused"
    assert evidence["result"].startswith("fail: EVIDENCE_INCOMPLETE ")
    assert evidence["criteria"] == ["ac1", "ac2"]
    assert worker.submitted == []
    assert (worker.outcome.state, worker.outcome.ok) == ("refused", False)
    assert "EVIDENCE_INCOMPLETE" in worker.outcome.message
    assert "failed with that as its Evidence" in worker.outcome.message


@pytest.mark.parametrize("code", ["STALE_LEASE", "LEASE_EXPIRED", "STALE_OWNERSHIP"])
def test_a_submission_refused_because_the_lease_is_gone_is_reported_not_failed(code):
    client = ScriptedClient(lease_seconds=30,
                            **{"work.submit": ApiError(409, code, "fenced")})

    worker = run_one(client, Slow(seconds=0))

    assert not client.sent("work.fail")
    assert worker.outcome.state == "refused" and code in worker.outcome.message
    assert "cannot fail the item" in worker.outcome.message


def test_once_exits_non_zero_with_the_refusal_code(monkeypatch, capsys):
    refused = Outcome(G, "a", "refused", False, "the server refused work.submit for a: "
                      "EVIDENCE_INCOMPLETE no Evidence; the WorkItem was failed with that as "
                      "its Evidence")

    async def serve(*args, **kwargs):
        return refused
    monkeypatch.setattr(worker_cli, "_serve", serve)
    monkeypatch.setattr(worker_cli.AgentKey, "load", staticmethod(lambda path: _Key()))

    with pytest.raises(SystemExit) as exit_:
        worker_cli.main(["--key", "k.json", "--group", G, "--once"])

    assert exit_.value.code != 0
    assert "EVIDENCE_INCOMPLETE" in str(exit_.value.code)
    assert '"outcome": "refused"' in capsys.readouterr().out


class _Key:
    agent_id, group_id = "w1", G


async def _now():
    return datetime.now(UTC)
