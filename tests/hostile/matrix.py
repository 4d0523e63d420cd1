"""The authorization matrix: who (a principal of each role, tests/hostile/cast.py) may do
what (every endpoint under /api/v1/, every command type, the WebSocket frames, the
dashboard's pages and actions) to objects that are not theirs: those of ANOTHER Group
(through its own path, or named by their ids under the principal's own Group), and those
of another Mission of the principal's own Group.

The lists come from the server: the API routes from apps/api/urls.py's resolver (checked
against the OpenAPI document), the command types from mission_weave/core/commands
COMMAND_TYPES, the dashboard's from apps/dashboard/urls.py. `uncovered()` names what a
table here lacks, so a new endpoint or command that nobody put in the matrix fails.

The oracle is written from PROTOCOL.md (§1 principals, §2 "who" and the Mission's
authority, §5 blobs, §7 "Outsiders"), not from what the code happens to answer:
- no credentials: 401 UNAUTHENTICATED;
- not a member of the Group addressed: 403 NOT_A_MEMBER, the same answer as for a Group
  that does not exist;
- another Group's object named under one's own Group: 404 NOT_FOUND, the same answer as
  for an id that does not exist;
- a role the command does not take: 403 FORBIDDEN; another Mission's Owner's or
  Coordinator's command: 403 FORBIDDEN; another agent's offer, ownership or lease: the
  fencing codes (OFFER_NOT_LIVE, STALE_OWNERSHIP, STALE_LEASE);
- what PROTOCOL gives every member of the Group (reads, proposals, messages, Context
  Packages, a reviewer's Evidence, the Organization's forwarding approval) succeeds on the
  other Mission too."""

import hashlib
import json
from dataclasses import dataclass
from datetime import timedelta

from apps.identity.models import Membership
from mission_weave.core.commands import COMMAND_TYPES, HUMAN_ONLY, ROLES
from mission_weave.protocol.canonical import sign
from mission_weave.protocol.timefmt import format_time
from tests.hostile.cast import Cast, Stage, actor_epoch, new_webhook
from tests.integration.artifact_helpers import manifest, package, signed
from tests.support import Actor, contract, evidence, now

# The objects a principal is tried against.
OTHER_MISSION = "other_mission"  # another Mission of the principal's own Group
OTHER_GROUP_IDS = "other_group_ids"  # another Group's objects, named under one's own Group
OTHER_GROUP = "other_group"  # another Group's objects, through that Group's own paths
TARGETS = (OTHER_MISSION, OTHER_GROUP_IDS, OTHER_GROUP)

OK = (200, None)


def refused(code: str) -> tuple:
    from mission_weave.protocol.errors import HTTP_STATUS

    return (HTTP_STATUS[code], code)


# -- who ---------------------------------------------------------------------------------------

def roles_of(cast: Cast, actor: Actor | None) -> frozenset:
    if actor is None:
        return frozenset()
    row = Membership.objects.filter(group_id=cast.home.group.id, principal=actor.principal,
                                    active=True).first()
    return frozenset(row.roles) if row is not None else frozenset()


def stage_of(cast: Cast, target: str) -> Stage:
    return cast.m2 if target == OTHER_MISSION else cast.mb


def group_of(cast: Cast, target: str) -> str:
    return cast.other.group.id if target == OTHER_GROUP else cast.home.group.id


def secrets(cast: Cast, actor: Actor | None, target: str) -> list:
    """What the principal may not learn exists: ids of the other Group (and, for one who
    belongs to neither, of the home Group too). A refusal must read the same with these
    replaced by ids that exist nowhere."""
    names = []
    if target != OTHER_MISSION:
        mb = cast.mb
        names += [cast.other.group.id, mb.mission_id, *mb.items.values(), mb.artifact,
                  mb.unpublished_blob, mb.package_id, mb.proposal_id, cast.b_snapshot_id,
                  mb.owner.principal, mb.coordinator.principal, mb.worker.principal,
                  mb.worker.name, mb.capability_token, mb.webhook]
    if not cast.member_of_home(actor):
        m2 = cast.m2
        names += [cast.home.group.id, m2.mission_id, *m2.items.values(), m2.artifact,
                  m2.unpublished_blob, m2.package_id, cast.snapshot_id, m2.capability_token]
    return names


