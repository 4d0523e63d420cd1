"""mw_bench --renew: lease renewals per second through daphne, beside the raw SQL
transaction a renewal boils down to, in the same run. Every renewal is built and
signed before the clock starts; the leases are taken in this process beforehand."""

import os
import uuid

from . import http_lifecycles
from .harness import free_port, start_server, stop_server


def prepare(run: str, group_count: int, items: int, renewals: int, clients: int) -> dict:
    groups, coordinator, workers = http_lifecycles.cast(run, group_count, clients)
    plans: list[list[list[http_lifecycles.Step]]] = [[] for _ in range(clients)]
    for k in range(items):
        thread, group = k % clients, groups[k % group_count]
        worker, item = workers[thread], f"ri-{k}"
        steps = http_lifecycles.start_steps(coordinator, worker, group.id, item)
        for agent, _type, _id, payload in steps:
            http_lifecycles.submit_here(agent, group.id, payload)
        lease = http_lifecycles.derive_id("lease", steps[-1][2])
        plans[thread].append([
            ("lease.renew", group.id, worker.token,
             worker.command(group.id, "lease.renew", {"leaseSeconds": 600},
                            workItemId=item, ownershipEpoch=1, leaseId=lease)[1])
            for _ in range(renewals)])
    return {"plans": plans, "groups": [g.id for g in groups]}


def scenario(groups: int, items: int, renewals: int, clients: int, workers: int,
             report) -> dict:
    report(f"[renew] taking {items} leases over {groups} Group(s)...")
    prepared = prepare(uuid.uuid4().hex[:8], groups, items, renewals, clients)
    report(f"[renew] raw SQL baseline, {clients} clients...")
    raw = http_lifecycles.run_raw(prepared["plans"], prepared["groups"])
    report(f"[renew] {items * renewals} renewals through daphne × {workers}...")
    # MW_BENCH_PORT: a fixed port where the machine's ports are shared (default: any free one)
    process = start_server(int(os.environ.get("MW_BENCH_PORT", 0)) or free_port(), workers)
    try:
        api = http_lifecycles.run_http(process.port, prepared["plans"], process.pid)
    finally:
        stop_server(process)
    report("[renew] the pipeline alone, in this process...")
    alone = http_lifecycles.beside_the_pipeline_alone(raw, api, prepare(
        uuid.uuid4().hex[:8], groups, http_lifecycles.in_process_share(items, clients), renewals,
        clients)["plans"])
    return {"scenario": "renew", "groups": groups, "clients": clients, "webWorkers": workers,
            "api": api, "raw": raw,
            "ratio": round(api["commandsPerSecond"] / raw["transactionsPerSecond"], 3),
            **alone}
