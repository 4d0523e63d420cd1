"""mw_verify: the hash chain holds, and replaying the log through `evolve` gives
exactly the live projections (DESIGN.md: the log is the truth)."""

from apps.work import models as work_models
from apps.work import state, store
from mission_weave.protocol.timefmt import parse_time

from . import chain
from .models import Event, Group
from .pipeline import event_document

BATCH = 2000


def replay(group_id: str) -> tuple[state.View, list]:
    """Rebuild the Group's state in memory from its log; also check the chain."""
    view, problems = state.View(), []
    prev_hash, next_sequence = chain.GENESIS_HASH, 1
    rows = Event.objects.filter(group_id=group_id).order_by("sequence")
    for row in rows.iterator(chunk_size=BATCH):
        document = event_document(row)
        problems += chain.check_chain([document], prev_hash, next_sequence)
        prev_hash, next_sequence = document["hash"], document["sequence"] + 1
        state.evolve(view, state.Event(row.type, row.data, parse_time(document["occurredAt"]),
                                       row.mission_id, row.work_item_id))
    group = Group.objects.get(id=group_id)
    if (group.head_sequence, group.head_hash) != (next_sequence - 1, prev_hash):
        problems.append(f"the Group head ({group.head_sequence}) is not the log's last event "
                        f"({next_sequence - 1})")
    return view, problems


def verify_group(group_id: str) -> list:
    """Every difference between the log and the live state, as sentences; [] is healthy."""
    replayed, problems = replay(group_id)
    live = store.load_all(group_id)
    for kind in ("missions", "items", "proposals"):
        expected, actual = getattr(replayed, kind), getattr(live, kind)
        for key in sorted(set(expected) | set(actual)):
            if key not in actual:
                problems.append(f"{kind[:-1]} {key} is in the log but not in the live table")
            elif key not in expected:
                problems.append(f"{kind[:-1]} {key} is in the live table but not in the log")
            elif state.to_doc(expected[key]) != state.to_doc(actual[key]):
                problems.append(f"{kind[:-1]} {key} differs from its replay")
    problems += _columns(group_id, replayed)
    return problems


def _columns(group_id: str, replayed: state.View) -> list:
    """The query columns must agree with the documents they are derived from."""
    problems = []
    for row in work_models.WorkItem.objects.filter(group_id=group_id):
        item = replayed.items.get(row.work_item_id)
        if item is None:
            continue
        for column, value in store.item_columns(item).items():
            if getattr(row, column) != value:
                problems.append(f"item {item.id}: column {column} differs from its replay")
    return problems