def fake(name: str) -> str:
    """An id of the same shape that names nothing."""
    digest = hashlib.sha256(f"nothing-{name}".encode()).hexdigest()
    if name.startswith("sha256:"):
        return "sha256:" + digest
    head = next((i + 1 for i, ch in enumerate(name) if ch in "_:-"), 0)
    return (name[:head] + digest * 2)[:max(len(name), head + 12)]


def renamed(value, names: list):
    """`value` (JSON-able) with every secret name replaced by its fake, longest first."""
    text = json.dumps(value)
    for name in sorted(names, key=len, reverse=True):
        text = text.replace(name, fake(name))
    return json.loads(text)


def unrenamed(text: str, names: list) -> str:
    for name in sorted(names, key=len, reverse=True):
        text = text.replace(fake(name), name)
    return text


# -- commands ------------------------------------------------------------------------------------

LEASE_COMMANDS = frozenset({"lease.renew", "work.progress", "work.checkpoint", "work.block",
                            "work.submit", "usage.record", "capability.rotate",
                            "capability.narrow"})


def command(cast: Cast, actor: Actor, type_: str, target: str) -> tuple[str, dict]:
    """(Group id of the path, the unsigned envelope) of a valid `type_` command from
    `actor` on the target's objects: valid, so that only authorization can refuse it."""
    s = stage_of(cast, target)
    me = actor.principal
    later = format_time(now() + timedelta(hours=1))
    item, fields = None, {}
    one = [evidence(["ac1", "ac2"], producer=me, artifacts=[], result="pass: checked")]
    body = {}
    if type_ == "mission.create":
        body = {"title": "Mine now", "ownerId": s.owner.principal,
                "coordinatorId": s.coordinator.principal}
    elif type_ == "mission.create_child":
        item, body = "open", {"title": "Child", "childFailurePolicy": "block"}
    elif type_ in ("mission.approve", "mission.refuse_approval", "mission.fail",
                   "mission.cancel"):
        body = {"missionId": s.mission_id}
        if type_ != "mission.approve":
            body["reason"] = "not yours"
    elif type_ in ("work.propose", "work.authorize"):
        body = {"missionId": s.mission_id, "contract": contract()}
    elif type_ == "work.revise_contract":
        item, body = "open", {"contract": contract(goal="Changed")}
    elif type_ == "work.offer":
        item, body = "open", {"candidates": [s.worker.name], "mode": "sequential",
                              "expiresAt": later}
    elif type_ == "work.decline_offer":
        item, body = "offered", {"reason": "capacity"}
    elif type_ == "work.accept_offer":
        item, body = "offered", {"contractRevision": 1}
    elif type_ == "approval.grant_execution":
        item, body = "approval", {}
    elif type_ == "approval.refuse_execution":
        item, body = "approval", {"reason": "too risky"}
    elif type_ in ("work.start", "schedule.disclose"):
        item = "queued"
        fields["ownershipEpoch"] = s.epoch(s.items[item])
        body = {} if type_ == "work.start" else {
            "estimatedStart": {"from": later, "to": later}, "estimatedCompletion": later,
            "confidence": 0.5, "capacityStatus": "available", "calculatedAt": later}
    elif type_ in LEASE_COMMANDS or type_ in ("work.fail", "work.request_preemption",
                                              "artifact.publish"):
        item = "active"
        fields.update({k: v for k, v in s.lease(s.items[item]).items() if k != "workItemId"})
        body = {"lease.renew": {}, "work.progress": {"phase": "drafting"},
                "work.checkpoint": {"progress": {"phase": "drafting"}},
                "work.block": {"checkpoint": {"progress": {"phase": "drafting"}},
                               "requiredResolution": "access"},
                "work.submit": {"contractRevision": 1, "artifacts": [], "evidence": one},
                "usage.record": {"tokens": 1}, "capability.rotate": {},
                "capability.narrow": {"scopes": {"tools": []}},
                "work.fail": {"evidence": [{**one[0], "result": "fail: broken"}]},
                "work.request_preemption": {"reason": "mine now"}}.get(type_)
        if type_ == "artifact.publish":
            # The Mission's worker's own signed manifest of bytes it uploaded: what a
            # coordinator may relay, and nothing else could refuse.
            body = manifest(s.worker, s.mission_id, s.items[item], s.unpublished_data)
            body = signed({**body, "groupId": cast.home.group.id}, s.worker)
    elif type_ == "work.unblock":
        item, body = "blocked", {"resolution": "done"}
    elif type_ == "work.accept_result":
        item, body = "submitted", {"evidence": one}
    elif type_ == "evidence.record":
        item, body = "submitted", {"evidence": [evidence(["ac1"], producer=me,
                                                         result="pass: reviewed")]}
    elif type_ == "work.cancel":
        item, body = "open", {"reason": "not yours"}
    elif type_ == "conversation.post":
        item, body = "open", {"kind": "message", "text": "hello"}
    elif type_ == "context.publish":
        body = package(actor, s.mission_id, f"pkg-{actor.name}",
                       events=(s.created_sequence, s.created_sequence)) \
            if actor.key is not None else {**package(
                s.worker, s.mission_id, "pkg-human",
                events=(s.created_sequence, s.created_sequence)), "generator": actor.name}
    elif type_ == "artifact.approve_forwarding":
        body = {"hash": s.artifact, "targetGroupId": cast.other.group.id}
    elif type_ == "artifact.forward":  # to a Group no approval names, whatever passed before
        body = {"hash": s.artifact, "targetGroupId": cast.third.group.id}
    else:
        raise KeyError(f"no command of type {type_} in the matrix")
    if item is not None:
        fields["workItemId"] = s.items[item]
    group_id = group_of(cast, target)
    document = {"id": f"mx-{hashlib.sha256(repr((me, type_, target)).encode()).hexdigest()}",
                "type": type_, "groupId": group_id, "actor": me,
                "issuedAt": format_time(now()), "membershipEpoch": actor_epoch(actor, group_id),
                "body": body, **fields}
    if actor.key is not None:
        document["sessionEpoch"] = actor.session_epoch
    return group_id, document


