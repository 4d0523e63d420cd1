"""Servers side by side: the same kind of lifecycles through two or more HTTP servers
(each from a source tree of its own, under daphne, uvicorn or granian), in alternating
chunks, so that every server sees the same machine; with the raw transaction measured
before and after, in the same run. For a lever worth a few percent of a command's CPU,
which the default `mw_bench` run cannot tell from the noise of a shared machine.

    python -m apps.bench.side_by_side --lifecycles 800 --chunks 8 \\
        before=/tmp/before:daphne after=.:daphne uvicorn=.:uvicorn granian=.:granian

A tree is a checkout of this repository (`git worktree add /tmp/before HEAD~1`); its own
`mission_weave` and `sdk/src` come first on the server's PYTHONPATH. Prints JSON: per
server the medians over the chunks after the first (a warm-up) of the CPU ms per command
of the server, PostgreSQL and the clients, and `serverCpuRatio` / `cpuRatio` over the raw
transaction's CPU (the mean of its two runs), as `mw_bench` reports them.
"""

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path

import django


def start(tree: str, http_server: str, workers: int):
    from .harness import free_port, start_server

    port = free_port()
    tree = os.path.abspath(tree)
    env = {**os.environ, "DEBUG": "0", "SECRET_KEY": "bench" * 10,
           "MW_METRICS_DIR": tempfile.mkdtemp(prefix="mw-bench-metrics-"),
           "PYTHONPATH": f"{tree}:{tree}/sdk/src"}
    return start_server(port, workers, env, http_server, Path(tree))


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("servers", nargs="+", metavar="NAME=TREE[:SERVER]")
    parser.add_argument("--lifecycles", type=int, default=800, help="per server")
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--web-workers", type=int, default=len(os.sched_getaffinity(0)))
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mission_weave.settings")
    django.setup()
    from .harness import stop_server
    from .http_lifecycles import prepare, run_http, run_raw

    servers = {}
    for spec in args.servers:
        name, _, where = spec.partition("=")
        tree, _, http_server = where.partition(":")
        servers[name] = (tree, http_server or "daphne")
    run = f"sbs{os.getpid()}"
    plans = {name: prepare(f"{run}{i}", args.groups, args.lifecycles, args.clients)["plans"]
             for i, name in enumerate(servers)}
    raw_plans = prepare(f"{run}r", args.groups, args.lifecycles // 2, args.clients)
    halves = [[plan[:len(plan) // 2] for plan in raw_plans["plans"]],
              [plan[len(plan) // 2:] for plan in raw_plans["plans"]]]
    raws = [run_raw(halves[0], raw_plans["groups"])]
    processes = {name: start(tree, http_server, args.web_workers)
                 for name, (tree, http_server) in servers.items()}
    chunks: dict[str, list] = {name: [] for name in servers}
    per = args.lifecycles // args.clients // args.chunks
    try:
        for k in range(args.chunks):
            order = list(servers) if k % 2 == 0 else list(reversed(servers))
            for name in order:
                chunk = [plan[k * per:(k + 1) * per] for plan in plans[name]]
                chunks[name].append(run_http(processes[name].port, chunk,
                                             processes[name].pid))
    finally:
        for process in processes.values():
            stop_server(process)
    raws.append(run_raw(halves[1], raw_plans["groups"]))
    raw_cpu = [sum(r["cpuMsPerTransaction"].values()) for r in raws]
    result: dict = {"raw": {"cpuMsPerTransaction": raw_cpu,
                            "transactionsPerSecond": [r["transactionsPerSecond"]
                                                      for r in raws]}}
    mean_raw = statistics.mean(raw_cpu)
    for name, measured in chunks.items():
        warm = measured[1:] or measured

        def median(part: str, of=warm) -> float:
            return round(statistics.median(m["cpuMsPerCommand"][part] for m in of), 2)

        cpu = {part: median(part) for part in ("client", "server", "postgres")}
        result[name] = {
            "httpServer": servers[name][1], "cpuMsPerCommand": cpu,
            "serverMsRange": [min(m["cpuMsPerCommand"]["server"] for m in warm),
                              max(m["cpuMsPerCommand"]["server"] for m in warm)],
            "commandsPerSecond": round(statistics.median(m["commandsPerSecond"]
                                                         for m in warm), 1),
            "failures": sum(m["failures"] for m in measured),
            "serverCpuRatio": round(cpu["server"] / mean_raw, 2),
            "cpuRatio": round(sum(cpu.values()) / mean_raw, 2)}
    return result


if __name__ == "__main__":
    print(json.dumps(main()))
