"""GET /api/v1/groups/{g}/work-items/{id}/review: the review of a WorkItem's submission
(§13.2) as the Coordinator decides on it and the MissionOwner approves: the contract's
criteria, the current submission, its review (step outcomes, reviewer Evidence, the
latest evaluation) and the history of every submission's review events. Members only."""

from django.http import JsonResponse
from drf_spectacular.utils import extend_schema
from rest_framework.views import APIView

from apps.ledger.models import Event
from apps.ledger.pipeline import event_document
from mission_weave.core import evidence_review

from .openapi import ONE, errors, ref
from .views import _item, member_of

HISTORY_TYPES = ("work.submitted", *evidence_review.ORDER, evidence_review.EVIDENCE_RECORDED,
                 "work.verified", "work.failed")


class WorkItemReviewView(APIView):
    @extend_schema(responses={200: ref("Review"), **errors(*ONE)},
                   summary="The Evidence-based review of a WorkItem's submission (§13.2)")
    def get(self, request, group_id, work_item_id):
        member_of(request, group_id)
        item = _item(group_id, work_item_id)
        events = Event.objects.filter(group_id=group_id, work_item_id=work_item_id,
                                      type__in=HISTORY_TYPES).order_by("sequence")
        return JsonResponse({
            "workItemId": item.id, "state": item.state, "revision": item.revision,
            "contractRevision": item.contract_revision,
            "deliverables": item.contract["deliverables"],
            "acceptanceCriteria": item.contract["acceptanceCriteria"],
            "submission": item.submission, "review": item.review,
            "history": [event_document(e) for e in events]})