def signed_by(actor: Actor, document: dict) -> dict:
    return sign(document, actor.key, actor.key_id) if actor.key is not None else document


# On another Mission of the Group, from a principal with the role but not that Mission's
# authority: what PROTOCOL gives every member passes, the rest is refused.
GROUP_WIDE = frozenset({"mission.create", "work.propose", "conversation.post",
                        "artifact.approve_forwarding"})
FENCED = {"work.decline_offer": "OFFER_NOT_LIVE", "work.accept_offer": "OFFER_NOT_LIVE",
          "work.start": "STALE_OWNERSHIP", **dict.fromkeys(LEASE_COMMANDS, "STALE_LEASE")}


def expect_command(cast: Cast, actor: Actor | None, type_: str, target: str) -> tuple:
    """(HTTP status, PROTOCOL code or None for an acceptance)."""
    if actor is None:
        return refused("UNAUTHENTICATED")
    if target == OTHER_GROUP or not cast.member_of_home(actor):
        return refused("NOT_A_MEMBER")
    roles = roles_of(cast, actor)
    if type_ in HUMAN_ONLY and actor.key is not None:
        return refused("FORBIDDEN")
    if not roles & ROLES[type_]:
        return refused("FORBIDDEN")
    if target == OTHER_GROUP_IDS:
        # mission.create names the other Group's owner and coordinator, members of no
        # Group here: a VALIDATION_ERROR that says just that. Anything else names an
        # object this Group does not have, which is found (or not) before who may act on it.
        return refused("VALIDATION_ERROR" if type_ == "mission.create" else "NOT_FOUND")
    if type_ == "context.publish" and actor.key is None:
        return refused("FORBIDDEN")  # a Context Package is its generating Agent's
    if type_ in GROUP_WIDE or type_ == "context.publish":
        return OK
    if type_ == "evidence.record" and "reviewer" in roles:
        return OK  # the Group's reviewers review every submission
    if type_ in ("work.fail", "artifact.publish") and "worker" in roles:
        return refused("STALE_LEASE")  # a lease holder's report, on another's lease
    if type_ in FENCED:
        return refused(FENCED[type_])
    return refused("FORBIDDEN")


