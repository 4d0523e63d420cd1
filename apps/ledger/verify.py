"""mw_verify: the hash chain holds across the archive and the online log, and replaying
the whole history through `evolve` gives exactly the live projections (DESIGN.md: the
log is the truth). Stored snapshots must equal the replay at their sequence and carry
the authority's signature."""

import json
from datetime import datetime
from typing import Any

import orjson

from mission_weave.core import chain, state, state_documents
from mission_weave.core.evolve import evolve
from mission_weave.protocol.timefmt import parse_time

from . import history, signing_keys
from .models import Group, Snapshot
from .ports import plugged

BATCH = 2000


def apply(view: state.View, document: dict) -> None:
    """Evolve the view by one event document, the way the pipeline did when appending."""
    evolve(view, state.Event(document["type"], document["data"],
                             parse_time(document["occurredAt"]), document["missionId"],
                             document["workItemId"]))


def state_document(view: state.View) -> dict:
    """The projected state as plain JSON (the documents the live tables hold)."""
    return {"missions": [state_documents.to_doc(view.missions[k]) for k in sorted(view.missions)],
            "workItems": [state_documents.to_doc(view.items[k]) for k in sorted(view.items)],
            "proposals": [state_documents.to_doc(view.proposals[k])
                          for k in sorted(view.proposals)],
            # §13 records are JSON documents already (mission_weave/core/records.py)
            "artifacts": [view.artifacts[k] for k in sorted(view.artifacts)],
            "contextPackages": [view.packages[k] for k in sorted(view.packages)]}


def view_of(state_doc: dict) -> state.View:
    """The inverse of state_document (a snapshot's state as a starting point)."""
    return state.View(
        missions={d["id"]: state_documents.mission_from_doc(d) for d in state_doc["missions"]},
        items={d["id"]: state_documents.item_from_doc(d) for d in state_doc["workItems"]},
        proposals={d["id"]: state_documents.proposal_from_doc(d) for d in state_doc["proposals"]},
        artifacts={d["hash"]: d for d in state_doc.get("artifacts", [])},
        packages={(d["id"], d["version"]): d for d in state_doc.get("contextPackages", [])})


# What the replay reads of each event: history.COLUMNS without the group (it is the
# one replayed), the sequence second (history.rows pages by it), and `occurredAt` written
# by PostgreSQL as format_time writes it but for the fraction of a whole second
# (".000000" is dropped below). Reading it as a datetime cost psycopg more than the
# rest of the row, then format_time and parse_time again (issue 27).
REPLAY_SELECT = ("event_id, sequence, type, to_char(occurred_at AT TIME ZONE 'UTC', "
                 "'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'), actor, command_id, mission_id, "
                 "work_item_id, revision, data, prev_hash, hash")


def replay_through(group_id: str, through: int | None = None, start=None,
                   at=None) -> tuple[state.View, list, int, str]:
    """Rebuild the Group's state in memory from its history (archive, then online log)
    up to `through` (default: all), checking the chain: (view, problems, last sequence,
    its hash). `start` = (view, sequence, hash) resumes from a known state; `at` maps
    sequences to callbacks `f(view, event document)` run when the replay reaches them.

    It does per event only what the check needs: the row as text, the data parsed once
    (orjson), the wire document without `hash` built once and hashed (chain's
    link_problems, the same checks as check_chain), the time parsed once for a run of
    events written at the same moment, and the event evolved."""
    view, prev_sequence, prev_hash = start or (state.View(), 0, chain.GENESIS_HASH)
    problems, at = [], at or {}
    last_time, occurred_at, moment = None, "", datetime.min  # set by the first row
    for row in history.rows(group_id, after=prev_sequence, through=through, chunk=BATCH,
                            select=REPLAY_SELECT):
        (event_id, sequence, type_, written, actor, command_id, mission_id, work_item_id,
         revision, data, prev, hash_) = row
        if written != last_time:  # the events of one command share their moment
            last_time = written
            occurred_at = written[:-8] + "Z" if written.endswith(".000000Z") else written
            moment = parse_time(occurred_at)
        data, parsed = _parsed(data)
        body = {"id": event_id, "groupId": group_id, "sequence": sequence, "type": type_,
                "occurredAt": occurred_at, "actor": actor, "commandId": command_id,
                "missionId": mission_id, "workItemId": work_item_id, "revision": revision,
                "data": data, "prevHash": prev}
        problems += chain.link_problems(body, hash_, prev_hash, prev_sequence + 1, parsed)
        prev_hash, prev_sequence = hash_, sequence
        evolve(view, state.Event(type_, data, moment, mission_id, work_item_id))
        if sequence in at:
            at[sequence](view, {**body, "hash": hash_})
    return view, problems, prev_sequence, prev_hash


