"""The Group log page's reads (issue 13): the Group's whole history, the archive and the
online log together (apps/ledger/history.py), newest first, one page at a time, filtered
by event type, Mission, WorkItem and actor kind; and how far its hash chain is verified,
by the chain check mw_verify runs (apps/ledger/verify.py replay_through).

At any length of log (issue 27: under 10 ms at 1,000,000 events), every statement is an
index range read in sequence order stopped by a LIMIT: a page is a keyset (`sequence <
before`, never OFFSET, no COUNT(*)), each filter has an index that leads with the Group
and ends with the sequence (apps/ledger/migrations/0007_log_page_indexes.py; the
WorkItem's is in the models), and the page reads only the columns it shows, an event's
data only when it is stored in at most DATA_BOUND bytes. The rows are written here as
one string each (mission_markup's escape and URL maker), as the template wrote them."""

import json
import math
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from urllib.parse import urlencode

import orjson
from django.core.cache import cache
from django.utils.safestring import SafeString, mark_safe

from apps.ledger import db, history
from apps.ledger.models import Group
from mission_weave.core import chain
from mission_weave.protocol.timefmt import format_time

from .access import Viewer
from .mission_markup import e, url_maker
from .templatetags.dashboard import when

PAGE_SIZE = 50
# An event's data is read and shown on the page when it is stored in at most this many
# bytes (pg_column_size: compressed, read without detoasting); a larger one shows its
# size and a link to its own page (the `event` filter), where it is read whole.
DATA_BOUND = 16_384

# With two or more of the type, Mission and actor kind filters (and no WorkItem or event),
# no one index serves them together: the page reads one filter's index in order and
# checks the others, which for two common filters that never meet is every event of one
# of them (at 1,000,000 events: 215 ms). Such a page looks at the WINDOW events below its
# `before` at most, says so, and its "older" link goes on below them even when fewer
# than PAGE_SIZE matched there.
WINDOW = 10_000

# Actor kind -> the part of the actor before its colon (what the actor kind index holds:
# split_part(actor, ':', 1)), and the condition the filter always meant, kept beside it.
ACTOR_KINDS = {"human": ("user", "actor LIKE %s", "user:%"),
               "agent": ("agent", "actor LIKE %s", "agent:%"),
               "system": ("system", "actor = %s", "system")}


@dataclass(frozen=True)
class Filters:
    """What the page narrows the log to; an empty field does not narrow."""

    type: str = ""
    mission: str = ""
    work_item: str = ""
    actor: str = ""  # a key of ACTOR_KINDS
    event: int | None = None  # one event, its data read whatever its size

    @classmethod
    def from_query(cls, query) -> "Filters":
        def text(name: str) -> str:
            return query.get(name, "").strip()

        actor = query.get("actor", "")
        event = query.get("event", "")
        return cls(type=text("type"), mission=text("mission"), work_item=text("work_item"),
                   actor=actor if actor in ACTOR_KINDS else "",
                   event=int(event) if event.isascii() and event.isdigit() and len(event) < 19
                   else None)

    def sql(self) -> tuple[str, list]:
        """The WHERE conditions (after group_id) for both tables, and their parameters."""
        conditions: list[str] = ["TRUE"]
        params: list = []
        for column, value in (("type", self.type), ("mission_id", self.mission),
                              ("work_item_id", self.work_item)):
            if value:
                conditions.append(f"{column} = %s")
                params.append(value)
        if self.actor:
            kind, condition, param = ACTOR_KINDS[self.actor]
            conditions += ["split_part(actor, ':', 1) = %s", condition]
            params += [kind, param]
        if self.event is not None:
            conditions.append("sequence = %s")
            params.append(self.event)
        return " AND ".join(conditions), params

    @property
    def windowed(self) -> bool:
        """Whether a page looks at WINDOW events at most (see WINDOW)."""
        return (not self.work_item and self.event is None
                and sum(1 for value in (self.type, self.mission, self.actor) if value) >= 2)

    def query(self, before: int | None = None) -> str:
        """The page's query string with these filters (and `before`, for paging)."""
        fields = {name: value for name, value in asdict(self).items()
                  if value is not None and value != ""}
        if before is not None:
            fields["before"] = before
        return urlencode(fields)