# -- REST endpoints ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Request:
    method: str
    path: str
    body: object = None  # JSON, or bytes for a blob
    expected: tuple = OK


G = "/api/v1/groups/{g}"
PUBLIC = frozenset({"authority", "schema/", "docs/", "redoc/"})
# A Group's routes (apps/api/urls.py) -> the path below the Group, `{...}` naming the
# target's objects; the other routes are built by api_request.
GROUP_ROUTES = {
    "groups/<group_id:group_id>/events": "events",
    "groups/<group_id:group_id>/cursor": "cursor",
    "groups/<group_id:group_id>/snapshots/<id:snapshot_id>": "snapshots/{snapshot}",
    "groups/<group_id:group_id>/archive": "archive",
    "groups/<group_id:group_id>/membership": "membership",
    "groups/<group_id:group_id>/work-items": "work-items?missionId={mission}",
    "groups/<group_id:group_id>/work-items/<id:work_item_id>": "work-items/{item}",
    "groups/<group_id:group_id>/work-items/<id:work_item_id>/audit": "work-items/{item}/audit",
    "groups/<group_id:group_id>/work-items/<id:work_item_id>/review": "work-items/{item}/review",
    "groups/<group_id:group_id>/missions": "missions",
    "groups/<group_id:group_id>/missions/<id:mission_id>": "missions/{mission}",
    "groups/<group_id:group_id>/artifacts/<id:hash>": "artifacts/{artifact}",
    "groups/<group_id:group_id>/artifacts/<id:hash>/provenance": "artifacts/{artifact}/provenance",
    "groups/<group_id:group_id>/context-packages/<id:package_id>": "context-packages/{package}",
    "groups/<group_id:group_id>/context-packages/<id:package_id>/events":
        "context-packages/{package}/events",
}
COMMANDS_ROUTE = "groups/<group_id:group_id>/commands"
# Group routes that name no object: under one's own Group they are the principal's own.
NO_OBJECT = frozenset(r for r, below in GROUP_ROUTES.items() if "{" not in below)


def api_cases() -> list:
    """(route, method, target) of every REST case but the commands'."""
    cases = []
    for route in GROUP_ROUTES:
        for target in TARGETS:
            if route in NO_OBJECT and target == OTHER_GROUP_IDS:
                continue  # nothing to name: the same as one's own Group's
            cases.append((route, "GET", target))
    cases += [("sessions", "POST", t) for t in (OTHER_MISSION, OTHER_GROUP)]
    cases += [("capabilities/introspect", "POST", t) for t in (OTHER_MISSION, OTHER_GROUP)]
    cases += [("presence", "POST", OTHER_MISSION)]
    cases += [("blobs/<text:name>", method, t) for method in ("GET", "PUT")
              for t in (OTHER_MISSION, OTHER_GROUP, "other_upload")]
    cases += [(route, "GET", OTHER_GROUP) for route in sorted(PUBLIC)]
    return cases


