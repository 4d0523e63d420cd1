"""The review of a WorkItem's submission (§13.2) as the API shows it: the contract's
criteria, the current submission, its review (step outcomes, reviewer Evidence, the
latest evaluation) and the history of every submission's review events."""

from apps.ledger.models import Event
from apps.ledger.pipeline import event_document
from mission_weave.core import evidence_review
from mission_weave.core.state import WorkItem

HISTORY_TYPES = ("work.submitted", *evidence_review.ORDER, evidence_review.EVIDENCE_RECORDED,
                 "work.verified", "work.failed")


def build(group_id: str, item: WorkItem) -> dict:
    """The review document of `item`, a WorkItem of the Group (the Review schema)."""
    events = Event.objects.filter(group_id=group_id, work_item_id=item.id,
                                  type__in=HISTORY_TYPES).order_by("sequence")
    return {
        "workItemId": item.id, "state": item.state, "revision": item.revision,
        "contractRevision": item.contract_revision,
        "deliverables": item.contract["deliverables"],
        "acceptanceCriteria": item.contract["acceptanceCriteria"],
        "submission": item.submission, "review": item.review,
        "history": [event_document(e) for e in events]}
