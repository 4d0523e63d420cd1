"""The Group log page (apps/dashboard/log_views.py, log_page.py) on PostgreSQL: the events
newest first with their data, each filter narrowing the log as the Event table does,
keyset pages that are disjoint and consecutive, the 404 for a non-member, and the hash
chain's verification: computed once per head, incrementally, and a tampered event shown
as a break."""

import re
from unittest import mock

import pytest
from django.core.cache import cache
from django.db import connection

from apps.dashboard import log_page
from apps.ledger.models import Event
from apps.work import sweeper
from mission_weave.core import chain
from tests.support import Scenario, World, later

ROW = re.compile(r'<tr data-sequence="(\d+)">')
CSRF = re.compile(r'name="csrfmiddlewaretoken" value="[^"]+"')  # masked anew each time


@pytest.fixture
def s(db, clock):
    """The Scenario's Mission (agent events), a WorkItem run by w1 whose lease the sweeper
    expires (system events), and a second Mission created by the human owner."""
    s = Scenario()
    s.item_id, _ = s.running(s.w1)
    later(clock, 301)
    sweeper.sweep()
    created = s.owner.client.post(f"/g/{s.world.group.id}/missions/new", {
        "title": "The owner's own", "mission_id": "owned", "owner": s.owner.principal,
        "coordinator": s.c.principal})
    assert created.status_code == 302
    return s


def log_url(s: Scenario, query: str = "") -> str:
    return f"/g/{s.world.group.id}/log/" + (f"?{query}" if query else "")


def html(s: Scenario, query: str = "") -> str:
    response = s.owner.client.get(log_url(s, query))
    assert response.status_code == 200, response.content[:300]
    return response.content.decode()


def shown(page: str) -> list[int]:
    return [int(sequence) for sequence in ROW.findall(page)]


def logged(s: Scenario, **where) -> list[int]:
    """The Group's sequences matching `where`, newest first, from the Event table."""
    return list(Event.objects.filter(group_id=s.world.group.id, **where)
                .order_by("-sequence").values_list("sequence", flat=True))


def link(page: str, name: str) -> str | None:
    found = re.search(rf'href="[^"?]*\?([^"]*)"[^>]*id="{name}"', page)
    return found.group(1).replace("&amp;", "&") if found else None


