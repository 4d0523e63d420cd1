"""A Mission's decisions as its log holds them: every human decision with its reason, who
took it and when, in order; and whether the MissionOwner's latest refusal of the final
Approval has been answered.

`mission_events` reads the Mission's events of the types asked for, from the online log
and the archive together, in one statement (never a query per decision); the rest is pure
and works on what it returns: dicts with the event's `sequence`, `type`, `actor`,
`occurred_at` (a datetime), `command_id`, `mission_id`, `work_item_id` and `data`.

A refused final Approval (`mission.approval_refused`) is *answered* by the first event
after it that changes the Mission's work (ANSWERS): a WorkItem authorized in it, a
contract revised, a result submitted or accepted, a WorkItem cancelled. Until then it
waits on the Coordinator, and the final Approval is not in the owner's "Waiting on me"
(inbox.py). A later refusal starts again."""

from django.db.models import Q

from apps.ledger.models import ArchivedEvent, Event
from mission_weave.core.waiting import ANSWERS, REFUSED

APPROVED = "mission.approved"
GRANTED, EXECUTION_REFUSED = "approval.execution_granted", "approval.execution_refused"
VERIFIED, FAILED, CANCELLED = "work.verified", "work.failed", "work.cancelled"
MISSION_ENDS = ("mission.failed", "mission.cancelled")
# Decisions only a human takes here (the MissionOwner is a human) and those a human may
# take (a human Coordinator's acceptance, failure, cancellation).
OWNERS = (APPROVED, REFUSED, GRANTED, EXECUTION_REFUSED)
BY_HUMANS = (VERIFIED, FAILED, CANCELLED)
DECISIONS = (*OWNERS, *BY_HUMANS, *MISSION_ENDS)
COLUMNS = ("sequence", "type", "actor", "occurred_at", "command_id", "mission_id",
           "work_item_id", "data")


def mission_events(group_id: str, mission_id: str, item_ids, types) -> list[dict]:
    """The Mission's events of `types` in sequence order, archived ones included: those of
    its WorkItems (through the (group, work_item_id) index) and its own."""
    return _read(Q(group_id=group_id, mission_id=mission_id, type__in=list(types))
                 & (Q(work_item_id__in=list(item_ids)) | Q(work_item_id__isnull=True)))


def _read(where: Q) -> list[dict]:
    """The events matching `where` in the online log and the archive, in one statement
    (an event being archived meanwhile is seen once), in sequence order."""
    rows = (Event.objects.filter(where).values_list(*COLUMNS)
            .union(ArchivedEvent.objects.filter(where).values_list(*COLUMNS), all=True)
            .order_by("sequence"))
    return [dict(zip(COLUMNS, row)) for row in rows]


def human(actor: str) -> bool:
    return actor.startswith("user:")


def decisions(events: list) -> list[dict]:
    """Every decision among `events` (one Mission's, in sequence order, of DECISIONS and
    ANSWERS), oldest first, as the Mission page lists them: {event, kind, title, reason,
    item, details}. The WorkItems a Mission's end failed or cancelled are listed under it,
    not as decisions of their own; a refusal says what answered it."""
    entries: list[dict] = []
    ended: dict[str, list[dict]] = {}
    for event in events:
        kind, data = event["type"], event["data"]
        if kind in (FAILED, CANCELLED) and data.get("cause"):
            ended.setdefault(event["command_id"], []).append(event)  # by the Mission's end
            continue
        if kind not in DECISIONS or (kind in BY_HUMANS and not human(event["actor"])):
            continue
        entries.append(_entry(event))
    for entry in entries:
        event = entry["event"]
        if event["type"] in MISSION_ENDS:
            entry["ended"] = [(e["work_item_id"], e["type"].split(".")[1])
                              for e in ended.get(event["command_id"], [])]
        if event["type"] == REFUSED:
            entry["answer"] = next((e for e in events if e["sequence"] > event["sequence"]
                                    and e["type"] in ANSWERS), None)
    return entries


TITLES = {APPROVED: "Approved the Mission", REFUSED: "Refused the final Approval",
          GRANTED: "Granted execution approval", EXECUTION_REFUSED: "Refused execution",
          VERIFIED: "Accepted the result", FAILED: "Failed the result",
          CANCELLED: "Cancelled the WorkItem", "mission.failed": "Failed the Mission",
          "mission.cancelled": "Cancelled the Mission"}


def _entry(event: dict) -> dict:
    kind, data = event["type"], event["data"]
    entry = {"event": event, "kind": kind.replace(".", "-"), "title": TITLES[kind],
             "item": event["work_item_id"], "reason": None, "details": [],
             "evidence": [], "per_item": [], "ended": [], "answer": None}
    if kind == APPROVED:
        entry["reason"] = data.get("comment")
    elif kind == REFUSED:
        entry["reason"] = data.get("reason")
        entry["per_item"] = data.get("workItems", [])
    elif kind == GRANTED:
        entry["reason"] = data.get("comment")
        entry["details"].append(f"for contract revision {data.get('contractRevision')}")
    elif kind == EXECUTION_REFUSED:
        entry["reason"] = data.get("reason")
        entry["details"].append(f"of contract revision {data.get('contractRevision')}")
    elif kind == VERIFIED:
        entry["evidence"] = data.get("evidence", [])
        review = data.get("review") or {}
        if data.get("childMissionId"):
            entry["details"].append(f"by the Approval of its child Mission "
                                    f"{data['childMissionId']}")
        if review:
            entry["details"].append(f"the review's evaluation then: {review.get('verdict')}")
            if review.get("integrity") not in (None, "pass"):
                entry["details"].append(f"artifact integrity {review['integrity']}, "
                                        "accepted over it")
            if review.get("overridden"):
                entry["details"].append("overriding " + ", ".join(review["overridden"]))
    elif kind == FAILED:
        entry["reason"] = data.get("reason")
        entry["evidence"] = data.get("evidence", [])
        if data.get("permanent"):
            entry["details"].append("permanent: no retry")
    else:  # work.cancelled, mission.failed, mission.cancelled
        entry["reason"] = data.get("reason")
    return entry
