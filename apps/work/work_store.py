"""The work projections' repository: load the slice of state a command needs, and
write what `evolve` changed. The only code that writes Mission/WorkItem/Proposal
rows. Hot path, so plain SQL (see apps/ledger/db.py)."""

from django.db import connection

from apps.artifacts import artifact_store as artifact_store
from apps.identity.models import Agent, Membership, Presence
from apps.ledger import db
from mission_weave.core import manifests as artifact_refs
from mission_weave.core import priority, state, state_documents
from mission_weave.core.commands import Candidate, Command
from mission_weave.core.ranking import Presence as PresenceReport
from mission_weave.core.state import View

from . import models

ITEMS = models.WorkItem._meta.db_table
MISSIONS = models.Mission._meta.db_table
PROPOSALS = models.Proposal._meta.db_table

# Commands that look at a whole Mission: its dependency graph or all its WorkItems.
WHOLE_MISSION = frozenset({"work.revise_contract", "mission.approve", "mission.fail",
                           "mission.cancel"})
# Commands that end WorkItems and, with them, every child Mission below them (§10.2):
# they read the descendant child Missions and their WorkItems too.
ENDS_DESCENDANTS = frozenset({"work.cancel", "work.fail", "mission.cancel", "mission.fail"})


def _in(column: str, values) -> tuple[str, list]:
    values = sorted(values)
    if not values:
        return "1 = 0", []
    return f"{column} IN ({', '.join(['%s'] * len(values))})", values


def _add(view: View, rows) -> None:
    for kind, doc in rows:
        doc = db.from_json(doc)
        if kind == "item":
            view.items[doc["id"]] = state_documents.item_from_doc(doc)
        elif kind == "mission":
            view.missions[doc["id"]] = state_documents.mission_from_doc(doc)
        else:
            view.proposals[doc["id"]] = state_documents.proposal_from_doc(doc)


def _select(table: str, kind: str, group_id: str, condition: tuple) -> tuple[str, list]:
    where, params = condition
    return f"SELECT '{kind}', doc FROM {table} WHERE group_id = %s AND {where}", [group_id, *params]


def _fetch(view: View, *selects, ahead: list | None = None) -> list:
    """Read `selects` into `view` in one statement; `ahead`, statements run just before
    it in the same round trip, give their rows back ([rows, ...]; none without them)."""
    wanted = [s for s in selects if not s[0].endswith("1 = 0")]
    statements = list(ahead or [])
    if wanted:
        statements.append((" UNION ALL ".join(sql for sql, _ in wanted),
                           [p for _, params in wanted for p in params]))
    results = db.fetch_all(statements)
    if wanted:
        _add(view, results[-1])
    return results[:len(ahead or [])]


def load(group_id: str, command: Command) -> View:
    """The target WorkItem and its Mission in one round trip, then what else the
    command looks at (dependencies, a whole Mission, a parent, a proposal)."""
    return load_after(group_id, command, None)[1]


