"""REST endpoints of PROTOCOL §1–§4. Thin: parse, call the pipeline or a read, answer."""

import json

from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.views import APIView

from apps.identity import presence, principals
from apps.ledger import envelope as envelopes
from apps.ledger import feed, history, pipeline, signing_keys
from apps.ledger.models import CommandRecord
from apps.work import capability_bearer, recovery
from apps.work import models as work_models
from mission_weave.core import state, state_documents
from mission_weave.protocol.canonical import domain_problem, loads_in_domain
from mission_weave.protocol.errors import ProtocolError
from mission_weave.protocol.whole import whole_number
from mission_weave.runtime import rate_limits

from . import reads
from .openapi import AUTH, COMMAND_ERRORS, ONE, PAGE, errors, json_body, ref


def read_json(request) -> dict:
    """The JSON object in the body; NaN, Infinity, non-objects and values outside what
    RFC 8785 and PostgreSQL can hold (huge integers, U+0000, lone surrogates, deep
    nesting) are refused. Parsed by orjson where it gives what json.loads gives, and
    walked by domain_problem only where its bytes do not already prove it within the
    domain (canonical.loads_in_domain): the same value and the same refusals either way."""
    max_depth = settings.MW_MAX_JSON_DEPTH
    parsed = loads_in_domain(request.body, max_depth)
    value, proven = parsed if parsed is not None else (_loads(request.body), False)
    if not isinstance(value, dict):
        raise ProtocolError("VALIDATION_ERROR", "the body must be a JSON object")
    problem = None if proven else domain_problem(value, max_depth)
    if problem is not None:
        raise ProtocolError("VALIDATION_ERROR", f"the body at {problem[0]}: {problem[1]}",
                            {"path": problem[0]})
    return value


def _loads(body: bytes):
    try:
        return json.loads(body, parse_constant=_refuse_constant)
    except (ValueError, UnicodeDecodeError) as error:
        raise ProtocolError("VALIDATION_ERROR", f"the body is not valid JSON: {error}") from None
    except RecursionError:  # far deeper than MW_MAX_JSON_DEPTH: the parser gave up first
        raise ProtocolError("VALIDATION_ERROR", "the body is nested too deeply",
                            {"maxDepth": settings.MW_MAX_JSON_DEPTH}) from None


def _refuse_constant(name):
    raise ValueError(f"{name} is not JSON")


def principal_of(request) -> principals.Principal:
    if not isinstance(request.user, principals.Principal):
        raise ProtocolError("UNAUTHENTICATED", "send Authorization: Bearer <token> from "
                            "POST /api/v1/sessions, or log in")
    return request.user


def member_of(request, group_id: str):
    return principals.membership(group_id, principal_of(request))


class SessionsView(APIView):
    authentication_classes: list[type] = []

    @extend_schema(request=json_body("SessionRequest"),
                   responses={201: ref("Session"),
                              **errors("VALIDATION_ERROR", "UNAUTHENTICATED",
                                       "INVALID_SIGNATURE", "CLOCK_SKEW", "NONCE_REUSED",
                                       "PAYLOAD_TOO_LARGE")},
                   summary="Open an Agent session (PROTOCOL §1)",
                   description="Body `{agentId, keyId, nonce, issuedAt, signature}`, signed over "
                               "its canonical form without `signature`. Supersedes the previous "
                               "session and revokes the agent's active leases.")
    def post(self, request):
        body = read_json(request)
        # The agent's own limit: asked before its signature is checked, counted only once
        # the session opened, so nobody else can spend it (the IP's was counted already).
        agent_id = body.get("agentId")
        principal = f"agent:{agent_id}" if isinstance(agent_id, str) and \
            0 < len(agent_id) <= 100 else None
        if principal:
            rate_limits.check("sessions", principal=principal, count=False)
        opened = recovery.open_session(body, timezone.now())
        if principal:
            rate_limits.record("sessions", principal=principal)
        return JsonResponse(opened, status=201)


class PresenceView(APIView):
    @extend_schema(request=json_body("PresenceReport"),
                   responses={200: ref("Presence"),
                              **errors("VALIDATION_ERROR", *AUTH, "FORBIDDEN",
                                       "PAYLOAD_TOO_LARGE")},
                   summary="Report the Agent's current capacity (Presence, §11.1)",
                   description="Body `{availableSlots, status: available|busy|offline}`; answers "
                               "the stored report with `reportedAt`. Not part of any log; offer "
                               "ranking treats a report older than MW_PRESENCE_TTL_SECONDS as "
                               "unknown.")
    def post(self, request):
        principal = principal_of(request)
        if not principal.is_agent:
            raise ProtocolError("FORBIDDEN",
                                "Presence is reported by an Agent with its bearer token")
        return JsonResponse(presence.report(principal.agent_id, read_json(request), timezone.now()))


