"""Workers that fail while they hold a WorkItem, against a live server:

1. A, an SDK worker (`python -m mission_weave.sdk.worker --once`), is killed with SIGKILL
   while its handler runs; its lease runs out and the Coordinator's next offer fences it.
2. B (tests/faults/stubborn_worker.py, SDK client, a worker that never checks its lease)
   takes the item over, then is paused with SIGSTOP past its lease; the next offer fences
   it too.
3. C, another SDK worker, takes over. While C holds the item, B is resumed and carries on
   with its old lease: renewal, progress, submission.

Every command B sends after it was resumed is refused (STALE_LEASE, LEASE_EXPIRED or
STALE_OWNERSHIP) and kept for audit: a CommandRecord with its envelope, listed by the
WorkItem's audit endpoint. C submits; the log shows one live owner at a time; mw_verify
is green."""

import json
import signal
import sys
import time
from datetime import UTC, datetime

import pytest

from apps.bench.harness import free_port
from apps.ledger.models import CommandRecord
from apps.ledger.verify import verify_group
from apps.work.models import WorkItem
from mission_weave.protocol.timefmt import parse_time
from mission_weave.sdk.keys import AgentKey
from tests.faults import checks, procs
from tests.integration.wslive import server_env
from tests.support import Scenario

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = 4  # seconds: the server's default lease, which the SDK workers take
FENCED = {"STALE_LEASE", "LEASE_EXPIRED", "STALE_OWNERSHIP"}


def key_file(actor, folder) -> str:
    """The Scenario agent's key as the SDK reads it (its process opens its own session)."""
    return str(AgentKey(actor.name, actor.key_id, actor.key, actor.world.group.id)
               .save(folder / f"{actor.name}.json"))


def item_row(group_id: str, item_id: str) -> dict:
    return WorkItem.objects.get(group_id=group_id, work_item_id=item_id).doc


def owned_by(group_id, item_id, agent) -> bool:
    doc = item_row(group_id, item_id)
    return doc["state"] == "active" and doc["owner"] == agent


def lease_expires(group_id, item_id) -> datetime:
    return parse_time(item_row(group_id, item_id)["lease"]["expiresAt"])


def past(moment: datetime, margin: float = 0.3) -> bool:
    return (datetime.now(UTC) - moment).total_seconds() > margin


