"""GET /api/v1/groups/{g}/membership: the caller's own membership, so that an Agent
learns the `membershipEpoch` its commands must carry and its Agent Card (the SDK
sizes its execution slots by `maxConcurrency`). A non-member learns nothing."""

from django.http import JsonResponse
from drf_spectacular.utils import extend_schema
from rest_framework.views import APIView

from apps.identity.models import Agent

from .openapi import MEMBER, errors, ref
from .views import member_of, principal_of


class MembershipView(APIView):
    @extend_schema(responses={200: ref("Membership"), **errors(*MEMBER)},
                   summary="The caller's membership in the Group",
                   description="`{groupId, principal, roles, membershipEpoch, agentCard}`; "
                               "`agentCard` is null for a human.")
    def get(self, request, group_id):
        principal = principal_of(request)
        member = member_of(request, group_id)
        card = None
        if principal.is_agent:
            card = Agent.objects.filter(id=principal.agent_id).values_list("card", flat=True) \
                .first()
        return JsonResponse({"groupId": group_id, "principal": principal.id,
                             "roles": sorted(member.roles), "membershipEpoch": member.epoch,
                             "agentCard": card})