def load_after(group_id: str, command: Command, ahead: list | None) -> tuple[list, View]:
    """`load`, with the statements `ahead` (the pipeline's Group lock, a cached sender's
    recheck) sent in the same round trip as the first read and run before it, in order:
    ([their rows, ...], the view)."""
    body = command.body if isinstance(command.body, dict) else {}
    view = View()
    item_ids = {command.work_item_id} if command.work_item_id else set()
    if isinstance(body.get("workItemId"), str):  # a client-chosen id: is it taken?
        item_ids.add(body["workItemId"])
    contract = body.get("contract")
    if isinstance(contract, dict) and isinstance(contract.get("dependencies"), dict):
        deps = contract["dependencies"].get("workItems")
        item_ids |= {d for d in deps if isinstance(d, str)} if isinstance(deps, list) else set()
    # The Missions the body names, a client-chosen child Mission's id too: is it taken?
    mission_ids = {body[name] for name in ("missionId", "childMissionId")
                   if isinstance(body.get(name), str)}
    refs = artifact_refs.references(command.type, body)  # what a §13 document cites
    item_ids |= refs.items
    mission_ids |= refs.missions
    # A command that ends WorkItems also reads every child Mission below them: their roots
    # are known already, so in the same round trip.
    below = _descendants(group_id, command, body) if command.type in ENDS_DESCENDANTS else ()
    ahead_rows = _fetch(
        view, *_items_and_missions(group_id, item_ids),
        _select(MISSIONS, "mission", group_id, _in("mission_id", mission_ids)), *below,
        ahead=ahead)

    more = []
    if command.type in WHOLE_MISSION:
        more.append(_select(ITEMS, "item", group_id, _in("mission_id", view.missions)))
        parents = {m.parent_work_item_id for m in view.missions.values() if m.parent_work_item_id}
        more.append(_select(ITEMS, "item", group_id, _in("work_item_id", parents)))
    dependencies = {d for item in view.items.values() for d in item.depends_on} - set(view.items)
    more.append(_select(ITEMS, "item", group_id, _in("work_item_id", dependencies)))
    if isinstance(body.get("proposalId"), str):
        proposal = _in("proposal_id", [body["proposalId"]])
        more.append(_select(PROPOSALS, "proposal", group_id, proposal))
    _fetch(view, *more)
    artifact_store.load_into(view, group_id, refs)
    if command.type == "usage.record" or command.offline is not None:  # both charge usage
        _load_ancestry(group_id, view)
    return ahead_rows, view


def _descendants(group_id: str, command: Command, body: dict) -> tuple:
    """The selects of every Mission below the WorkItems a command ends (the target
    WorkItem, or every WorkItem of the target Mission), at any depth, and of their
    WorkItems: one recursive query each, read with the target in the first round trip."""
    if command.type.startswith("mission."):
        root = ("mission_id", body.get("missionId"))
    else:
        root = ("work_item_id", command.work_item_id)
    if not isinstance(root[1], str):
        return ()
    children = (f"SELECT m.mission_id FROM {MISSIONS} m JOIN {ITEMS} i "
                f"ON i.group_id = m.group_id AND i.work_item_id = m.parent_work_item_id ")
    tree = (f"WITH RECURSIVE tree(mission_id) AS ("
            f"{children}WHERE m.group_id = %s AND i.{root[0]} = %s "
            f"UNION {children}JOIN tree t ON t.mission_id = i.mission_id WHERE m.group_id = %s) "
            f"SELECT mission_id FROM tree")
    below = (f"mission_id IN ({tree})", [group_id, root[1], group_id])
    return (_select(MISSIONS, "mission", group_id, below),
            _select(ITEMS, "item", group_id, below))


def _load_ancestry(group_id: str, view: View) -> None:
    """Parent WorkItems of child Missions and their Missions, up to the root: the budget
    ancestry that usage is charged to (§11.5). One round trip per level."""
    for _ in range(64):
        parents = {m.parent_work_item_id for m in view.missions.values()
                   if m.parent_work_item_id and m.parent_work_item_id not in view.items}
        if not parents:
            return
        _fetch(view, *_items_and_missions(group_id, parents))


def _items_and_missions(group_id: str, item_ids) -> tuple:
    """The selects of some WorkItems and of their Missions (none for no WorkItems)."""
    if not item_ids:
        return ()
    items_in = _in("work_item_id", item_ids)
    missions_of_items = (f"mission_id IN (SELECT mission_id FROM {ITEMS} WHERE group_id = %s "
                         f"AND {items_in[0]})", [group_id, *items_in[1]])
    return (_select(ITEMS, "item", group_id, items_in),
            _select(MISSIONS, "mission", group_id, missions_of_items))


def load_items(group_id: str, item_ids) -> View:
    view = View()
    _fetch(view, _select(ITEMS, "item", group_id, _in("work_item_id", item_ids)))
    return view


def load_items_and_missions(group_id: str, item_ids) -> View:
    """Some WorkItems and their Missions in one round trip (the sweeper)."""
    view = View()
    _fetch(view, *_items_and_missions(group_id, item_ids))
    return view


