"""Snapshots and the archive over REST (PROTOCOL §4, §7), for members only.

GET /api/v1/groups/{g}/snapshots/{id}: the signed snapshot document, byte for byte as
signed and stored (CURSOR_TOO_OLD's `details.snapshot.url`).
GET /api/v1/groups/{g}/archive?after=&limit=: archived events in order, for an auditor;
archiving moves events out of the online log but never out of reach."""

from django.conf import settings
from django.http import HttpResponse, JsonResponse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.views import APIView

from apps.ledger import history
from apps.ledger.models import Snapshot
from mission_weave.protocol.errors import ProtocolError

from .openapi import ONE, PAGE, errors, ref
from .views import int_param, member_of


class SnapshotView(APIView):
    @extend_schema(responses={200: ref("Snapshot"), **errors(*ONE)},
                   summary="A signed snapshot of the Group's projected state (PROTOCOL §4)",
                   description="`{id, groupId, sequence, hash, state, createdAt, signature}`, "
                               "signed by the authority key of GET /api/v1/authority.")
    def get(self, request, group_id, snapshot_id):
        member_of(request, group_id)
        document = Snapshot.objects.filter(group_id=group_id, id=snapshot_id) \
            .values_list("document", flat=True).first()
        if document is None:
            raise ProtocolError("NOT_FOUND", f"no snapshot {snapshot_id} in this Group")
        return HttpResponse(document, content_type="application/json")


class ArchiveView(APIView):
    @extend_schema(parameters=[OpenApiParameter("after", int), OpenApiParameter("limit", int)],
                   responses={200: ref("ArchivePage"), **errors(*PAGE)},
                   summary="Archived events after a sequence, in order",
                   description="`{events, onlineFloor}`: the events at or below the online "
                               "floor, moved there by archiving, still hash-chained.")
    def get(self, request, group_id):
        member_of(request, group_id)
        after = int_param(request, "after", 0, minimum=0)
        limit = int_param(request, "limit", 100, minimum=1, maximum=settings.MW_EVENTS_PAGE_MAX)
        return JsonResponse({"events": history.archived_after(group_id, after, limit),
                             "onlineFloor": history.floor(group_id)})