def tamper(sequence: int, s: Scenario) -> None:
    """Change an event's data behind the log's back: the ORM refuses, and so does the
    table's append-only trigger, set aside here for one UPDATE inside the test's
    transaction, which rolls it all back."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")  # no user triggers
        cursor.execute(f"UPDATE {Event._meta.db_table} SET data = %s::jsonb "
                       f"WHERE group_id = %s AND sequence = %s",
                       ['{"forged": true}', s.world.group.id, sequence])
        cursor.execute("SET LOCAL session_replication_role = DEFAULT")


def test_the_log_shows_every_event_newest_first_with_links_and_its_data(s):
    page = html(s)

    assert shown(page) == logged(s) == list(range(s.world.head, 0, -1))
    assert f'href="/g/{s.world.group.id}/missions/{s.mission_id}/"' in page
    assert f'href="/g/{s.world.group.id}/work-items/{s.item_id}/"' in page
    assert "&quot;title&quot;: &quot;The owner&#x27;s own&quot;" in page  # pretty JSON data
    assert "<option value=\"lease.expired\">lease.expired</option>" in page
    assert 'data-live="group"' in page and 'hx-select="#log-live"' in page


@pytest.mark.parametrize("query, where", [
    ("type=work.offered", {"type": "work.offered"}),
    ("mission=owned", {"mission_id": "owned"}),
    ("actor=human", {"actor__startswith": "user:"}),
    ("actor=agent", {"actor__startswith": "agent:"}),
    ("actor=system", {"actor": "system"}),
])
def test_each_filter_narrows_the_log(s, query, where):
    expected = logged(s, **where)

    assert expected and len(expected) < s.world.head
    assert shown(html(s, query)) == expected


def test_the_work_item_filter_and_filters_together(s):
    item = shown(html(s, f"work_item={s.item_id}"))
    both = shown(html(s, f"work_item={s.item_id}&actor=system"))

    assert item == logged(s, work_item_id=s.item_id)
    assert both == logged(s, work_item_id=s.item_id, actor="system") != []
    assert shown(html(s, "type=no.such")) == [] and shown(html(s, "actor=robot")) == logged(s)
    assert shown(html(s, "before=x")) == logged(s)


def test_pages_are_disjoint_and_consecutive_and_newer_leads_back(s, monkeypatch):
    monkeypatch.setattr(log_page, "PAGE_SIZE", 2)
    pages = [html(s)]
    while link(pages[-1], "older"):
        pages.append(html(s, link(pages[-1], "older")))

    rows = [shown(page) for page in pages]
    assert len(pages) == 4 and [len(r) for r in rows] == [2, 2, 2, 1]
    assert [r for page in rows for r in page] == logged(s)  # disjoint, consecutive, none left out
    assert link(pages[0], "newer") is None and 'data-live="group"' not in pages[1]
    assert [shown(html(s, link(page, "newer"))) for page in pages[1:]] == rows[:-1]


def test_paging_keeps_the_filters(s, monkeypatch):
    monkeypatch.setattr(log_page, "PAGE_SIZE", 2)
    agents = logged(s, actor__startswith="agent:")
    first = html(s, "actor=agent")
    second = html(s, link(first, "older"))

    assert "actor=agent" in link(first, "older")
    assert shown(first) + shown(second) == agents[:4]


def test_a_non_member_gets_the_same_404_as_for_no_group(s):
    stranger = World().human("stranger-" + s.world.group.slug)

    theirs = stranger.client.get(log_url(s))
    none = stranger.client.get("/g/no-such-group/log/")

    assert theirs.status_code == none.status_code == 404
    assert CSRF.sub("", theirs.content.decode()) == CSRF.sub("", none.content.decode())
    assert s.world.group.id not in theirs.content.decode()


def test_the_chain_is_verified_through_the_head(s):
    page = html(s)

    assert f"Hash chain verified through #{s.world.head}." in page
    assert 'data-chain="verified"' in page


def test_a_second_view_at_the_same_head_does_not_verify_again(s):
    head = s.world.head
    with mock.patch.object(chain, "check_chain", wraps=chain.check_chain) as check:
        html(s)
        first = check.call_count
        html(s, "actor=agent")
        again = check.call_count
        s.c.ok("mission.create", {"title": "One more", "ownerId": s.owner.principal,
                                  "coordinatorId": s.c.principal})
        moved = html(s)

    assert first == head  # one check per event, as verify.replay_through does
    assert again == first  # the cached verdict at this head
    assert check.call_count == first + 1  # a new head checks only the new event
    assert f"verified through #{s.world.head}." in moved


def test_a_tampered_event_shows_once_the_cached_verdict_is_cleared(s):
    html(s)
    tamper(2, s)
    cached = html(s)
    cache.delete(log_page.chain_key(s.world.group.id))
    cleared = html(s)

    assert f"verified through #{s.world.head}." in cached  # verified before the change
    assert 'data-chain="broken"' in cleared and 'role="alert"' in cleared
    assert "Hash chain broken at #2</strong>: sequence 2: hash does not match its content" \
        in cleared
    assert "Verified through #1 only." in cleared


def test_a_tampered_event_after_the_verified_head_shows_when_the_head_moves(s):
    html(s)
    head = s.c.ok("mission.create", {"title": "One more", "ownerId": s.owner.principal,
                                     "coordinatorId": s.c.principal})[0]["sequence"]
    tamper(head, s)
    page = html(s)

    assert f"Hash chain broken at #{head}</strong>" in page
    assert f"Verified through #{head - 1} only." in page


def test_a_cached_verdict_from_another_log_under_the_same_id_is_not_trusted(s):
    # A shared Redis outlives a reset database: the entry names a prefix this log lacks.
    cache.set(log_page.chain_key(s.world.group.id),
              {"through": s.world.head + 5, "hash": "0" * 64, "head": s.world.head + 5,
               "broken": None}, timeout=None)
    longer = html(s)
    cache.set(log_page.chain_key(s.world.group.id),
              {"through": 1, "hash": "f" * 64, "head": 1, "broken": None}, timeout=None)
    other_anchor = html(s)

    assert f"Hash chain verified through #{s.world.head}." in longer
    assert f"Hash chain verified through #{s.world.head}." in other_anchor


def test_a_long_chain_is_checked_a_budget_of_events_a_view(s, monkeypatch):
    # issue 27: a Group's first view checks at most CHAIN_BUDGET events (1M took 20 s)
    monkeypatch.setattr(log_page, "CHAIN_BUDGET", 3)
    head = s.world.head
    views = [html(s) for _ in range((head + 2) // 3 + 1)]

    assert "Hash chain verified through #3. <strong>#4–" in views[0]
    assert f"#4–#{head} not checked yet" in views[0] and 'data-chain="verified"' in views[0]
    assert "Hash chain verified through #6." in views[1]
    assert f"Hash chain verified through #{head}." in views[-1]
    assert "not checked yet" not in views[-1]


def test_a_break_beyond_the_first_budget_shows_on_a_later_view(s, monkeypatch):
    monkeypatch.setattr(log_page, "CHAIN_BUDGET", 3)
    tamper(5, s)
    first, second = html(s), html(s)

    assert "Hash chain verified through #3." in first and 'data-chain="verified"' in first
    assert "Hash chain broken at #5</strong>" in second and "Verified through #4 only." in second


def test_large_data_is_not_read_on_a_page_and_is_on_the_events_own(s, monkeypatch):
    # issue 27: a page reads an event's data only when it is stored in DATA_BOUND bytes
    monkeypatch.setattr(log_page, "DATA_BOUND", 0)
    page = html(s)
    alone = html(s, "event=3")

    assert shown(page) == logged(s) and "<pre>" not in page
    assert 'KB, not read here)</summary><a href="?event=3" class="event-data">' in page
    assert shown(alone) == [3] and "<pre>{\n" in alone
    assert link(alone, "older") is None and shown(html(s, "event=999")) == []


def test_the_type_options_read_from_nothing_are_the_logs_types(s):
    cache.delete(f"mw:dashboard:types:{s.world.group.id}")
    page = html(s)

    types = sorted(set(Event.objects.filter(group_id=s.world.group.id)
                       .values_list("type", flat=True)))
    select = page[page.index('<select name="type">'):page.index("</select>")]
    assert re.findall(r'<option value="([^"]+)"', select) == types
    assert log_page.event_types(s.world.group.id, s.world.head) == types  # cached, the same


@pytest.mark.parametrize("data", [
    {"b": [1, 2.5, {"z": None, "a": True}], "a": {}, "é": "ü <\n\"", "l": []},
    {"tiny": 0.00001234, "huge": 1e16, "ok": 0.0001, "big": 2**70, "neg": -(2**63)},
    [], "text", 12,
])
def test_the_data_is_printed_as_json_dumps_prints_it(data):
    import json

    assert log_page.pretty(json.dumps(data)) == json.dumps(data, indent=2, ensure_ascii=False,
                                                            sort_keys=True)


def test_two_filters_without_a_common_index_page_through_windows(s, monkeypatch):
    # issue 27: type, Mission and actor kind together look at WINDOW events a page at most
    monkeypatch.setattr(log_page, "WINDOW", 2)
    type_ = Event.objects.filter(group_id=s.world.group.id, actor__startswith="agent:") \
        .order_by("-sequence").values_list("type", flat=True)[0]
    query = f"type={type_}&actor=agent"
    pages = [html(s, query)]
    while link(pages[-1], "older"):
        pages.append(html(s, link(pages[-1], "older")))

    head = s.world.head
    assert [r for page in pages for r in shown(page)] == \
        logged(s, type=type_, actor__startswith="agent:")  # each match once, in order
    assert len(pages) == (head + 1) // 2 and all('id="log-window"' in page for page in pages)
    assert f"this one at #{head - 1}–#{head}." in pages[0]
    assert link(pages[1], "newer") == query  # the window above the second is the newest
    assert link(pages[2], "newer") == f"{query}&before={head - 1}"
    assert 'id="log-window"' not in html(s, "type=work.offered")  # one filter: its index
