"""The web process killed with SIGKILL inside the command transaction, 1,000 times
(MW_FAULT_KILLS for fewer), at the four points of apps/ledger/faults.py in turn, while
an SDK client keeps sending WorkItem lifecycles and retries each command whose answer
never came with the same envelope (the SDK's `send`).

The web process is a child of tests/faults/forkserver.py (Django imported once, one fork
per life), and after every kill, before the next child may accept the retry, a checker
compares the killed command's Group with a replay (mw_verify) and looks for a half
applied command: 0 partial states, and the command in flight committed exactly when the
point was after the commit. At the end every command was applied exactly once: one
record, its events once in the log, and the answer `duplicate: true` exactly for the
commands whose first commit was never answered."""

import asyncio
import json
import os
import sys
import time
import uuid
from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.bench import http_lifecycles
from apps.bench.harness import free_port
from apps.ledger.models import CommandRecord, Event
from apps.ledger.verify import verify_group
from mission_weave.protocol.timefmt import format_time
from mission_weave.sdk.client import Client
from mission_weave.sdk.keys import AgentKey
from tests.faults import checks, procs
from tests.integration.wslive import server_env

pytestmark = pytest.mark.django_db(transaction=True)

KILLS = int(os.environ.get("MW_FAULT_KILLS", "1000"))
GROUPS = 10
RATE = 0.5  # chance that a command passing the armed point dies there


def client_of(agent: http_lifecycles.Agent, url: str) -> Client:
    """An SDK client on the agent's session (opened in this process by the cast)."""
    client = Client(url, AgentKey(agent.name, agent.key_id, agent.key), retries=30,
                    backoff_seconds=0.002)
    client.token, client.session_epoch = agent.token, agent.session_epoch
    return client


async def drive(url: str, groups: list, coordinator, worker, report, sent: dict) -> int:
    """Lifecycles until the fork server reports KILLS kills: authorize, offer, accept,
    start, progress, renew, progress, checkpoint. Returns the lifecycles run."""
    boss, hand = client_of(coordinator, url), client_of(worker, url)

    async def send(client, group_id, type_, body, **fields):
        member = await client.membership(group_id)
        envelope = client.envelope(group_id, type_, body, member["membershipEpoch"], **fields)
        answer = await client.send(group_id, envelope)  # retried until answered
        sent[envelope["id"]] = (group_id, envelope, answer)
        return answer["events"]

    lifecycles = 0
    try:
        while _kills(report) < KILLS:
            group_id, item = groups[lifecycles % len(groups)], f"k-{lifecycles}"
            expires = format_time(timezone.now() + timedelta(hours=1))
            await send(boss, group_id, "work.authorize", {
                "workItemId": item, "missionId": "m", "contract": http_lifecycles.contract()})
            await send(boss, group_id, "work.offer", {
                "candidates": [worker.name], "mode": "sequential", "expiresAt": expires},
                workItemId=item)
            accepted = await send(hand, group_id, "work.accept_offer", {"contractRevision": 1},
                                  workItemId=item)
            epoch = accepted[0]["data"]["ownershipEpoch"]
            started = await send(hand, group_id, "work.start", {"leaseSeconds": 600},
                                 workItemId=item, ownershipEpoch=epoch)
            lease = {"workItemId": item, "ownershipEpoch": epoch,
                     "leaseId": started[0]["data"]["leaseId"]}
            await send(hand, group_id, "work.progress", {"phase": "reading"}, **lease)
            await send(hand, group_id, "lease.renew", {"leaseSeconds": 600}, **lease)
            await send(hand, group_id, "work.progress", {"phase": "writing"}, **lease)
            await send(hand, group_id, "work.checkpoint", {"progress": {"phase": "paused"}},
                       **lease)
            lifecycles += 1
    finally:
        await boss.aclose()
        await hand.aclose()
    return lifecycles


