"""GET /api/v1/groups/{g}/work-items/{id}/review: the review of a WorkItem's submission
(§13.2) as the Coordinator decides on it and the MissionOwner approves, built by
apps/review/review_document.py. Members only."""

from django.http import JsonResponse
from drf_spectacular.utils import extend_schema
from rest_framework.views import APIView

from apps.review import review_document

from .openapi import ONE, errors, ref
from .views import _item, member_of


class WorkItemReviewView(APIView):
    @extend_schema(responses={200: ref("Review"), **errors(*ONE)},
                   summary="The Evidence-based review of a WorkItem's submission (§13.2)")
    def get(self, request, group_id, work_item_id):
        member_of(request, group_id)
        return JsonResponse(review_document.build(group_id, _item(group_id, work_item_id)))