def _parsed(data) -> tuple[Any, bool]:
    """An event's data column (jsonb, read as text) and whether orjson parsed it (then it
    holds nothing but JSON's types, and is hashed without checking that again), or the
    standard library did, for what orjson refuses (a number that overflows a double):
    then the hash is computed with every check. (An integer beyond 64 bits, which the
    server never writes, orjson reads as a float: its hash is reported as not matching.)"""
    if not isinstance(data, (str, bytes)):
        return data, False
    try:
        return orjson.loads(data), True
    except orjson.JSONDecodeError:
        return json.loads(data), False


def replay(group_id: str) -> tuple[state.View, list]:
    """The whole history replayed; also checks the chain, the head and the floor."""
    checks = _snapshot_checks(group_id)
    view, problems, last, last_hash = replay_through(group_id, at=checks)
    problems += checks.problems
    group = Group.objects.get(id=group_id)
    if (group.head_sequence, group.head_hash) != (last, last_hash):
        problems.append(f"the Group head ({group.head_sequence}) is not the log's last event "
                        f"({last})")
    problems += _floor(group)
    return view, problems


def verify_group(group_id: str) -> list:
    """Every difference between the log and the live state, as sentences; [] is healthy.
    The projections compare their own tables with the replay (plugged.projections)."""
    replayed, problems = replay(group_id)
    return problems + plugged.projections.differences(group_id, replayed)


def _floor(group: Group) -> list:
    """The archive holds exactly 1..floor and the online log the rest."""
    archived = group.archived_events.order_by("-sequence").values_list("sequence", flat=True)
    online = group.events.order_by("sequence").values_list("sequence", flat=True)
    last_archived, first_online = archived.first() or 0, online.first()
    problems = []
    if last_archived != group.online_floor:
        problems.append(f"the archive ends at {last_archived}, the online floor is "
                        f"{group.online_floor}")
    if first_online is not None and first_online != group.online_floor + 1:
        problems.append(f"the online log starts at {first_online}, above the floor "
                        f"{group.online_floor} + 1")
    return problems


class _SnapshotChecks(dict):
    """sequence -> a check of the Group's snapshots at that sequence, run by the replay."""

    def __init__(self):
        super().__init__()
        self.problems = []


def _snapshot_checks(group_id: str) -> _SnapshotChecks:
    checks = _SnapshotChecks()
    for snapshot in Snapshot.objects.filter(group_id=group_id):
        document = json.loads(snapshot.document)
        if not signing_keys.verify(document):  # by its keyId: retired keys still verify
            checks.problems.append(f"snapshot {snapshot.id}: the authority signature fails")

        def check(view, event, snapshot=snapshot, document=document):
            if document["hash"] != event["hash"]:
                checks.problems.append(f"snapshot {snapshot.id}: its hash is not the event "
                                       f"hash at sequence {snapshot.sequence}")
            if document["state"] != state_document(view):
                checks.problems.append(f"snapshot {snapshot.id} differs from the replay at "
                                       f"sequence {snapshot.sequence}")
        checks[snapshot.sequence] = check
    return checks
