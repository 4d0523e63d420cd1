"""The Group log page's reads (issue 13): the Group's whole history, the archive and the
online log together (apps/ledger/history.py), newest first, one page at a time, filtered
by event type, Mission, WorkItem and actor kind; and how far its hash chain is verified,
by the chain check mw_verify runs (apps/ledger/verify.py replay_through)."""

import json
from dataclasses import asdict, dataclass
from urllib.parse import urlencode

from django.core.cache import cache

from apps.ledger import db, history
from apps.ledger.models import Group
from mission_weave.core import chain

from .access import Viewer

PAGE_SIZE = 50

# Actor kind -> (SQL condition on the actor column, its parameter).
ACTOR_KINDS = {"human": ("actor LIKE %s", "user:%"), "agent": ("actor LIKE %s", "agent:%"),
               "system": ("actor = %s", "system")}


@dataclass(frozen=True)
class Filters:
    """What the page narrows the log to; an empty field does not narrow."""

    type: str = ""
    mission: str = ""
    work_item: str = ""
    actor: str = ""  # a key of ACTOR_KINDS

    @classmethod
    def from_query(cls, query) -> "Filters":
        def text(name: str) -> str:
            return query.get(name, "").strip()

        actor = query.get("actor", "")
        return cls(type=text("type"), mission=text("mission"), work_item=text("work_item"),
                   actor=actor if actor in ACTOR_KINDS else "")

    def sql(self) -> tuple[str, list]:
        """The WHERE conditions (after group_id) for both tables, and their parameters."""
        conditions, params = ["TRUE"], []
        for column, value in (("type", self.type), ("mission_id", self.mission),
                              ("work_item_id", self.work_item)):
            if value:
                conditions.append(f"{column} = %s")
                params.append(value)
        if self.actor:
            condition, param = ACTOR_KINDS[self.actor]
            conditions.append(condition)
            params.append(param)
        return " AND ".join(conditions), params

    def query(self, before: int | None = None) -> str:
        """The page's query string with these filters (and `before`, for paging)."""
        fields = {name: value for name, value in asdict(self).items() if value}
        if before is not None:
            fields["before"] = before
        return urlencode(fields)


def log_page(viewer: Viewer, filters: Filters, before: int | None) -> dict:
    """One page: up to PAGE_SIZE events with sequence < `before` (None: the newest),
    newest first, and the query strings of the pages around it (None: no such page)."""
    head, head_hash, floor = Group.objects.values_list(
        "head_sequence", "head_hash", "online_floor").get(id=viewer.group_id)
    where, params = filters.sql()
    rows = _ordered(viewer.group_id, history.SELECT, f"{where} AND sequence < %s",
                    [*params, before if before is not None else head + 1], "DESC")
    events = [_shown(history.document(row)) for row in rows[:PAGE_SIZE]]
    older = filters.query(events[-1]["sequence"]) if len(rows) > PAGE_SIZE else None
    return {"events": events, "filters": filters, "types": event_types(viewer.group_id, head),
            "actor_kinds": list(ACTOR_KINDS), "newest": before is None, "older": older,
            "newer": _newer(viewer.group_id, filters, events, before),
            "online_floor": floor,
            "chain": chain_verification(viewer.group_id, head, head_hash)}


def _newer(group_id: str, filters: Filters, events: list, before: int | None) -> str | None:
    """The page of the PAGE_SIZE events just above this one: `before` the next event
    above those, or the newest page when there are no more."""
    if before is None:
        return None
    where, params = filters.sql()
    top = events[0]["sequence"] if events else before - 1
    above = _ordered(group_id, "sequence", f"{where} AND sequence > %s", [*params, top], "ASC")
    if not above:
        return None
    return filters.query(above[-1][0] if len(above) > PAGE_SIZE else None)


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


def _shown(document: dict) -> dict:
    return {**document, "data_json": json.dumps(document["data"], indent=2, ensure_ascii=False,
                                                sort_keys=True)}


def event_types(group_id: str, head: int) -> list[str]:
    """The event types in the Group's history up to `head`, for the type filter. Cached
    per Group like the chain: a new head reads only the events after the last it read
    (a DISTINCT over the whole log measured 72 ms at 200,000 events)."""
    key = f"mw:dashboard:types:{group_id}"
    known = cache.get(key)
    if known is None or known["through"] > head:  # none yet, or from a log since reset
        known = {"through": 0, "types": []}
    if known["through"] < head:
        sql = (f"SELECT DISTINCT type FROM (SELECT type FROM {history.ARCHIVE} WHERE "
               f"group_id = %s AND sequence > %s UNION ALL SELECT type FROM {history.EVENTS} "
               f"WHERE group_id = %s AND sequence > %s) AS logged")
        found = {type_ for (type_,) in db.fetch(sql, [group_id, known["through"]] * 2)}
        known = {"through": head, "types": sorted(found.union(known["types"]))}
        cache.set(key, known, timeout=None)
    return known["types"]


# --- the hash chain ---------------------------------------------------------------------

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
    A break is kept until then too (the log does not heal by itself)."""
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
    found = history.events_between(group_id, known["through"], known["through"])
    return bool(found) and found[0]["hash"] == known["hash"]


def _verify(group_id: str, through: int, last_hash: str, head: int, head_hash: str) -> dict:
    """Walk the events after `through` up to `head` one at a time, as verify.replay_through
    does, stopping at the first that breaks the chain."""
    for document in history.history(group_id, after=through, through=head):
        problems = chain.check_chain([document], last_hash, through + 1)
        if problems:
            return _result(through, last_hash, head, {"sequence": through + 1,
                                                      "problems": problems})
        through, last_hash = document["sequence"], document["hash"]
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