def api_request(cast: Cast, actor: Actor | None, route: str, method: str,
                target: str) -> Request:
    member = cast.member_of_home(actor)
    if route in PUBLIC:
        return Request("GET", f"/api/v1/{route}")
    if route == "sessions":
        # A session in the name of another Agent, signed with one's own key (or none).
        victim = cast.worker2 if target == OTHER_MISSION else cast.b_worker
        request = {"agentId": victim.name, "keyId": victim.key_id, "nonce": "n" * 32,
                   "issuedAt": format_time(now())}
        key = actor.key if actor is not None and actor.key is not None else victim.key
        body = sign(request, key, actor.key_id if actor is not None and actor.key else "x#1")
        if key is victim.key:  # no key of one's own: a signature that is not the victim's
            body["signature"]["sig"] = body["signature"]["sig"][::-1]
        return Request("POST", "/api/v1/sessions", body, refused("INVALID_SIGNATURE"))
    expected = refused("UNAUTHENTICATED") if actor is None else OK
    if route == "capabilities/introspect":
        s = stage_of(cast, target)
        return Request("POST", "/api/v1/capabilities/introspect",
                       {"token": s.capability_token}, expected)
    if route == "presence":
        if actor is not None and actor.key is None:
            expected = refused("FORBIDDEN")  # Presence is an Agent's
        return Request("POST", "/api/v1/presence", {"availableSlots": 1, "status": "busy"},
                       expected)
    if route == "blobs/<text:name>":
        s = stage_of(cast, "other_mission" if target == OTHER_MISSION else OTHER_GROUP)
        name = s.unpublished_blob if target == "other_upload" else s.artifact
        readable = member and target == OTHER_MISSION
        if method == "PUT":
            data = s.artifact_data if target != "other_upload" else b""
            if target == "other_upload":  # the bytes are not the attacker's to have
                return Request("PUT", f"/api/v1/blobs/{name}", b"guess", expected if
                               actor is None else refused("HASH_MISMATCH"))
            # Possession of the bytes is proof enough to read them; whether anyone else
            # stored them is not told: 201 unless the sender could read them already.
            status = (200 if readable else 201) if actor is not None else expected[0]
            return Request("PUT", f"/api/v1/blobs/{name}", data,
                           (status, None) if actor is not None else expected)
        if actor is not None and not readable:
            expected = refused("NOT_A_MEMBER")
        return Request("GET", f"/api/v1/blobs/{name}", None, expected)
    s = stage_of(cast, target)
    below = GROUP_ROUTES[route].format(
        snapshot=cast.b_snapshot_id if target != OTHER_MISSION else cast.snapshot_id,
        mission=s.mission_id, item=s.items["active"], artifact=s.artifact,
        package=s.package_id)
    if actor is None:
        pass
    elif target == OTHER_GROUP or not member:
        expected = refused("NOT_A_MEMBER")
    elif target == OTHER_GROUP_IDS and route != "groups/<group_id:group_id>/work-items":
        expected = refused("NOT_FOUND")
    return Request("GET", G.format(g=group_of(cast, target)) + "/" + below, None, expected)


# -- the dashboard --------------------------------------------------------------------------------

