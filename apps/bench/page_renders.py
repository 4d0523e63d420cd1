"""mw_bench --pages: the dashboard's heaviest pages, rendered in this process by Django's
test Client signed in as the MissionOwner, beside the raw SELECT of the WorkItems they
show, in the same run. The Mission page draws a graph of N WorkItems in rows of ten, each
depending on two of the row before; the WorkItem page shows the last of them.

Each page's SQL queries are counted at N and at a tenth of N (at least two rows), in a
second Mission of the same Group: a page must not spend a query per WorkItem. A third
Mission of ten times N (issue 27: 200 and 2,000) is timed too, its first render after a
change (the graph's cache cold) apart from the others; and the Group log page, whose
newest and oldest pages are timed with the query plan of its keyset read."""

import statistics
import time
import uuid

from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from apps.dashboard import log_page, mission_markup
from apps.ledger import history
from apps.work.models import WorkItem

from . import http_lifecycles

ROW = 10  # WorkItems side by side in the bench's graph


def prepare(run: str, items: int) -> dict:
    group = http_lifecycles.bench_group(f"bench-pages-{run}")
    coordinator = http_lifecycles.Agent(f"bpc-{run}", [group], ["coordinator"])
    # The small one's last WorkItem has dependencies too, so both WorkItem pages show them.
    missions = {"large": items, "small": max(items // 10, ROW + 1), "huge": items * 10}
    for mission, count in missions.items():
        _send(coordinator, group.id, "mission.create", {
            "missionId": mission, "title": f"{count} WorkItems", "ownerId": http_lifecycles.OWNER,
            "coordinatorId": f"agent:{coordinator.name}"})
        for k in range(count):
            contract = http_lifecycles.contract()
            contract["dependencies"]["workItems"] = [f"{mission}-{j}" for j in _above(k)]
            _send(coordinator, group.id, "work.authorize", {
                "workItemId": f"{mission}-{k}", "missionId": mission, "contract": contract})
    return {"groupId": group.id, "missions": missions}


def _above(k: int) -> list:
    """The two WorkItems item k depends on: the one above it and that one's right-hand
    neighbour (the row wraps round), in the row before; none in the first row."""
    if k < ROW:
        return []
    above = k - ROW
    return [above, above - above % ROW + (above + 1) % ROW]


def _send(agent, group_id: str, command_type: str, body: dict) -> None:
    _id, payload = agent.command(group_id, command_type, body)
    http_lifecycles.submit_here(agent, group_id, payload)


def queries_of(client: Client, path: str) -> tuple[int, int]:
    """The SQL queries one GET of `path` runs, and the page's size in bytes."""
    with CaptureQueriesContext(connection) as queries:
        response = client.get(path)
    if response.status_code != 200:
        raise RuntimeError(f"GET {path} answered {response.status_code}")
    return len(queries), len(response.content)


def measure(client: Client, path: str, renders: int) -> dict:
    """The median time of `renders` GETs of `path`, its size and its SQL queries."""
    queries, size = queries_of(client, path)
    times = []
    for _ in range(renders):
        started = time.perf_counter()
        client.get(path)
        times.append(time.perf_counter() - started)
    return {"p50Ms": round(statistics.median(times) * 1000, 2), "queries": queries,
            "kilobytes": round(size / 1000, 1)}


def cold_render(client: Client, path: str, renders: int) -> float:
    """The median ms of a render with the graph's cache emptied before each: what the
    first viewer after a change waits."""
    client_of_redis = cache._cache.get_client(write=True)  # type: ignore[attr-defined]
    graphs = cache.make_key(mission_markup.GRAPH_KEY + "*")
    times = []
    for _ in range(renders):
        for key in client_of_redis.scan_iter(match=graphs):  # the graphs' entries only
            client_of_redis.delete(key)
        started = time.perf_counter()
        client.get(path)
        times.append(time.perf_counter() - started)
    return round(statistics.median(times) * 1000, 2)


def log_plan(group_id: str) -> list[str]:
    """EXPLAIN of the log page's read of its newest page (apps/dashboard/log_page.py)."""
    where, params = log_page.Filters().sql()
    limit = f"ORDER BY sequence DESC LIMIT {log_page.PAGE_SIZE + 1}"
    sql = (f"EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) (SELECT {history.SELECT} FROM "
           f"{history.ARCHIVE} WHERE group_id = %s AND {where} AND sequence < %s {limit}) "
           f"UNION ALL (SELECT {history.SELECT} FROM {history.EVENTS} WHERE group_id = %s "
           f"AND {where} AND sequence < %s {limit}) {limit}")
    with connection.cursor() as cursor:
        cursor.execute(sql, [group_id, *params, 2**62, group_id, *params, 2**62])
        return [row[0] for row in cursor.fetchall()]


def raw_select(group_id: str, mission_id: str, renders: int) -> dict:
    """The rows the Mission page shows, straight out of PostgreSQL."""
    sql = (f"SELECT doc FROM {WorkItem._meta.db_table} "
           "WHERE group_id = %s AND mission_id = %s ORDER BY id")
    times = []
    with connection.cursor() as cursor:
        for _ in range(renders + 1):  # the first warms the plan cache, as measure's does
            started = time.perf_counter()
            cursor.execute(sql, [group_id, mission_id])
            rows = cursor.fetchall()
            times.append(time.perf_counter() - started)
    return {"p50Ms": round(statistics.median(times[1:]) * 1000, 3), "rows": len(rows)}


def scenario(items: int, renders: int, report) -> dict:
    run = uuid.uuid4().hex[:8]
    report(f"[pages] authorizing {items} WorkItems in one Mission...")
    prepared = prepare(run, items)
    group_id, missions = prepared["groupId"], prepared["missions"]
    client = Client()
    client.force_login(get_user_model().objects.get(
        username=http_lifecycles.OWNER.removeprefix("user:")))
    def mission_path(mission):
        return reverse("dashboard:mission", args=[group_id, mission])

    def item_path(mission):  # the Mission's last WorkItem
        return reverse("dashboard:work_item", args=[group_id, f"{mission}-{missions[mission] - 1}"])

    report(f"[pages] rendering each page {renders} times...")
    mission_page = measure(client, mission_path("large"), renders)
    item_page = measure(client, item_path("large"), renders)
    mission_page["queriesAtATenth"] = queries_of(client, mission_path("small"))[0]
    item_page["queriesAtATenth"] = queries_of(client, item_path("small"))[0]
    raw = raw_select(group_id, "large", renders)
    mission_page["coldP50Ms"] = cold_render(client, mission_path("large"), max(renders // 4, 1))
    report(f"[pages] the Mission of {missions['huge']} WorkItems...")
    huge_page = measure(client, mission_path("huge"), renders)
    huge_page["coldP50Ms"] = cold_render(client, mission_path("huge"), max(renders // 4, 1))
    log_path = reverse("dashboard:group_log", args=[group_id])
    log_newest = measure(client, log_path, renders)
    log_oldest = measure(client, f"{log_path}?before=60", renders)
    plan = log_plan(group_id)
    report(f"  Mission page, {items}: {mission_page['p50Ms']} ms (cold graph cache "
           f"{mission_page['coldP50Ms']}); {missions['huge']}: {huge_page['p50Ms']} ms "
           f"(cold {huge_page['coldP50Ms']}), {huge_page['queries']} SQL queries, "
           f"{huge_page['kilobytes']} KB\n"
           f"  Group log page ({log_newest['queries']} SQL queries): newest "
           f"{log_newest['p50Ms']} ms, oldest {log_oldest['p50Ms']} ms\n"
           "  its keyset read:\n    " + "\n    ".join(plan))
    return {"scenario": "pages", "workItems": items, "tenth": missions["small"],
            "renders": renders,
            "missionPage": mission_page, "workItemPage": item_page, "raw": raw,
            "huge": missions["huge"], "missionPageAtTenTimes": huge_page,
            "logPage": {"newest": log_newest, "oldest": log_oldest, "plan": plan},
            "missionPageOverRaw": round(mission_page["p50Ms"] / raw["p50Ms"], 1),
            "workItemPageOverRaw": round(item_page["p50Ms"] / raw["p50Ms"], 1)}
