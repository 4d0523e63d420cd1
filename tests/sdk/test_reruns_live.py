"""Reruns and resets against the live server (tests/sdk/conftest.py): a Worker whose
stored Cursor is from another log (the server's database was reset) starts over and is
offered work; `--once` ends after one WorkItem with its outcome."""

import asyncio
import json
import logging

import pytest

from mission_weave.sdk import worker_cli
from mission_weave.sdk.inbox import CursorStore
from mission_weave.sdk.worker import Worker
from tests.sdk.conftest import run
from tests.sdk.test_live import delivered, mission, offer

pytestmark = pytest.mark.django_db(transaction=True)


async def _write_and_submit(ctx):
    return await delivered(ctx, "self-check")


async def _block(ctx):
    await ctx.block("needs the figures from the owner", "waiting",
                    milestones=["read the contract"])


def once(live_group, agent, handler, cursors, before=None, after=None, timeout=60):
    """Run a `once` Worker to its end; `before(c)` runs first, `after(c)` once it is ready."""
    async def scenario():
        async with live_group.client(live_group.coordinator) as c, \
                live_group.client(agent) as wc:
            await c.open_session()
            if before:
                await before(c)
            worker = Worker(wc, [live_group.group_id], handler, cursors, tick_seconds=0.2,
                            once=True)
            task = asyncio.create_task(worker.run())
            await asyncio.wait_for(worker.ready.wait(), 20)
            if after:
                await after(c)
            await task
            return worker, await c.work_item(live_group.group_id, "task")
    return run(scenario(), timeout)


@pytest.mark.parametrize("stale", ["past the head", "another hash"])
def test_a_cursor_from_a_reset_server_starts_over_and_the_worker_is_offered_work(
        live_group, tmp_path, caplog, stale):
    g, w1 = live_group.group_id, live_group.workers[0]
    caplog.set_level(logging.INFO, "mission_weave.sdk")
    cursors = tmp_path / "w1.cursors.sqlite3"
    store = CursorStore(cursors)  # as the Worker left it before the server was reset
    store.reset(g, 91 if stale == "past the head" else 1, "sha256:" + "9" * 64)
    store.close()

    worker, item = once(live_group, w1, _write_and_submit, cursors,
                        before=lambda c: mission(c, g, {"task": []}),
                        after=lambda c: offer(c, g, "task", w1.name))

    assert worker.outcome.state == "submitted" and item["state"] == "submitted"
    assert worker.inbox.restarts == 1
    [warning] = [r.getMessage() for r in caplog.records
                 if r.name == "mission_weave.sdk.inbox" and r.levelno == logging.WARNING]
    assert f"Group {g}" in warning and "starting over from the log at sequence 0" in warning
    assert ("sequence 91" if stale == "past the head" else "sequence 1") in warning
    assert CursorStore(cursors).get(g)[0] >= 4  # mission, item, offer, acceptance, ...


def test_once_a_blocking_handler_ends_with_the_item_blocked(live_group, tmp_path):
    g, w1 = live_group.group_id, live_group.workers[0]

    async def before(c):
        await mission(c, g, {"task": []})
        await offer(c, g, "task", w1.name)

    worker, item = once(live_group, w1, _block, tmp_path / "w.sqlite3", before=before)

    assert (worker.outcome.state, worker.outcome.ok) == ("blocked", True)
    assert item["state"] == "blocked"


def test_once_exits_non_zero_with_a_message_when_the_handler_fails(
        live_group, tmp_path, monkeypatch, capsys):
    g, w1 = live_group.group_id, live_group.workers[0]
    (tmp_path / "failing_worker.py").write_text(
        "async def handle(ctx):\n    raise RuntimeError('the input is unreadable')\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    async def setup():
        async with live_group.client(live_group.coordinator) as c:
            await c.open_session()
            await mission(c, g, {"task": []})
            await offer(c, g, "task", w1.name)
    run(setup())

    with pytest.raises(SystemExit) as exited:
        worker_cli.main(["--key", str(w1.key_file), "--group", g, "--url",
                         live_group.server.url, "--handler", "failing_worker:handle",
                         "--cursors", str(tmp_path / "c.sqlite3"), "--once"])

    assert exited.value.code == ("--once: the handler failed on task: RuntimeError('the input "
                                 "is unreadable'); the WorkItem was failed with that as its "
                                 "Evidence")
    assert json.loads(capsys.readouterr().out) == {"groupId": g, "workItemId": "task",
                                                   "outcome": "failed"}

    async def state():
        async with live_group.client(live_group.coordinator) as c:
            await c.open_session()
            return (await c.work_item(g, "task"))["state"]
    assert run(state()) == "failed"