def _kills(report) -> int:
    return sum(1 for _ in report.open()) if report.exists() else 0


def test_a_thousand_kills_inside_the_command_transaction_leave_no_partial_state(
        tmp_path, figure):
    run = uuid.uuid4().hex[:6]
    groups, coordinator, (worker,) = http_lifecycles.cast(f"kill-{run}", GROUPS, 1)
    group_ids = [g.id for g in groups]
    report, port = tmp_path / "kills.jsonl", free_port()
    log = tmp_path / "forkserver.log"
    env = {**server_env(), "MW_DB_POOL_MIN": "1"}
    server = procs.spawn([sys.executable, "-m", "tests.faults.forkserver", "--port", str(port),
                          "--kills", str(KILLS), "--rate", str(RATE), "--report", str(report),
                          "--workdir", str(tmp_path)], env, log)
    sent: dict = {}
    try:
        procs.answering(port, server, log)
        began = time.monotonic()
        lifecycles = asyncio.run(asyncio.wait_for(
            drive(f"http://127.0.0.1:{port}", group_ids, coordinator, worker, report, sent),
            900))
        seconds = time.monotonic() - began
        # A client retrying each killed command once more, after everything settled:
        # the first answer again, nothing applied twice.
        kills = [json.loads(line) for line in report.open()]
        again = asyncio.run(_resend(f"http://127.0.0.1:{port}", coordinator, worker, sent,
                                    {k["commandId"] for k in kills}))
    finally:
        procs.stop(server)
        assert server.returncode in (0, -15), procs.tail(log)

    assert len(kills) == KILLS, procs.tail(log)
    assert Counter(k["point"] for k in kills) == Counter(
        {p: KILLS // 4 + (i < KILLS % 4) for i, p in enumerate(checks_points())})
    assert [k for k in kills if k["problems"]] == []  # every check after every kill
    after_commit = {k["commandId"] for k in kills if k["point"] == "after_commit"}
    for command_id, (group_id, _envelope, answer) in sent.items():
        records = CommandRecord.objects.filter(group_id=group_id, command_id=command_id)
        assert records.count() == 1, command_id
        assert answer["duplicate"] == (command_id in after_commit), (command_id, answer)
        logged = Event.objects.filter(group_id=group_id, command_id=command_id)
        assert sorted(logged.values_list("event_id", flat=True)) == \
            sorted(e["id"] for e in answer["events"]), command_id
    assert all(a["duplicate"] and a["events"] == sent[c][2]["events"] for c, a in again.items())
    assert len(again) == len({k["commandId"] for k in kills})
    for group_id in group_ids:
        assert verify_group(group_id) == []
        assert checks.partial_states(group_id) == []
    assert checks.gapless(group_ids) == []

    check = sorted(k["checkSeconds"] for k in kills)
    points = ", ".join(f"{p} {n}" for p, n in sorted(Counter(k["point"] for k in kills).items()))
    figure(f"{KILLS} SIGKILLs of the web process ({points}), 0 partial states, mw_verify = "
           f"replay after every kill; {len(sent)} commands in {lifecycles} lifecycles, each "
           f"applied once ({len(after_commit)} committed but unanswered, answered duplicate "
           f"on retry); {seconds:.0f} s, {seconds / KILLS * 1000:.0f} ms a kill, the check "
           f"p50 {check[len(check) // 2] * 1000:.0f} ms")


def checks_points() -> tuple:
    from tests.faults.forkserver import POINTS

    return POINTS


async def _resend(url: str, coordinator, worker, sent: dict, command_ids: set) -> dict:
    clients = {f"agent:{a.name}": client_of(a, url) for a in (coordinator, worker)}
    answers = {}
    try:
        for command_id in command_ids:
            group_id, envelope, _answer = sent[command_id]
            answers[command_id] = await clients[envelope["actor"]].send(group_id, envelope)
    finally:
        for client in clients.values():
            await client.aclose()
    return answers
