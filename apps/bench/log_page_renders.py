"""mw_bench --pages --log-events N: the Group log page (apps/dashboard/log_page.py) of a
Group whose log holds N events (filled by log_fill: COPY, chained, no commands), rendered
in this process by Django's test Client signed in as a member, beside the raw SELECT of
the rows each page shows, in the same run.

For each page (the newest, one halfway down the log, the oldest; each filter on the
newest page and halfway down): p50 and p95 of the server time of `renders` renders,
- warm: the same URL again and again (PostgreSQL's buffers and the page's caches hot);
- cold: a page not read before, each render another `before`, spread over the whole
  log (its index and heap pages read from disk or the OS cache, not PostgreSQL's
  buffers, unless an earlier render touched them);
and the page's SQL statements with EXPLAIN (ANALYZE, BUFFERS) of those that read the log.
Apart: the first render after the page's caches are emptied (the hash chain's
verification and the event types from nothing: once per Group) and the render after
one new event (the caches advance by one event)."""

import random
import statistics
import time

from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from apps.dashboard import log_page
from apps.ledger import history

from . import http_lifecycles, log_fill


def percentiles(times: list) -> dict:
    ordered = sorted(times)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50Ms": round(statistics.median(ordered) * 1000, 2),
            "p95Ms": round(p95 * 1000, 2), "n": len(ordered)}


CPU: list = []  # this process's CPU seconds of each timed render, in order


def timed_get(client: Client, path: str) -> float:
    """The server time of one GET of `path` (in this process: the whole request through
    Django's middleware, view and template, and its SQL round trips); its CPU time in
    this process goes to CPU (on a shared machine the wall time includes waiting for a
    core)."""
    cpu, started = time.process_time(), time.perf_counter()
    response = client.get(path)
    elapsed = time.perf_counter() - started
    CPU.append(time.process_time() - cpu)
    if response.status_code != 200:
        raise RuntimeError(f"GET {path} answered {response.status_code}")
    return elapsed


def statements(client: Client, path: str) -> tuple[list, int, int]:
    """The SQL one GET of `path` runs (as sent, parameters in), its event rows, its bytes."""
    with CaptureQueriesContext(connection) as queries:
        response = client.get(path)
    body = response.content.decode()
    return [q["sql"] for q in queries.captured_queries], body.count("<tr data-sequence="), \
        len(body)


def explain(sql: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}")
        return [row[0] for row in cursor.fetchall()]


def reads_log(sql: str) -> bool:
    return history.EVENTS in sql or history.ARCHIVE in sql


def raw_select(group_id: str, filters: log_page.Filters, before: int, renders: int) -> dict:
    """The page's rows straight out of PostgreSQL: the newest PAGE_SIZE events of the
    Group's online log below `before` matching the filters, all columns, one table,
    the same statement each time (prepared after the first runs, as Django's would be);
    with two or more of type, Mission and actor kind, within the page's window."""
    where, params = filters.sql()
    if getattr(filters, "windowed", False):  # as the page bounds it (log_page.WINDOW)
        where = f"{where} AND sequence >= {max(before - log_page.WINDOW, 1)}"
    sql = (f"SELECT {history.SELECT} FROM {history.EVENTS} WHERE group_id = %s AND {where} "
           f"AND sequence < %s ORDER BY sequence DESC LIMIT {log_page.PAGE_SIZE}")
    times = []
    with connection.cursor() as cursor:
        for _ in range(renders + 1):
            started = time.perf_counter()
            cursor.execute(sql, [group_id, *params, before])
            cursor.fetchall()
            times.append(time.perf_counter() - started)
    return percentiles(times[1:])


def pages(head: int, mission: str, item: str) -> list:
    """(name, filters, before) of each page measured."""
    deep = head // 2
    return [("newest", log_page.Filters(), None), ("halfway", log_page.Filters(), deep),
            ("no event (the page's floor)", log_page.Filters(type="no.such"), None),
            ("oldest", log_page.Filters(), log_page.PAGE_SIZE + 10),
            *[(f"{name}{' halfway' if before else ''}", filters, before)
              for before in (None, deep)
              for name, filters in (
                  ("type=work.authorized", log_page.Filters(type="work.authorized")),
                  ("type=mission.created", log_page.Filters(type="mission.created")),
                  ("mission", log_page.Filters(mission=mission)),
                  ("work_item", log_page.Filters(work_item=item)),
                  ("actor=human", log_page.Filters(actor="human")),
                  ("actor=agent", log_page.Filters(actor="agent")),
                  ("actor=system", log_page.Filters(actor="system")),
                  ("type+actor (none)", log_page.Filters(type="work.progress_reported",
                                                         actor="human")),
                  ("type+actor, both common (none)", log_page.Filters(
                      type="work.progress_reported", actor="system")))]]