class CommandsView(APIView):
    @extend_schema(request=json_body("CommandEnvelope"),
                   responses={200: ref("CommandAnswer"), **errors(*COMMAND_ERRORS)},
                   summary="Submit a signed command (PROTOCOL §2)",
                   description="The envelope is a oneOf over one schema per command type, "
                               "discriminated by `type`, each with its own `body`. Answers "
                               "`{commandId, events, duplicate}` or an error envelope; "
                               "an answer that issues a capability token to the lease holder "
                               "also carries `capabilityToken: {id, token, scopes, expiresAt}`.")
    def post(self, request, group_id):
        envelope = read_json(request)
        # read_json walked it (or proved it) within the domain: the pipeline need not again
        with envelopes.domain_checked(envelope, settings.MW_MAX_JSON_DEPTH):
            answer = pipeline.submit(group_id, envelope, principal_of(request))
        return JsonResponse(answer.body, status=answer.status)


class CapabilityIntrospectionView(APIView):
    @extend_schema(request=json_body("IntrospectionRequest"),
                   responses={200: ref("Introspection"),
                              **errors("VALIDATION_ERROR", *AUTH, "PAYLOAD_TOO_LARGE")},
                   summary="Introspect a capability token (§11.3, in the spirit of RFC 7662)",
                   description="Body `{token}`. Answers `{active: true, scope, scopes, groupId, "
                               "workItemId, leaseId, sub, exp, ...}` to a member of the token's "
                               "Group, else `{active: false}` (malformed, forged, expired, "
                               "revoked, or the caller is not a member).")
    def post(self, request):
        principal = principal_of(request)
        token = read_json(request).get("token")
        return JsonResponse(capability_bearer.introspect(token, principal, timezone.now()))


class EventsView(APIView):
    @extend_schema(parameters=[OpenApiParameter("after", int), OpenApiParameter("limit", int)],
                   responses={200: ref("EventsPage"), **errors(*PAGE, "CURSOR_TOO_OLD")},
                   summary="The Group's events after a sequence, in order (PROTOCOL §4)")
    def get(self, request, group_id):
        member_of(request, group_id)
        after = int_param(request, "after", 0, minimum=0)
        limit = int_param(request, "limit", 100, minimum=1, maximum=settings.MW_EVENTS_PAGE_MAX)
        return HttpResponse(feed.page_json(group_id, after, limit),
                            content_type="application/json")


BIGINT_MAX = 2**63 - 1


def int_param(request, name: str, default, minimum: int, maximum: int = BIGINT_MAX):
    """The query parameter `name` as a whole number in [minimum, maximum], or `default`."""
    text = request.query_params.get(name)
    if text is None:
        return default
    value = whole_number(text, maximum)
    if value is None or value < minimum:
        raise ProtocolError("VALIDATION_ERROR",
                            f"{name} must be a whole number from {minimum} to {maximum}",
                            {"path": name})
    return value


class WorkItemListView(APIView):
    @extend_schema(parameters=[OpenApiParameter("missionId", str), OpenApiParameter("state", str),
                               OpenApiParameter("owner", str, description="an agent id"),
                               OpenApiParameter("order", str, enum=["id", "priority"]),
                               OpenApiParameter("limit", int, description="at most "
                                                "MW_LIST_MAX, its default")],
                   responses={200: ref("WorkItemList"), **errors(*PAGE)},
                   summary="WorkItems of the Group",
                   description="`order=priority` lists by the requested priority "
                               "(mission_weave/core/priority.py): urgency, business impact, "
                               "deadline. "
                               "`state=queued&owner=<agentId>&order=priority` is an Agent's "
                               "queue in this Group. At most `limit` WorkItems; "
                               "`truncated: true` when there were more.",
                   operation_id="work_items_list")
    def get(self, request, group_id):
        member_of(request, group_id)
        rows = work_models.WorkItem.objects.filter(group_id=group_id)
        for param, column in (("missionId", "mission_id"), ("state", "state"), ("owner", "owner")):
            if request.query_params.get(param):
                if "\x00" in request.query_params[param]:  # PostgreSQL cannot compare it
                    raise ProtocolError("VALIDATION_ERROR", f"{param} must not contain U+0000")
                rows = rows.filter(**{column: request.query_params[param]})
        order = request.query_params.get("order", "id")
        if order not in ("id", "priority"):
            raise ProtocolError("VALIDATION_ERROR", "order must be `id` or `priority`")
        rows = rows.in_priority_order() if order == "priority" else rows.order_by("id")
        rows, truncated = _page(rows, _list_limit(request))
        return JsonResponse({"workItems": [reads.work_item(state_documents.item_from_doc(r.doc))
                                           for r in rows], "truncated": truncated})