def load_for_dispatch(group_id: str, item_ids) -> View:
    """The sweeper's automatic dispatch, under the Group lock: some WorkItems, their
    Missions and every WorkItem they depend on (a dependency missing from the view is
    refused as not met, never passed). Dependencies are in the same Mission, so one more
    read at most."""
    view = load_items_and_missions(group_id, item_ids)
    dependencies = {d for item in view.items.values() for d in item.depends_on} - set(view.items)
    _fetch(view, _select(ITEMS, "item", group_id, _in("work_item_id", dependencies)))
    return view


def load_all(group_id: str) -> View:
    """Every projected object of the Group, for mw_verify."""
    view = View()
    everything: tuple[str, list] = ("1 = 1", [])
    _fetch(view, _select(ITEMS, "item", group_id, everything),
           _select(MISSIONS, "mission", group_id, everything),
           _select(PROPOSALS, "proposal", group_id, everything))
    artifact_store.load_all_into(view, group_id)
    return view


def differences(group_id: str, replayed: View) -> list:
    """mw_verify's comparison: every way the live tables differ from `replayed`, the
    Group's log replayed through evolve, as sentences; [] when they agree."""
    live = load_all(group_id)
    problems = []
    for kind in ("missions", "items", "proposals"):
        expected, actual = getattr(replayed, kind), getattr(live, kind)
        for key in sorted(set(expected) | set(actual)):
            if key not in actual:
                problems.append(f"{kind[:-1]} {key} is in the log but not in the live table")
            elif key not in expected:
                problems.append(f"{kind[:-1]} {key} is in the live table but not in the log")
            elif state_documents.to_doc(expected[key]) != state_documents.to_doc(actual[key]):
                problems.append(f"{kind[:-1]} {key} differs from its replay")
    # The query columns must agree with the documents they are derived from.
    for row in models.WorkItem.objects.filter(group_id=group_id):
        item = replayed.items.get(row.work_item_id)
        if item is None:
            continue
        for column, value in item_columns(item).items():
            if getattr(row, column) != value:
                problems.append(f"item {item.id}: column {column} differs from its replay")
    return problems + artifact_store.verify(group_id, replayed, live)


def candidates(group_id: str, command: Command, view: View | None = None) -> dict:
    """The facts (commands.Candidate) of the agents a command may place work with:
    work.offer's named candidates, or every worker of the Group for "auto"; the actor of
    work.accept_offer (the capacity backstop, no history needed); the pending candidates
    of a work.decline_offer under autoDispatch (the next offer)."""
    body = command.body if isinstance(command.body, dict) else {}
    item = view.items.get(command.work_item_id or "") if view is not None else None
    if command.type == "work.offer":
        names = body.get("candidates")
        if names == "auto":
            return candidate_facts(group_id, None, history=True)
        if isinstance(names, list):
            return candidate_facts(group_id, [n for n in names if isinstance(n, str)],
                                   history=True)
    elif command.type == "work.accept_offer" and command.agent_id:
        return candidate_facts(group_id, [command.agent_id])
    elif command.type == "work.decline_offer" and view is not None and item is not None \
            and item.offer_queue:
        mission = view.missions.get(item.mission_id)
        if mission is not None and mission.auto_dispatch:
            return candidate_facts(group_id, item.offer_queue, history=True)
    return {}