def log_page(viewer: Viewer, filters: Filters, before: int | None) -> dict:
    """One page: up to PAGE_SIZE events with sequence < `before` (None: the newest),
    newest first, and the query strings of the pages around it (None: no such page)."""
    head, head_hash, floor = Group.objects.values_list(
        "head_sequence", "head_hash", "online_floor").get(id=viewer.group_id)
    where, params = filters.sql()
    bound = DATA_BOUND if filters.event is None else 2**31 - 1
    columns = (f"sequence, type, occurred_at, actor, mission_id, work_item_id, "
               f"CASE WHEN pg_column_size(data) <= {bound} THEN data END, "
               f"pg_column_size(data)")
    top = min(before, head + 1) if before is not None else head + 1
    condition, values = f"{where} AND sequence < %s", [*params, top]
    low = max(top - WINDOW, 1) if filters.windowed else None
    if low is not None:
        condition, values = f"{condition} AND sequence >= %s", [*values, low]
    rows = _ordered(viewer.group_id, columns, condition, values, "DESC")
    events = rows[:PAGE_SIZE]
    older: str | None = None
    if len(rows) > PAGE_SIZE:
        older = filters.query(events[-1][0])
    elif low is not None and low > 1:  # below a window, the next window
        older = filters.query(low)
    newer = (_newer(viewer.group_id, filters, events, before) if low is None
             else _newer_window(filters, top, head, before))
    return {"rows": _rows(viewer.group_id, filters, events), "events": len(events),
            "filters": filters, "types": event_types(viewer.group_id, head),
            "actor_kinds": list(ACTOR_KINDS), "newest": before is None, "older": older,
            "newer": newer, "window": (low, top - 1) if low is not None else None,
            "window_size": WINDOW,
            "online_floor": floor,
            "chain": chain_verification(viewer.group_id, head, head_hash),
            "chain_budget": CHAIN_BUDGET}


def _newer(group_id: str, filters: Filters, events: list, before: int | None) -> str | None:
    """The page of the PAGE_SIZE events just above this one: `before` the next event
    above those, or the newest page when there are no more."""
    if before is None:
        return None
    where, params = filters.sql()
    top = events[0][0] if events else before - 1
    above = _ordered(group_id, "sequence", f"{where} AND sequence > %s", [*params, top], "ASC")
    if not above:
        return None
    return filters.query(above[-1][0] if len(above) > PAGE_SIZE else None)


def _newer_window(filters: Filters, top: int, head: int, before: int | None) -> str | None:
    """A windowed page's newer page: the window just above this one (the newest page
    when that reaches the head)."""
    if before is None:
        return None
    return filters.query(top + WINDOW if top + WINDOW <= head else None)


def _ordered(group_id: str, columns: str, where: str, params: list, order: str) -> list:
    """The first PAGE_SIZE + 1 rows of both tables in sequence `order`, in one statement
    as history.py reads them (an event being archived is seen once). A keyset: each
    branch is ordered and limited itself, so PostgreSQL reads each table's (group,
    sequence) index from the bound on and merges; with one ORDER BY over the whole
    union it sorts every event of the Group (measured: 77 ms against 0.1 ms a page at
    100,000 events)."""
    limit = f"ORDER BY sequence {order} LIMIT {PAGE_SIZE + 1}"
    sql = (f"(SELECT {columns} FROM {history.ARCHIVE} WHERE group_id = %s AND {where} {limit}) "
           f"UNION ALL (SELECT {columns} FROM {history.EVENTS} WHERE group_id = %s AND {where} "
           f"{limit}) {limit}")
    return db.fetch(sql, [group_id, *params, group_id, *params])


