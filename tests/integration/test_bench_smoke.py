"""Every `mw_bench` benchmark at a tiny size, as CI runs them: no thresholds, only that
each gives a well-formed result, beside its raw baseline, with nothing failed. Each
starts its own daphne (and the sweep its sweepers) on this test database."""

import json

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from apps.bench.harness import database_url_of

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture(autouse=True)
def servers_share_this_database(monkeypatch, blob_root):
    """The bench's subprocesses take this process's environment: this test database, and
    the blob store the deliverables are put in here."""
    monkeypatch.setenv("DATABASE_URL", database_url_of(connection.settings_dict))
    monkeypatch.setenv("MW_BLOB_ROOT", str(blob_root))
    monkeypatch.setenv("MW_SWEEP_IN_PROCESS", "0")


def bench(capsys, *arguments):
    call_command("mw_bench", *arguments, "--json")
    return json.loads(capsys.readouterr().out)


def assert_lifecycles(result, groups, lifecycles):
    api, raw = result["api"], result["raw"]
    assert result["groups"] == groups
    assert api["failures"] == 0, api["firstFailure"]
    assert api["commands"] == raw["transactions"] == 7 * lifecycles
    assert set(api["latency"]) == {"work.authorize", "work.offer", "work.accept_offer",
                                   "work.start", "artifact.publish", "work.submit",
                                   "work.accept_result"}
    assert result["ratio"] == round(api["commandsPerSecond"] / raw["transactionsPerSecond"], 3)
    assert api["cpuMsPerCommand"]["server"] > 0 and raw["cpuMsPerTransaction"]["client"] > 0
    # The ratios a script reads (docs/performance.md, "Running the benchmarks").
    assert result["cpuRatio"] > result["serverCpuRatio"] > 0
    # A request that does nothing costs the server less than a command, and /healthz,
    # answered by the first middleware, less than a request through all of them.
    floor = api["serverCpuMsPerRequestDoingNothing"]
    assert 0 < floor["/healthz"] < floor["/api/v1/authority"] < api["cpuMsPerCommand"]["server"]
    assert set(result["floorCpuRatio"]) == set(floor)
    assert set(result["roundTrips"]) == set(api["latency"])
    # BEGIN with the lock and the reads, then the writes with COMMIT; the bearer token from
    # the session cache, as the API takes it for a command (test_round_trips.py).
    assert all(n >= 2 for n in result["roundTrips"].values())
    latency = result["latencyRatio"]
    assert latency["p50"] > 0 and latency["p99"] > 0
    assert set(latency["byCommand"]) == set(api["latency"])
    assert result["oneAtATime"]["api"]["failures"] == 0
    assert_ceiling(result, 7 * max(lifecycles // 5, result["clients"]))
    batches = api["groupCommit"]  # every command of a lifecycle goes through group commit
    assert round(batches["batches"] * batches["meanSize"]) == api["commands"], batches


def assert_ceiling(result, in_process_commands):
    """The pipeline alone ran its own commands without a failure, and the ceilings are the
    cores over the CPU per command measured, as ratios to the raw rate."""
    alone, ceiling = result["inProcess"], result["ceiling"]
    assert (alone["commands"], alone["failures"]) == (in_process_commands, 0), alone
    assert alone["cpuMsPerCommand"]["pipeline"] > 0
    rate, cores = result["raw"]["transactionsPerSecond"], ceiling["cores"]
    for key, cpu in (("http", result["api"]["cpuMsPerCommand"]),
                     ("pipelineAlone", alone["cpuMsPerCommand"])):
        assert ceiling[key] == pytest.approx(cores * 1000 / sum(cpu.values()) / rate, abs=1e-3)


def test_lifecycles(capsys):
    spread, hot = bench(capsys, "--lifecycles", "5", "--groups", "2", "--clients", "2",
                        "--web-workers", "1")
    assert (spread["scenario"], hot["scenario"]) == ("spread", "hot")
    assert_lifecycles(spread, 2, 5)
    assert_lifecycles(hot, 1, 5)


def test_renew(capsys):
    [result] = bench(capsys, "--renew", "--renew-leases", "4", "--renewals", "3", "--groups",
                     "2", "--clients", "2", "--web-workers", "1")
    assert result["scenario"] == "renew"
    assert result["api"]["failures"] == 0, result["api"]["firstFailure"]
    assert result["api"]["commands"] == result["raw"]["transactions"] == 12
    assert result["api"]["latency"]["lease.renew"]["n"] == 12
    assert_ceiling(result, 2 * 3)  # a lease per client (of 4 // 5), 3 renewals each


def test_fanout(capsys):
    result = bench(capsys, "--fanout", "--fanout-subscribers", "1", "--fanout-seconds", "1",
                   "--web-workers", "1")
    [run] = result["runs"]
    assert run["subscribers"] == 1 and run["events"] >= 20
    assert run["websocket"]["deliveries"] == run["rawRedis"]["deliveries"] == run["events"]
    assert run["websocket"]["p99Ms"] > 0 and run["rawRedis"]["p99Ms"] > 0


def test_replay(capsys):
    result = bench(capsys, "--replay", "--replay-events", "300", "--web-workers", "1")
    assert result["events"] >= 300
    assert result["raw"]["events"] == result["http"]["events"] == result["events"]
    assert result["websocket"].get("events") == result["events"], result["websocket"]
    assert result["httpOverRaw"] > 0 and result["websocketOverRaw"] > 0
    assert set(result["verifyRatio"]) == {"http", "websocket"}
    assert all(r > 0 for r in result["verifyRatio"].values())


def test_sweep(capsys):
    result = bench(capsys, "--sweep", "--sweep-leases", "300", "--groups", "3", "--sweepers",
                   "1")
    assert result["sweep"]["leases"] == result["raw"]["leases"] == 300
    assert result["verify"]["problems"] == []
    assert result["commands"]["idle"]["commands"] > 0
    assert result["rawOverSweep"] > 0


def test_blobs(capsys):
    result = bench(capsys, "--blobs", "--blob-sizes", "1")  # whole MiB only
    [size] = result["sizes"]
    assert size["sizeMiB"] == 1
    assert all(size["MBps"][what] > 0 for what in ("upload", "download", "sha256sum", "cp"))


def test_scale(capsys):
    result = bench(capsys, "--scale", "--scale-workers", "1", "--scale-groups", "1,2",
                   "--scale-log", "1000,2000", "--scale-commands", "10", "--lifecycles", "3",
                   "--groups", "2", "--clients", "2", "--web-workers", "1")
    [by_workers] = result["workers"]
    assert by_workers["webWorkers"] == 1
    assert_lifecycles(by_workers, 2, 3)
    assert [r["groups"] for r in result["groups"]] == [1, 2]
    for row in result["groups"]:
        assert_lifecycles(row, row["groups"], 3)
    log = result["log"]
    assert [row["events"] >= length for row, length in zip(log["latency"], (1000, 2000))] == \
        [True, True]
    for row in log["latency"]:
        assert row["api"]["failures"] == 0, row["api"]["firstFailure"]
        assert row["api"]["commands"] == row["raw"]["n"] == 10
        assert set(row["api"]["latency"]) == {"lease.renew", "work.progress"}
    for row in log["verify"]:
        assert row["problems"] == []
        assert row["verifySeconds"] >= row["replaySeconds"] > 0 and row["raw"]["seconds"] > 0
    assert set(log["linear"]) == {"verify", "replay", "raw"}
    assert result["verifyRatio"] == log["verify"][-1]["verifyRatio"]
    assert result["verifyRatio"]["verify"] >= result["verifyRatio"]["replay"] > 0


def test_pages(capsys):
    result = bench(capsys, "--pages", "--page-items", "20", "--page-renders", "2")

    assert (result["workItems"], result["tenth"], result["raw"]["rows"]) == (20, 11, 20)
    for name in ("missionPage", "workItemPage"):
        page = result[name]
        assert page["queries"] == page["queriesAtATenth"], page  # no query per WorkItem
        assert page["p50Ms"] > 0 and page["kilobytes"] > 0
        assert result[name + "OverRaw"] == round(page["p50Ms"] / result["raw"]["p50Ms"], 1)
    with pytest.raises(CommandError, match="at least 20"):
        call_command("mw_bench", "--pages", "--page-items", "19")


def test_servers_side_by_side():
    from apps.bench import side_by_side

    result = side_by_side.main(["this=.:daphne", "again=.", "--lifecycles", "8", "--chunks",
                                "2", "--groups", "2", "--clients", "2", "--web-workers", "1"])
    assert len(result["raw"]["cpuMsPerTransaction"]) == 2
    for name in ("this", "again"):
        server = result[name]
        assert server["httpServer"] == "daphne" and server["failures"] == 0, server
        assert server["cpuMsPerCommand"]["server"] > 0
        assert server["cpuRatio"] > server["serverCpuRatio"] > 0