def candidate_facts(group_id: str, agent_ids=None, history: bool = False) -> dict:
    """agent id -> Candidate for the Group's active agent members among `agent_ids`, or
    for every active worker when `agent_ids` is None: roles, Agent Card, Presence,
    current load (WorkItems owned in queued, or in active under an open lease, in any
    Group: an item whose lease timed out has no live owner, §11.5) and, with `history`,
    the WorkItems of this Group each owned last that ended verified or failed, counted by
    the capability ids their contracts required (core/ranking.py picks those that count
    for a contract). Set-based statements in one round trip. The sweeper builds its
    Context with this."""
    where = ("1 = 1", []) if agent_ids is None else _in(
        "m.principal", {f"agent:{n}" for n in agent_ids})
    members = (f"m.group_id = %s AND m.active AND {where[0]}", [group_id, *where[1]])
    agents_of_members = (f"SELECT substr(m.principal, 7) FROM {Membership._meta.db_table} m "
                         f"WHERE {members[0]} AND m.principal LIKE 'agent:%%'")
    statements = [
        (f"SELECT a.id, a.card, m.roles, p.available_slots, p.status, p.reported_at "
         f"FROM {Membership._meta.db_table} m "
         f"JOIN {Agent._meta.db_table} a ON m.principal = 'agent:' || a.id "
         f"LEFT JOIN {Presence._meta.db_table} p ON p.agent_id = a.id "
         f"WHERE {members[0]}", members[1]),
        # The load counts work in every Group, so it reads them all (once the tables are
        # distributed by Group, every shard): a statement of its own, not a subquery
        # correlated with this Group's rows, which Citus could not plan. Same round trip.
        (f"SELECT owner, count(*) FROM {ITEMS} WHERE owner IN ({agents_of_members}) "
         f"AND state IN ('queued', 'active') "
         f"AND (state = 'queued' OR lease_id IS NOT NULL) GROUP BY owner", members[1])]
    if history:
        statements.append(_history(group_id, agents_of_members, members[1]))
    rows, loads, *ended = db.fetch_all(statements)
    loads = dict(loads)
    facts = {}
    for agent_id, card, roles, slots, status, reported_at in rows:
        roles = frozenset(db.from_json(roles))
        if agent_ids is None and "worker" not in roles:
            continue
        presence = None if status is None else PresenceReport(slots, status, db.aware(reported_at))
        facts[agent_id] = (roles, db.from_json(card), presence, loads.get(agent_id, 0))
    reliability: dict[str, dict] = {}
    for owner, capabilities, item_state, count in (ended[0] if ended else ()):
        counts = reliability.setdefault(owner, {}).setdefault(
            frozenset(capabilities), {"verified": 0, "failed": 0})
        counts[item_state] = count
    return {agent_id: Candidate(agent_id, roles, card, presence, reliability.get(agent_id, {}),
                                load)
            for agent_id, (roles, card, presence, load) in facts.items()}


def _history(group_id: str, agents: str, params: list) -> tuple:
    """(owner, [capability ids its contract required], state, count) for the WorkItems of
    this Group that ended verified or failed, by the agent that owned them last, among the
    `agents` subquery's. Every such WorkItem counts, those that required no capability too
    (the owner is cleared when an item fails, never `last_owner`)."""
    required = ("ARRAY(SELECT DISTINCT c->>'id' "
                "FROM jsonb_array_elements(w.doc->'contract'->'capabilities') c ORDER BY 1)")
    return (f"SELECT w.doc->>'last_owner', {required}, w.state, count(*) FROM {ITEMS} w "
            f"WHERE w.group_id = %s AND w.state IN ('verified', 'failed') "
            f"AND w.doc->>'last_owner' IN ({agents}) GROUP BY 1, 2, 3",
            [group_id, *params])


RANK_COLUMNS = ["urgency_rank", "impact_rank", "deadline"]  # of the contract
ITEM_COLUMNS = ["mission_id", "state", "owner", "ownership_epoch", "revision", "lease_id",
                "lease_expires_at", "start_by", "blocked_until", "offers_expire_at", "retry_at",
                *RANK_COLUMNS, "doc", "updated_at"]
TIME_COLUMNS = frozenset({"lease_expires_at", "start_by", "blocked_until", "offers_expire_at",
                          "retry_at", "deadline", "updated_at"})
MISSION_COLUMNS = ["state", "title", "parent_work_item_id", "revision", "doc", "updated_at"]