def _rows(group_id: str, filters: Filters, events: list) -> SafeString:
    """The table's rows, as the template's loop wrote them, every value escaped."""
    mission_url = url_maker("mission", group_id)
    item_url = url_maker("work_item", group_id)
    shown = []
    for sequence, type_, occurred_at, actor, mission, item, data, size in events:
        number = e(sequence)
        mission_cell = f'<a href="{mission_url(mission)}">{e(mission)}</a>' if mission else ""
        item_cell = f'<a href="{item_url(item)}">{e(item)}</a>' if item else ""
        if data is None:
            data_cell = (f'<details><summary>data ({math.ceil(size / 1024)} KB, not read here)'
                         f'</summary><a href="?{e(Filters(event=sequence).query())}" '
                         f'class="event-data">this event alone, with its data</a></details>')
        else:
            data_cell = f"<details><summary>data</summary><pre>{e(pretty(data))}</pre></details>"
        shown.append(
            f'  <tr data-sequence="{number}"><td>{number}</td><td><code>{e(type_)}</code></td>'
            f"<td>{e(actor)}</td>\n      <td>{mission_cell}</td>\n      <td>{item_cell}</td>\n"
            f"      <td>{_when(occurred_at)}</td>\n      <td>{data_cell}</td></tr>\n")
    return mark_safe("".join(shown))  # every value above went through e()


def _when(moment) -> str:
    """The `when` filter's markup of a moment read from the log (an aware datetime: the
    filter's own path for it, without format_html, whose values here are digits)."""
    if not isinstance(moment, datetime):
        return when(db.aware(moment))
    moment = moment.astimezone(UTC)
    shown = moment.replace(microsecond=0, tzinfo=None).isoformat(sep=" ")
    return f'<time datetime="{format_time(moment)}">{shown} UTC</time>'


def pretty(data) -> str:
    """An event's data as the page shows it: json.dumps(indent=2, sort_keys=True,
    ensure_ascii=False) of the parsed value. orjson writes the same text some 20 times
    faster, except for floats it writes otherwise (Python's repr uses an exponent below
    1e-4 and from 1e16, orjson below 1e-5 and from 1e16 without the `+`) and integers
    beyond 64 bits, which it refuses: those go to json.dumps."""
    # json.loads, not orjson.loads, which reads an integer beyond 64 bits as a float.
    value = db.from_json(data)
    if _orjson_writes_it(value):
        return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def _orjson_writes_it(value) -> bool:
    kind = type(value)
    if kind is dict:
        return all(type(key) is str and _orjson_writes_it(item) for key, item in value.items())
    if kind is list:
        return all(_orjson_writes_it(item) for item in value)
    if kind is float:
        return value == 0 or 1e-4 <= abs(value) < 1e16
    if kind is int:
        return -(2**63) <= value < 2**63
    return kind is str or kind is bool or value is None


def event_types(group_id: str, head: int) -> list[str]:
    """The event types in the Group's history up to `head`, for the type filter. Cached
    per Group like the chain: a new head reads only the events after the last it read.
    With nothing cached, the types are read by a skip scan of the (group, type,
    sequence) indexes, one probe per type (a DISTINCT over the whole log measured 72 ms
    at 200,000 events)."""
    key = f"mw:dashboard:types:{group_id}"
    known = cache.get(key)
    if known is None or known["through"] > head:  # none yet, or from a log since reset
        known = {"through": head, "types": _all_types(group_id)}
        cache.set(key, known, timeout=None)
    if known["through"] < head:
        sql = (f"SELECT DISTINCT type FROM (SELECT type FROM {history.ARCHIVE} WHERE "
               f"group_id = %s AND sequence > %s UNION ALL SELECT type FROM {history.EVENTS} "
               f"WHERE group_id = %s AND sequence > %s) AS logged")
        found = {type_ for (type_,) in db.fetch(sql, [group_id, known["through"]] * 2)}
        known = {"through": head, "types": sorted(found.union(known["types"]))}
        cache.set(key, known, timeout=None)
    return known["types"]


