"""REST read of the caller's Cursor in a Group (the same record ACK writes)."""

from django.http import JsonResponse
from drf_spectacular.utils import extend_schema
from rest_framework.views import APIView

from apps.delivery import cursors

from .openapi import MEMBER, errors, ref
from .views import principal_of


class CursorView(APIView):
    @extend_schema(responses={200: ref("Cursor"), **errors(*MEMBER)},
                   summary="The caller's acknowledged Cursor in the Group (PROTOCOL §4)",
                   description="Answers `{groupId, principal, sequence, updatedAt}`; `sequence` "
                               "is 0 before the first ACK. Written by the WebSocket `ACK` frame.")
    def get(self, request, group_id):
        return JsonResponse(cursors.read(principal_of(request), group_id))