def _list_limit(request) -> int:
    return int_param(request, "limit", settings.MW_LIST_MAX, minimum=1,
                     maximum=settings.MW_LIST_MAX)


def _page(rows, limit: int) -> tuple[list, bool]:
    """At most `limit` of the rows, and whether there were more (one row more is read)."""
    rows = list(rows[:limit + 1])
    return rows[:limit], len(rows) > limit


class WorkItemView(APIView):
    @extend_schema(responses={200: ref("WorkItem"), **errors(*ONE)},
                   summary="One WorkItem (PROTOCOL §2)")
    def get(self, request, group_id, work_item_id):
        member_of(request, group_id)
        return JsonResponse(reads.work_item(_item(group_id, work_item_id)))


def _item(group_id, work_item_id) -> state.WorkItem:
    row = work_models.WorkItem.objects.filter(group_id=group_id,
                                              work_item_id=work_item_id).first()
    if row is None:
        raise ProtocolError("NOT_FOUND", f"no WorkItem {work_item_id} in this Group")
    return state_documents.item_from_doc(row.doc)


class WorkItemAuditView(APIView):
    @extend_schema(responses={200: ref("AuditTrail"), **errors(*ONE)},
                   summary="The WorkItem's audit trail: its events and the commands refused, "
                           "late results from fenced owners included")
    def get(self, request, group_id, work_item_id):
        member_of(request, group_id)
        _item(group_id, work_item_id)
        return JsonResponse(audit_trail(group_id, work_item_id))


def audit_trail(group_id: str, work_item_id: str) -> dict:
    """The WorkItem's events (archived ones included) and its refused commands; the
    dashboard shows the same."""
    # The latest MW_LIST_MAX refusals: any member can have commands refused at will.
    refused, truncated = _page(CommandRecord.objects.filter(
        group_id=group_id, work_item_id=work_item_id, accepted=False).order_by("-created_at"),
        settings.MW_LIST_MAX)
    return {"events": history.events_of_work_item(group_id, work_item_id),
            "refusedCommands": [reads.refused_command(r) for r in reversed(refused)],
            "refusedCommandsTruncated": truncated}


class MissionListView(APIView):
    @extend_schema(parameters=[OpenApiParameter("limit", int, description="at most "
                                                "MW_LIST_MAX, its default")],
                   responses={200: ref("MissionList"), **errors(*PAGE)},
                   summary="Missions of the Group",
                   description="At most `limit` Missions, by id; `truncated: true` when there "
                               "were more.",
                   operation_id="missions_list")
    def get(self, request, group_id):
        member_of(request, group_id)
        rows, truncated = _page(work_models.Mission.objects.filter(group_id=group_id)
                                .order_by("id"), _list_limit(request))
        return JsonResponse({"missions": [reads.mission(state_documents.mission_from_doc(r.doc))
                                          for r in rows], "truncated": truncated})


class MissionView(APIView):
    @extend_schema(responses={200: ref("Mission"), **errors(*ONE)},
                   summary="One Mission (PROTOCOL §2)")
    def get(self, request, group_id, mission_id):
        member_of(request, group_id)
        row = work_models.Mission.objects.filter(group_id=group_id, mission_id=mission_id).first()
        if row is None:
            raise ProtocolError("NOT_FOUND", f"no Mission {mission_id} in this Group")
        return JsonResponse(reads.mission(state_documents.mission_from_doc(row.doc)))


class AuthorityView(APIView):
    authentication_classes: list[type] = []

    @extend_schema(responses={200: ref("AuthorityKeys")},
                   summary="The Group Authority's public keys, current and retired "
                           "(PROTOCOL §1)")
    def get(self, request):
        return JsonResponse(signing_keys.listing())