def scenario(events: int, renders: int, report) -> dict:
    # One Group per length, kept: a second run at the same length reuses its log.
    group = http_lifecycles.bench_group(f"bench-log-{events}")
    report(f"[log] filling {group.id}'s log to {events} events (COPY, chained)...")
    filled = log_fill.fill(group.id, max(events - group.head_sequence, 0), report)
    head = filled["head"]
    client = Client()
    client.force_login(get_user_model().objects.get(
        username=http_lifecycles.OWNER.removeprefix("user:")))
    base = reverse("dashboard:group_log", args=[group.id])

    def path(filters: log_page.Filters, before: int | None) -> str:
        query = filters.query(before)
        return f"{base}?{query}" if query else base

    # A Mission and a WorkItem from the middle of the log: their events are below `deep`.
    mission = f"bench-m{head // 2 // 1200}"
    item = f"{mission}-wi{head // 2 // 12}"
    report("[log] first render with the page's caches empty (chain verified from #1)...")
    cache.delete_many([log_page.chain_key(group.id), f"mw:dashboard:types:{group.id}"])
    first = timed_get(client, base)
    # The chain is checked CHAIN_BUDGET events a render: the renders until it is all.
    catching_up, renders_to_verify = 0.0, 1
    while (cache.get(log_page.chain_key(group.id)) or {}).get("through", head) < head:
        catching_up += timed_get(client, base)
        renders_to_verify += 1
    rng = random.Random(27)
    rows = []
    for name, filters, before in pages(head, mission, item):
        target = path(filters, before)
        sql, shown, size = statements(client, target)
        CPU.clear()
        warm = [timed_get(client, target) for _ in range(renders)]
        warm_cpu = list(CPU)
        cold = [timed_get(client, path(filters, rng.randrange(PAGE_FLOOR, head)))
                for _ in range(max(renders // 2, 1))]
        raw = raw_select(group.id, filters, before if before is not None else head + 1, renders)
        plans = [{"sql": s, "plan": explain(s)} for s in sql if reads_log(s)]
        rows.append({"page": name, "path": target, "events": shown, "kilobytes":
                     round(size / 1000, 1), "queries": len(sql), "warm": percentiles(warm),
                     "warmCpu": percentiles(warm_cpu),
                     "cold": percentiles(cold), "raw": raw, "plans": plans})
        report(f"  {name:<30} warm {rows[-1]['warm']['p50Ms']:>7}/{rows[-1]['warm']['p95Ms']:<7}"
               f" cpu {rows[-1]['warmCpu']['p50Ms']:>6} cold {rows[-1]['cold']['p50Ms']:>7}/"
               f"{rows[-1]['cold']['p95Ms']:<7} raw "
               f"{raw['p50Ms']:>6}/{raw['p95Ms']:<6} ms  {shown} events, {len(sql)} SQL")
    report(f"[log] one event appended, then the newest page ({renders // 2 or 1} times)...")
    appended = []
    live = log_fill.appended()
    for _ in range(max(renders // 2, 1)):
        log_fill.fill(group.id, 1, analyze=False, plan=live)
        appended.append(timed_get(client, base))
    return {"scenario": "logPage", "groupId": group.id, "events": head,
            "fillSeconds": filled["seconds"], "renders": renders,
            "firstRenderMs": round(first * 1000, 1), "rendersToVerifyTheChain":
            renders_to_verify, "chainVerifiedInMs": round((first + catching_up) * 1000),
            "afterAnAppend": percentiles(appended),
            "pages": rows}


PAGE_FLOOR = log_page.PAGE_SIZE + 1  # a cold page's `before` is above the first page


def table(r: dict) -> str:
    lines = [f"\nlog page: {r['events']} events (filled in {r['fillSeconds']} s), p50/p95 ms "
             f"of {r['renders']} warm renders, {max(r['renders'] // 2, 1)} cold (another page "
             "each), the raw SELECT of the page's rows",
             f"  first render, caches empty: {r['firstRenderMs']} ms, the hash chain checked "
             f"from #1 to the head in {r['rendersToVerifyTheChain']} renders, "
             f"{r['chainVerifiedInMs']} ms in all; after one new event: "
             f"{r['afterAnAppend']['p50Ms']}/{r['afterAnAppend']['p95Ms']}",
             "  page                            warm p50/p95    CPU p50   cold p50/p95     "
             "raw p50/p95    SQL"]
    for row in r["pages"]:
        lines.append(f"  {row['page']:<30} {row['warm']['p50Ms']:>7}/{row['warm']['p95Ms']:<8}"
                     f" {row['warmCpu']['p50Ms']:>7}  {row['cold']['p50Ms']:>7}/"
                     f"{row['cold']['p95Ms']:<8} "
                     f"{row['raw']['p50Ms']:>6}/{row['raw']['p95Ms']:<7} {row['queries']}")
    lines.append("\nplans of the statements that read the log:")
    for row in r["pages"]:
        for plan in row["plans"]:
            lines.append(f"-- {row['page']}: {plan['sql']}")
            lines.extend(f"   {line}" for line in plan["plan"])
    return "\n".join(lines)