def changes(group_id: str, before: View, after: View) -> list:
    """The statements that write what `evolve` changed: an upsert per table of the new
    rows and, for a WorkItem that was there before, an UPDATE of its query columns and of
    only the document members that changed (most of a document, the contract, seldom
    does: it is not serialized and parsed again for every command)."""
    statements = []
    changed = [(before.items[key], i) for key, i in after.items.items()
               if key in before.items and before.items[key] is not i]
    statements += [item_update(group_id, old, new) for old, new in changed]
    items = [i for key, i in after.items.items() if key not in before.items]
    missions = [m for key, m in after.missions.items() if before.missions.get(key) is not m]
    proposals = [p for key, p in after.proposals.items() if before.proposals.get(key) is not p]
    if items:
        statements.append(db.upsert(ITEMS, ("group_id", "work_item_id"),
                                    ["group_id", "work_item_id", *ITEM_COLUMNS],
                                    [item_values(group_id, i) for i in items]))
    if missions:
        statements.append(db.upsert(MISSIONS, ("group_id", "mission_id"),
                                    ["group_id", "mission_id", *MISSION_COLUMNS],
                                    [mission_values(group_id, m) for m in missions]))
    if proposals:
        statements.append(db.upsert(PROPOSALS, ("group_id", "proposal_id"),
                                    ["group_id", "proposal_id", "mission_id", "status", "doc"],
                                    [(group_id, p.id, p.mission_id, p.status,
                                      db.to_json(state_documents.to_doc(p))) for p in proposals]))
    statements += artifact_store.changes(group_id, before, after)
    return statements


def _time(moment):
    return connection.ops.adapt_datetimefield_value(moment)


def item_columns(item: state.WorkItem) -> dict:
    """The query columns of a WorkItem row, derived from its state."""
    lease = item.live_lease
    return {"mission_id": item.mission_id, "state": item.state, "owner": item.owner,
            "ownership_epoch": item.ownership_epoch, "revision": item.revision,
            "lease_id": lease.id if lease else None,
            "lease_expires_at": lease.expires_at if lease else None,
            "start_by": item.start_by, "blocked_until": item.blocked_until,
            "offers_expire_at": max((o.expires_at for o in item.offers if o.status == "live"),
                                    default=None) if item.state == "offered" else None,
            "retry_at": item.retry_at if item.state == "failed" else None,
            **dict(zip(RANK_COLUMNS, priority.rank(item.contract))),
            "updated_at": item.updated_at}


def item_values(group_id: str, item: state.WorkItem) -> tuple:
    columns = {**item_columns(item), "doc": db.to_json(state_documents.to_doc(item))}
    return (group_id, item.id, *(_time(columns[c]) if c in TIME_COLUMNS else columns[c]
                                 for c in ITEM_COLUMNS))


def mission_values(group_id: str, mission: state.Mission) -> tuple:
    return (group_id, mission.id, mission.state, mission.title, mission.parent_work_item_id,
            mission.revision, db.to_json(state_documents.to_doc(mission)),
            _time(mission.updated_at))


def submitted_reviews() -> list:
    """[(group id, work item id, review or None)] of every submitted WorkItem, the least
    recently updated first (the review's `resume`, apps/review/tasks.py). All of them, and
    only the review: those waiting for a reviewer or a Coordinator are the oldest, and a
    LIMIT would let them hide a newer one whose step was lost."""
    rows = db.fetch(f"SELECT group_id, work_item_id, doc -> 'review' FROM {ITEMS} "
                    f"WHERE state = %s ORDER BY updated_at", [state.SUBMITTED])
    return [(group_id, item_id, db.from_json(review) if review is not None else None)
            for group_id, item_id, review in rows]


# --- the sweeper's prepared writes (apps/work/sweeper.py, pipeline.submit_prepared) ------

# Any deadline column passed: the rows a sweep may still have something to do for.
_DUE = ("(lease_expires_at <= %s OR start_by <= %s OR blocked_until <= %s "
        "OR offers_expire_at <= %s OR retry_at <= %s)")


def _among(column: str, values) -> tuple[str, list]:
    """`column` is one of `values`: one array parameter (a statement of a thousand
    placeholders costs psycopg more to convert than the query costs to run)."""
    return f"{column} = ANY(%s)", [list(values)]


# A row's version: PostgreSQL's xmin changes with every write to the row.
_VERSION = "xmin::text"