def test_a_killed_and_a_paused_worker_are_fenced_and_their_late_commands_kept(
        tmp_path, figure):
    s = Scenario()
    g = s.world.group.id
    a, b = s.w1, s.w2
    c = s.world.agent(f"w3-{s.world.group.slug}")
    item = s.authorize()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**server_env(), "MW_DEFAULT_LEASE_SECONDS": str(LEASE), "MW_TASKS_EAGER": "1",
           "MW_DATA_DIR": str(tmp_path), "MW_BLOB_ROOT": str(tmp_path / "blobs")}
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)

    def sdk_worker(actor):
        return procs.spawn([sys.executable, "-m", "mission_weave.sdk.worker",
                            "--key", key_file(actor, tmp_path), "--handler",
                            "tests.faults.handlers:hold", "--url", url, "--once"],
                           {**env, "MW_FAULT_GO": str(tmp_path / f"go-{actor.name}")},
                           tmp_path / f"{actor.name}.log")

    logs = [tmp_path / n for n in ("web.log", f"{a.name}.log", f"{b.name}.log",
                                   f"{c.name}.log")]
    web = procs.web(port, env, logs[0])
    started = []
    try:
        # 1. A takes the item and is killed while its handler runs.
        s.offer(item, a)
        started.append(worker_a := sdk_worker(a))
        procs.wait_until(lambda: owned_by(g, item, a.name), 60, "start by A", logs=logs)
        procs.wait_until(lambda: "work.progress_reported" in _types(g, item), 20,
                         "progress from A", logs=logs)
        procs.signal_group(worker_a, signal.SIGKILL)
        killed_at = time.monotonic()
        procs.wait_until(lambda: past(lease_expires(g, item)), LEASE + 5, "A's lease expiry")
        s.offer(item, b)  # fences A: its lease ran out
        # 2. B takes over and is paused past its lease.
        stale_log = tmp_path / "stubborn.jsonl"
        started.append(worker_b := procs.spawn(
            [sys.executable, "-m", "tests.faults.stubborn_worker", "--key",
             key_file(b, tmp_path), "--url", url, "--group", g, "--item", item,
             "--mission", s.mission_id, "--lease-seconds", "3", "--log", str(stale_log)],
            env, logs[2]))
        procs.wait_until(lambda: owned_by(g, item, b.name), 30, "start by B", logs=logs)
        a_taken_over = time.monotonic() - killed_at
        procs.wait_until(lambda: _renewed(stale_log), 20, "B's first renewal", logs=logs)
        procs.signal_group(worker_b, signal.SIGSTOP)
        paused_at = time.monotonic()
        procs.wait_until(lambda: past(lease_expires(g, item)), 10, "B's lease expiry")
        s.offer(item, c)  # fences B
        # 3. C takes over; B, resumed, carries on with its old lease.
        started.append(worker_c := sdk_worker(c))
        procs.wait_until(lambda: owned_by(g, item, c.name), 60, "start by C", logs=logs)
        b_taken_over = time.monotonic() - paused_at
        resumed_at = time.time()
        procs.signal_group(worker_b, signal.SIGCONT)
        assert worker_b.wait(30) == 0, procs.tail(logs[2])
        (tmp_path / f"go-{c.name}").touch()
        assert worker_c.wait(60) == 0, procs.tail(logs[3])
    finally:
        for process in started:
            procs.stop(process)
        procs.stop(web)

    assert worker_a.returncode == -signal.SIGKILL
    lines = [json.loads(line) for line in stale_log.open()]
    late = [line for line in lines if line.get("at", 0) >= resumed_at]
    assert [line["type"] for line in late][-3:] == ["lease.renew", "work.progress",
                                                     "work.submit"]
    assert [line for line in late if line["status"] == 200] == []  # 0 stale accepted
    assert {line["code"] for line in late} <= FENCED, late
    kept = {r.command_id: r for r in CommandRecord.objects.filter(
        group_id=g, command_id__in=[line["commandId"] for line in late])}
    assert set(kept) == {line["commandId"] for line in late}
    for line in late:
        record = kept[line["commandId"]]
        assert not record.accepted and record.response["error"]["code"] == line["code"]
        assert record.envelope["id"] == line["commandId"]
        assert record.envelope["actor"] == f"agent:{b.name}"
    audit = s.c.get(f"work-items/{item}/audit").json()
    listed = {r["commandId"]: r for r in audit["refusedCommands"]}
    assert {line["commandId"] for line in late} <= set(listed)
    assert all(listed[line["commandId"]]["command"]["id"] == line["commandId"] for line in late)
    submitted = [e for e in audit["events"] if e["type"] == "work.submitted"]
    assert [e["actor"] for e in submitted] == [f"agent:{c.name}"]
    assert [e["data"]["agentId"] for e in audit["events"]
            if e["type"] == "work.ownership_expired"] == [a.name, b.name]
    assert checks.one_live_owner(g) == []
    assert verify_group(g) == []
    figure(f"A SIGKILLed, B SIGSTOPped past its {3} s lease, C took over (A fenced after "
           f"{a_taken_over:.1f} s, B after {b_taken_over:.1f} s); B resumed sent "
           f"{len(late)} stale commands ({', '.join(line['type'] for line in late)}): "
           f"0 accepted, refused {sorted({line['code'] for line in late})}, "
           f"{len(kept)} kept with their envelopes on the audit trail; C's submission is "
           f"the only one; one live owner throughout; mw_verify green")


def _types(group_id: str, item_id: str) -> list:
    from apps.ledger.models import Event

    return list(Event.objects.filter(group_id=group_id, work_item_id=item_id)
                .values_list("type", flat=True))


def _renewed(log) -> bool:
    return log.exists() and any(json.loads(line).get("type") == "lease.renew"
                                and json.loads(line).get("status") == 200
                                for line in log.open())


