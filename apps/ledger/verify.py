"""mw_verify: the hash chain holds across the archive and the online log, and replaying
the whole history through `evolve` gives exactly the live projections (DESIGN.md: the
log is the truth). Stored snapshots must equal the replay at their sequence and carry
the authority's signature."""

import json

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


def replay_through(group_id: str, through: int | None = None, start=None,
                   at=None) -> tuple[state.View, list, int, str]:
    """Rebuild the Group's state in memory from its history (archive, then online log)
    up to `through` (default: all), checking the chain: (view, problems, last sequence,
    its hash). `start` = (view, sequence, hash) resumes from a known state; `at` maps
    sequences to callbacks `f(view, event document)` run when the replay reaches them."""
    view, prev_sequence, prev_hash = start or (state.View(), 0, chain.GENESIS_HASH)
    problems, at = [], at or {}
    for document in history.history(group_id, after=prev_sequence, through=through,
                                    chunk=BATCH):
        problems += chain.check_chain([document], prev_hash, prev_sequence + 1)
        prev_hash, prev_sequence = document["hash"], document["sequence"]
        apply(view, document)
        if prev_sequence in at:
            at[prev_sequence](view, document)
    return view, problems, prev_sequence, prev_hash


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
