"""The reads Agents poll are index scans that stop at the page's end, however long the
Group's tables: no sort, no filter over rows outside the page. The tables are filled in
SQL (copies of a real row) and analyzed, so the planner chooses as it would in use."""

from django.db import connection

from apps.ledger import feed
from apps.work.models import WorkItem
from tests.support import Scenario


def test_an_agents_queue_is_read_in_index_order(db, clock):
    """state=queued&owner=me&order=priority, over 4,000 WorkItems of the Group."""
    s = Scenario()
    s.queued(urgency="low")
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO work_workitem (group_id, work_item_id, mission_id, state, owner, "
            "ownership_epoch, revision, urgency_rank, impact_rank, deadline, doc, updated_at) "
            "SELECT group_id, work_item_id || '-' || n, mission_id, "
            "(ARRAY['queued', 'active', 'verified'])[n %% 3 + 1], "
            "CASE WHEN n %% 5 = 0 THEN owner ELSE owner || n %% 5 END, "
            "ownership_epoch, revision, n %% 4, n %% 3, deadline + n * interval '1 minute', "
            "doc, updated_at FROM work_workitem, generate_series(1, 4000) AS n "
            "WHERE group_id = %s", [s.world.group.id])
        cursor.execute("ANALYZE work_workitem")
    rows = WorkItem.objects.filter(group_id=s.world.group.id, state="queued",
                                   owner=s.w1.name).in_priority_order()[:51]
    plan = rows.explain()
    assert "workitem_queue" in plan and "Sort" not in plan, plan
    assert [r.work_item_id for r in rows] == [r.work_item_id for r in sorted(
        WorkItem.objects.filter(group_id=s.world.group.id, state="queued", owner=s.w1.name),
        key=lambda r: (r.urgency_rank, r.impact_rank, r.deadline, r.work_item_id))][:51]


def test_an_events_page_is_read_in_index_order(db, clock):
    """GET .../events?after=N (and the WebSocket's catch-up), over 20,000 events."""
    s = Scenario()
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO ledger_event (group_id, sequence, event_id, type, occurred_at, actor, "
            "command_id, mission_id, work_item_id, revision, data, prev_hash, hash) "
            "SELECT group_id, sequence + n, event_id || '-' || n, type, occurred_at, actor, "
            "command_id, mission_id, work_item_id, revision, data, prev_hash, hash "
            "FROM ledger_event, generate_series(1, 20000) AS n WHERE group_id = %s "
            "AND sequence = 1", [s.world.group.id])
        cursor.execute("ANALYZE ledger_event")
        sql = feed.PAGE_SQL.format(expression="e.hash", groups="ledger_group",
                                   events="ledger_event")
        cursor.execute("EXPLAIN " + sql, [15000, 100, s.world.group.id])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "event_sequence_unique" in plan and "Sort  " not in plan.split("Limit")[1], plan
    page = feed.events_after(s.world.group.id, 15000, 100)
    assert [e["sequence"] for e in page] == list(range(15001, 15101))