# url name (apps/dashboard/urls.py) -> (method, path below /g/{g}/, POST data, command it sends)
DASHBOARD = {
    "groups": ("GET", None, None, None),
    "login": ("GET", None, None, None),
    "sign_in_refused": ("GET", None, None, None),  # where a refused OIDC sign-in lands
    "notifications": ("GET", None, None, None),  # one's own address and choices
    "mail": ("GET", None, None, None),  # the caught mail: operators (staff) only
    "logout": ("POST", None, None, None),
    "group": ("GET", "", None, None),
    "group_log": ("GET", "log/", None, None),
    "new_mission": ("POST", "missions/new", {"title": "x"}, "mission.create"),
    "mission": ("GET", "missions/{mission}/", None, None),
    "approve_mission": ("POST", "missions/{mission}/approve", {}, "mission.approve"),
    "refuse_approval": ("POST", "missions/{mission}/refuse-approval",
                        {"refuse-reason": "not yet"}, "mission.refuse_approval"),
    "end_mission": ("POST", "missions/{mission}/end", {"end-reason": "over",
                                                       "end-how": "cancel"}, "mission.cancel"),
    "change_edge": ("POST", "missions/{mission}/edges",
                    {"dependant": "{open}", "dependency": "{offered}", "op": "add"},
                    "work.revise_contract"),
    "new_item": ("GET", "missions/{mission}/work-items/new", None, "work.authorize"),
    "authorize_proposal": ("GET", "missions/{mission}/proposals/{proposal}/authorize", None,
                           "work.authorize"),
    "work_item": ("GET", "work-items/{open}/", None, None),
    "revise": ("GET", "work-items/{open}/revise", None, "work.revise_contract"),
    "offer": ("POST", "work-items/{open}/offer", {"offer-auto": "on", "offer-mode": "sequential",
                                                  "offer-expires_in_minutes": "10"},
              "work.offer"),
    "preempt": ("POST", "work-items/{active}/preempt", {"preempt-reason": "x"},
                "work.request_preemption"),
    "unblock": ("POST", "work-items/{blocked}/unblock", {"unblock-reason": "x"},
                "work.unblock"),
    "cancel": ("POST", "work-items/{open}/cancel", {"cancel-reason": "x"}, "work.cancel"),
    "create_child": ("POST", "work-items/{open}/child", {
        "child-title": "x", "child-child_failure_policy": "block"}, "mission.create_child"),
    "post_message": ("POST", "work-items/{open}/messages", {"message-kind": "message",
                                                           "message-text": "hi"},
                     "conversation.post"),
    "accept_result": ("POST", "work-items/{submitted}/accept", {"note": "fine"},
                      "work.accept_result"),
    "fail": ("POST", "work-items/{active}/fail", {"reason": "broken"}, "work.fail"),
    "grant_execution": ("POST", "work-items/{approval}/grant-execution", {},
                        "approval.grant_execution"),
    "refuse_execution": ("POST", "work-items/{approval}/refuse-execution",
                         {"refuse-reason": "no"}, "approval.refuse_execution"),
    "artifact": ("GET", "artifacts/{artifact}/", None, None),
    "artifact_content": ("GET", "artifacts/{artifact}/content", None, None),
    "submissions": ("GET", "work-items/{open}/submissions", None, None),
    "webhooks": ("GET", "webhooks/", None, None),
    "webhook": ("GET", "webhooks/{webhook}/", None, None),
    "rotate_webhook": ("POST", "webhooks/{webhook}/rotate", {}, None),
    "send_again": ("POST", "webhooks/{webhook}/send-again", {"delivery": "dl_none"}, None),
    "remove_webhook": ("POST", "webhooks/{doomed}/remove", {}, None),  # one made per case
}
# Pages that take the Mission's Coordinator (or a delegate) even to show their form.
COORDINATOR_PAGES = frozenset({"new_item", "authorize_proposal", "revise"})
# A Group's webhooks: its owners and coordinators only, whatever the Mission.
WEBHOOK_PAGES = frozenset({"webhooks", "webhook", "rotate_webhook", "send_again",
                           "remove_webhook"})


def dashboard_cases() -> list:
    cases = []
    for name, (_method, below, _data, _command) in DASHBOARD.items():
        if below is None:
            cases.append((name, OTHER_GROUP))
            continue
        for target in TARGETS:
            if target == OTHER_GROUP_IDS and "{" not in below:
                continue
            cases.append((name, target))
    return cases


def dashboard_path(cast: Cast, name: str, target: str) -> tuple[str, str, dict | None]:
    method, below, data, _ = DASHBOARD[name]
    if below is None:
        paths = {"groups": f"/?group={cast.other.group.id}&mission={cast.mb.mission_id}",
                 "login": "/login/", "logout": "/logout/",
                 "sign_in_refused": "/login/refused/?reason=state",
                 "notifications": "/notifications/", "mail": "/mail/"}
        return method, paths[name], data
    s = stage_of(cast, target)
    ids = {"mission": s.mission_id, "proposal": s.proposal_id, "artifact": s.artifact,
           "webhook": s.webhook, **s.items}
    if "{doomed}" in below:
        ids["doomed"] = new_webhook(s.world.group.id)
    path = f"/g/{group_of(cast, target)}/" + below.format(**ids)
    if data is not None:
        data = {k: v.format(**ids) for k, v in data.items()}
    return method, path, data


