"""What each page shows, read from the projections and the log (never written here).
Each function takes a Viewer whose membership was checked, and reads that Group only."""

from apps.api import reads
from apps.api.artifact_views import HASH
from apps.api.views import audit_trail
from apps.artifacts import provenance
from apps.artifacts.models import Artifact
from apps.ledger.models import Event, Group
from apps.work import models as work_models
from mission_weave.core import state
from mission_weave.protocol.errors import ProtocolError

from . import graph
from .access import NotFound, Viewer

DECISIONS = ("work.verified", "work.failed")
BEFORE_START = frozenset({state.OPEN, state.OFFERED, state.QUEUED})


def group_page(viewer: Viewer) -> dict:
    group = Group.objects.get(id=viewer.group_id)
    missions = [state.mission_from_doc(r.doc) for r in
                work_models.Mission.objects.filter(group_id=viewer.group_id).order_by("mission_id")]
    counts = {}
    for mission_id, item_state in work_models.WorkItem.objects.filter(
            group_id=viewer.group_id).values_list("mission_id", "state"):
        counts.setdefault(mission_id, {}).setdefault(item_state, 0)
        counts[mission_id][item_state] += 1
    return {"group": group, "missions": [
        {"mission": m, "counts": sorted(counts.get(m.id, {}).items())} for m in missions]}


def get_mission(viewer: Viewer, mission_id: str) -> state.Mission:
    row = work_models.Mission.objects.filter(group_id=viewer.group_id,
                                             mission_id=mission_id).first()
    if row is None:
        raise NotFound(mission_id)
    return state.mission_from_doc(row.doc)


def mission_page(viewer: Viewer, mission_id: str) -> dict:
    mission = get_mission(viewer, mission_id)
    items = [state.item_from_doc(r.doc) for r in work_models.WorkItem.objects.filter(
        group_id=viewer.group_id, mission_id=mission_id).order_by("work_item_id")]
    by_id = {i.id: i for i in items}
    drawing = graph.layout({i.id: tuple(i.depends_on) for i in items})
    for node in drawing["nodes"]:
        node["state"] = by_id[node["id"]].state
        node["goal"] = by_id[node["id"]].contract["goal"]
    unfinished = [i.id for i in items if i.state not in (state.VERIFIED, state.CANCELLED)]
    approval = Event.objects.filter(group_id=viewer.group_id, mission_id=mission_id,
                                    type="mission.approved").order_by("-sequence").first()
    return {"mission": mission, "items": items, "graph": drawing, "unfinished": unfinished,
            "approval": approval,
            "can_approve": viewer.owns(mission) and mission.state == state.MISSION_ACTIVE}


def work_item(viewer: Viewer, item_id: str) -> state.WorkItem:
    row = work_models.WorkItem.objects.filter(group_id=viewer.group_id,
                                              work_item_id=item_id).first()
    if row is None:
        raise NotFound(item_id)
    return state.item_from_doc(row.doc)


def artifacts_of(viewer: Viewer, item: state.WorkItem) -> list:
    """The artifacts published for the item or cited by its submission, with their
    manifests' summary (hash, media type, size, producer, sources)."""
    cited = set((item.submission or {}).get("artifacts", []))
    for record in (item.submission or {}).get("evidence", []):
        cited.update(record.get("artifacts", []))
    rows = Artifact.objects.filter(group_id=viewer.group_id, work_item_id=item.id) | \
        Artifact.objects.filter(group_id=viewer.group_id, hash__in=sorted(cited))
    found = []
    for row in rows.order_by("recorded_at", "hash").distinct():
        summary = provenance.summary(row.doc)
        found.append({**summary, "size": row.doc["manifest"].get("size"),
                      "submitted": row.hash in cited})
    missing = sorted(cited - {a["hash"] for a in found})
    return found + [{"hash": h, "missing": True, "submitted": True} for h in missing]


def criteria_rows(item: state.WorkItem) -> list:
    """Per acceptance criterion: the submitted Evidence citing it, the check, the
    reviewer Evidence, and the latest evaluation's verdict and why (§13.2)."""
    submission = item.submission or {}
    review = item.review or {}
    evaluation = {c["id"]: c for c in (review.get("evaluation") or {}).get("criteria", [])}
    reviewer = {e["id"]: e for e in review.get("reviewerEvidence", [])}
    rows = []
    for criterion in item.contract["acceptanceCriteria"]:
        judged = evaluation.get(criterion["id"])
        rows.append({
            "criterion": criterion,
            "submitted": [e for e in submission.get("evidence", [])
                          if criterion["id"] in e["criteria"]],
            "reviewer": [reviewer[i] for i in (judged or {}).get("reviewerEvidence", [])
                         if i in reviewer],
            "check": (judged or {}).get("check"),
            "verdict": judged["verdict"] if judged else "pending",
            "basis": judged["basis"] if judged else "not evaluated yet",
            "decided_by": (judged or {}).get("decidedBy"),
        })
    return rows


def decision(trail: dict) -> dict | None:
    """The latest human or agent decision on a submission (work.verified / work.failed)."""
    decided = [e for e in trail["events"] if e["type"] in DECISIONS]
    return decided[-1] if decided else None


def overridden_by_acceptance(item: state.WorkItem, evaluation: dict | None) -> list:
    """The criteria an acceptance would override (every one when artifact integrity
    failed), as mission_weave/core/commands/review.py acceptance() counts them."""
    if not evaluation:
        return []
    if evaluation["integrity"] == "fail":
        return list(item.criteria_ids)
    return list(evaluation["failing"])


def work_item_page(viewer: Viewer, item_id: str) -> dict:
    item = work_item(viewer, item_id)
    mission = get_mission(viewer, item.mission_id)
    trail = audit_trail(viewer.group_id, item_id)
    review = item.review or {}
    evaluation = review.get("evaluation")
    submitted = item.state == state.SUBMITTED
    risk = item.contract.get("risk", {})
    return {
        "item": item, "read": reads.work_item(item), "mission": mission,
        "artifacts": artifacts_of(viewer, item), "criteria": criteria_rows(item),
        "review": review, "evaluation": evaluation, "trail": trail,
        "decision": decision(trail),
        "can_decide": viewer.coordinates(mission) and submitted,
        "failing": overridden_by_acceptance(item, evaluation),
        "can_grant": (viewer.owns(mission) and risk.get("requiresExecutionApproval")
                      and not item.execution_approved and item.state in BEFORE_START),
    }


def artifact_page(viewer: Viewer, name: str) -> dict:
    if not HASH.match(name):
        raise NotFound(name)
    try:
        return {"provenance": provenance.graph(viewer.group_id, name)}
    except ProtocolError as error:  # NOT_FOUND: unknown in this Group
        raise NotFound(name) from error