def load_due(group_id: str, item_ids, now) -> tuple[View, dict]:
    """Those of the WorkItems with a deadline passed at `now`, their Missions, and
    {work item id: row version}. Read without the Group lock: `versions` under it
    tells the writer whether a row changed since. On PostgreSQL the WorkItems come
    without their contract (`contract` is None: most of the document, and no deadline
    rule reads it); `item_patch` never writes what was not read."""
    items_in = _among("work_item_id", item_ids)
    due = (f"group_id = %s AND {items_in[0]} AND {_DUE}",
           [group_id, *items_in[1], *[_time(now)] * 5])
    rows = db.fetch(
        f"SELECT 'item', doc - 'contract', {_VERSION} FROM {ITEMS} WHERE {due[0]} UNION ALL "
        f"SELECT 'mission', doc, NULL FROM {MISSIONS} WHERE group_id = %s AND mission_id IN "
        f"(SELECT mission_id FROM {ITEMS} WHERE {due[0]})",
        [*due[1], group_id, *due[1]])
    view, versions = View(), {}
    for kind, doc, version in rows:
        doc = db.from_json(doc)
        if kind == "item":
            view.items[doc["id"]] = state_documents.item_from_doc({"contract": None, **doc})
            versions[doc["id"]] = version
        else:
            view.missions[doc["id"]] = state_documents.mission_from_doc(doc)
    return view, versions


def versions(group_id: str, item_ids) -> dict:
    """{work item id: row version} as it is now (read under the Group lock)."""
    items_in = _among("work_item_id", item_ids)
    return dict(db.fetch(f"SELECT work_item_id, {_VERSION} FROM {ITEMS} "
                         f"WHERE group_id = %s AND {items_in[0]}", [group_id, *items_in[1]]))


_ITEM_FIELDS = tuple(state.WorkItem.__dataclass_fields__)
# The sweeper's patch (patch_items) reads WorkItems without their contract and never
# changes it (item_patch refuses), nor so the rank.
_PATCH_COLUMNS = [c for c in ITEM_COLUMNS if c != "doc" and c not in RANK_COLUMNS]


def item_patch(group_id: str, before: state.WorkItem, after: state.WorkItem,
               columns: list = _PATCH_COLUMNS) -> tuple:
    """The parameters of `patch_items` for one WorkItem that `evolve` changed: its query
    `columns` and only the document members that changed (a lease expiry leaves the
    contract, most of the document, as it was: no need to write it again). `evolve`
    replaces what it changes, so a member still the same object is unchanged."""
    changed = [f for f in _ITEM_FIELDS if getattr(before, f) is not getattr(after, f)]
    if before.contract is None and "contract" in changed:
        raise ValueError(f"WorkItem {after.id} was read without its contract")
    values = item_columns(after)
    return (*(_time(values[c]) if c in TIME_COLUMNS else values[c] for c in columns),
            db.to_json(state_documents.to_doc(after, changed)), group_id, after.id)


def _patch_sql(columns: list) -> str:
    sets = ", ".join(f"{c} = %s" for c in columns)
    return (f"UPDATE {ITEMS} SET {sets}, doc = doc || %s::jsonb "
            f"WHERE group_id = %s AND work_item_id = %s")


_UPDATE_COLUMNS = [c for c in ITEM_COLUMNS if c != "doc"]  # the rank too: a revision
# Built once: a command's UPDATE is on the hot path.
_PATCH_SQL, _UPDATE_SQL = _patch_sql(_PATCH_COLUMNS), _patch_sql(_UPDATE_COLUMNS)


def item_update(group_id: str, before: state.WorkItem, after: state.WorkItem) -> tuple:
    """A command's UPDATE of one WorkItem it changed, read whole: the rank columns are
    derived from its contract."""
    if before.contract is None:
        raise ValueError(f"WorkItem {after.id} was read without its contract")
    return _UPDATE_SQL, list(item_patch(group_id, before, after, _UPDATE_COLUMNS))


def patch_items(patches: list) -> tuple:
    """One statement (row by row, pipelined: see db.Many) writing `item_patch`es of
    existing rows; on PostgreSQL the document is merged with its changed members."""
    return db.Many((_PATCH_SQL, list(patches)))