def expect_dashboard(cast: Cast, actor: Actor | None, name: str, target: str) -> tuple:
    """(HTTP status, PROTOCOL code shown on the page or None)."""
    _method, _below, _data, command_type = DASHBOARD[name]
    if name == "login":
        return OK
    if name == "sign_in_refused":
        return (403, None)  # the same words for anyone, signed in or not
    if name == "logout":
        return (302, None)
    human = actor is not None and actor.key is None
    if not human:
        return (302, None)  # to the login page: agents have no dashboard
    if name in ("groups", "notifications"):
        return OK  # one's own inbox (filtered by a Group one is not in: empty), one's choices
    if name == "mail":
        return (403, None)  # staff only; nobody in the cast is staff
    if name in WEBHOOK_PAGES and target != OTHER_GROUP and cast.member_of_home(actor):
        if not roles_of(cast, actor) & {"owner", "coordinator"}:
            return refused("FORBIDDEN")  # said before any webhook is looked up
        if target == OTHER_GROUP_IDS or name == "send_again":
            return (404, None)  # another Group's webhook; a delivery the webhook lacks
        return OK if name in ("webhooks", "webhook") else (302, None)
    if target in (OTHER_GROUP, OTHER_GROUP_IDS) or not cast.member_of_home(actor):
        return (404, None)  # as for what does not exist
    if command_type is None:
        return OK
    if name in COORDINATOR_PAGES:
        return refused("FORBIDDEN")
    if name == "new_mission":
        roles = roles_of(cast, actor)
        if not roles & {"coordinator", "owner"}:
            return refused("FORBIDDEN")
        return (400, "VALIDATION_ERROR")  # its owner and coordinator left unchosen
    code = expect_command(cast, actor, command_type, OTHER_MISSION)
    return (302, None) if code == OK else code


# -- coverage -------------------------------------------------------------------------------------

def api_routes() -> dict:
    """route -> HTTP methods its view answers, from the URL resolver."""
    from apps.api.urls import urlpatterns

    found = {}
    for pattern in urlpatterns:
        view = pattern.callback.view_class
        methods = {m.upper() for m in ("get", "post", "put", "patch", "delete")
                   if hasattr(view, m)}
        found[str(pattern.pattern)] = methods
    return found


def uncovered(document: dict, cast: Cast) -> list:
    """What the server has that the matrix's tables lack."""
    from apps.dashboard.urls import urlpatterns as dashboard_patterns

    missing = []
    covered = {(route, method) for route, method, _ in api_cases()}
    covered |= {(COMMANDS_ROUTE, "POST")}
    for route, methods in api_routes().items():
        for method in methods:
            if (route, method) not in covered:
                missing.append(f"API {method} /api/v1/{route}")
    documented = {(path, method.upper()) for path, methods in document["paths"].items()
                  for method in methods}
    resolved = {(openapi_path(route), method) for route, methods in api_routes().items()
                for method in methods}
    missing += [f"OpenAPI {m} {p} (no route)" for p, m in sorted(documented - resolved)]
    for type_ in COMMAND_TYPES:
        try:
            command(cast, cast.coordinator, type_, OTHER_MISSION)
        except KeyError:
            missing.append(f"command {type_}")
    missing += [f"dashboard {p.name}" for p in dashboard_patterns if p.name not in DASHBOARD]
    return missing


def openapi_path(route: str) -> str:
    """`groups/<group_id:group_id>/events` -> `/api/v1/groups/{group_id}/events`."""
    import re

    return "/api/v1/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route)