def _all_types(group_id: str) -> list[str]:
    """Every type in both tables of the Group's log: a recursive skip scan, the next
    type above the last found, each one index probe."""
    found: set[str] = set()
    for table in (history.ARCHIVE, history.EVENTS):
        sql = (f"WITH RECURSIVE t(type) AS ((SELECT type FROM {table} WHERE group_id = %s "
               f"ORDER BY type LIMIT 1) UNION ALL SELECT (SELECT type FROM {table} WHERE "
               f"group_id = %s AND type > t.type ORDER BY type LIMIT 1) FROM t "
               f"WHERE t.type IS NOT NULL) SELECT type FROM t WHERE type IS NOT NULL")
        found.update(type_ for (type_,) in db.fetch(sql, [group_id, group_id]))
    return sorted(found)


# --- the hash chain ---------------------------------------------------------------------

# Events checked by one render at most: a Group seen for the first time (or after its
# cache entry is lost) is verified over several renders, not in one (1,000,000 events
# took 20 s in one render), each render's check starting where the last one stopped.
CHAIN_BUDGET = 10_000

def chain_key(group_id: str) -> str:
    return f"mw:dashboard:chain:{group_id}"


def chain_verification(group_id: str, head: int, head_hash: str) -> dict:
    """{through, hash, head, broken}: the chain holds for events 1..through (whose last
    hash is `hash`), checked as far as the head; `broken` = {sequence, problems} where it
    does not, else None.

    Incremental: the log is append-only, so a verified prefix stays verified; the cache
    keeps one entry per Group, (through, hash), and a new head checks only the events
    after `through`, continuing the chain from `hash` (check_chain takes a start hash and
    sequence). A view at the same head reads nothing. Verifying the whole log on each new
    head would put time linear in the log on a page view: measured 0.6 s at 10,000
    events, 14 s at 200,000. The price: an event altered after it was verified shows
    here only once the cache entry is gone; `manage.py mw_verify` re-reads everything.
    A break is kept until then too (the log does not heal by itself). One render checks
    at most CHAIN_BUDGET events: `through` may stay below `head`, unbroken, for the next
    render to go on from."""
    known = cache.get(chain_key(group_id))
    if known is not None and not _still_anchored(group_id, known, head):
        known = None  # the cache outlived its log (a database reset under a shared Redis)
    if known is not None and (known["broken"] or known["through"] >= head):
        return known
    start = known or {"through": 0, "hash": chain.GENESIS_HASH}
    result = _verify(group_id, start["through"], start["hash"], head, head_hash)
    cache.set(chain_key(group_id), result, timeout=None)
    return result


def _still_anchored(group_id: str, known: dict, head: int) -> bool:
    """Whether the cached prefix still ends where this log has it: one indexed read."""
    if known["through"] > head:
        return False
    if known["through"] == 0:
        return True
    found = _ordered(group_id, "sequence, hash", "sequence = %s", [known["through"]], "DESC")
    return bool(found) and found[0][1] == known["hash"]


def _verify(group_id: str, through: int, last_hash: str, head: int, head_hash: str) -> dict:
    """Walk the events after `through` up to `head` (at most CHAIN_BUDGET of them) one at
    a time, as verify.replay_through does, stopping at the first that breaks the chain."""
    stop = min(head, through + CHAIN_BUDGET)
    for document in history.history(group_id, after=through, through=stop):
        problems = chain.check_chain([document], last_hash, through + 1)
        if problems:
            return _result(through, last_hash, head, {"sequence": through + 1,
                                                      "problems": problems})
        through, last_hash = document["sequence"], document["hash"]
    if stop < head and through == stop:  # the budget is spent: the next render goes on
        return _result(through, last_hash, head, None)
    # The head anchors the chain's end (verify.replay checks it too): a missing or
    # resealed last event is found only here.
    if through != head:
        return _result(through, last_hash, head, {"sequence": through + 1, "problems": [
            f"the Group head ({head}) is not the log's last event ({through})"]})
    if last_hash != head_hash:
        return _result(through - 1, None, head, {"sequence": head, "problems": [
            f"sequence {head}: its hash is not the Group head's hash"]})
    return _result(through, last_hash, head, None)


def _result(through: int, last_hash: str | None, head: int, broken: dict | None) -> dict:
    return {"through": through, "hash": last_hash, "head": head, "broken": broken}
