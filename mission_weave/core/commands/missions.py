"""Missions and their planning: create, child Missions, approval, failure and
cancellation; the proposal, authorization and revision of WorkItems."""


from datetime import datetime

from mission_weave.protocol.errors import ProtocolError
from mission_weave.protocol.timefmt import format_time

from .. import lifecycle
from ..json_types import JsonObject
from ..schemas import check_contract
from ..state import (
    CANCELLED,
    MISSION_ACTIVE,
    UNFINISHED,
    VERIFIED,
    Mission,
    View,
    WorkItem,
)
from .base import (
    Command,
    Context,
    Draft,
    Handler,
    active_mission,
    check_new_contract,
    derive_id,
    edges_of,
    item_draft,
    new_id,
    parent_item,
    release,
    target_item,
    target_mission,
)


def mission_create(view: View, command: Command, context: Context) -> list[Draft]:
    body = command.body
    mission_id = new_id(view.missions, command, body.get("missionId"), "msn", "Mission")
    _check_named_members(body, context.facts.get("roles", {}))
    return [Draft("mission.created", {
        "missionId": mission_id, "title": body["title"], "ownerId": body["ownerId"],
        "coordinatorId": body["coordinatorId"], "delegates": body.get("delegates", []),
        "budgets": body.get("budgets") or {},
        "autoDispatch": body.get("autoDispatch", False)}, mission_id=mission_id)]


def _check_named_members(body: JsonObject, roles: JsonObject) -> None:
    """The Mission's owner, coordinator and delegates decide for it (authority.py), so
    each must be a member of the Group with that role; the owner, who gives the final
    Approval, a human. `roles`: principal -> its roles here, or None (no member)."""
    named = [("body.ownerId", body["ownerId"], "owner"),
             ("body.coordinatorId", body["coordinatorId"], "coordinator")]
    named += [(f"body.delegates[{i}]", p, "coordinator")
              for i, p in enumerate(body.get("delegates", []))]
    for path, principal, role in named:
        if roles.get(principal) is None:
            raise ProtocolError("VALIDATION_ERROR",
                                f"{path}: {principal} is not a member of this Group",
                                {"path": path})
        if role not in roles[principal]:
            raise ProtocolError("VALIDATION_ERROR",
                                f"{path}: {principal} does not have the {role} role here",
                                {"path": path, "roles": sorted(roles[principal])})
    if not body["ownerId"].startswith("user:"):
        raise ProtocolError("VALIDATION_ERROR", "body.ownerId: the MissionOwner is a human "
                            "(user:<name>), who gives the final Approval",
                            {"path": "body.ownerId"})


def mission_create_child(view: View, command: Command, context: Context) -> list[Draft]:
    item = target_item(view, command)
    parent = active_mission(view, item.mission_id)
    if item.child_mission_id:
        raise ProtocolError("TRANSITION_NOT_PERMITTED",
                            f"WorkItem {item.id} already waits on child Mission "
                            f"{item.child_mission_id}", {"childMissionId": item.child_mission_id})
    body = command.body
    child_id = new_id(view.missions, command, body.get("childMissionId"), "msn", "Mission")
    created = item_draft(item, "mission.child_created", {
        "childMissionId": child_id, "title": body["title"], "ownerId": parent.owner_id,
        "coordinatorId": parent.coordinator_id, "delegates": list(parent.delegates),
        "budgets": parent.budgets,
        "childFailurePolicy": body["childFailurePolicy"]})
    return [*release(item, context, "child Mission created"), created]


def _child_approval_evidence(item: WorkItem, mission: Mission, command: Command,
                             now: datetime) -> JsonObject:
    return {"id": derive_id("ev", command.id, item.id), "subject": f"mission:{mission.id}",
            "criteria": list(item.criteria_ids), "method": "child-mission-approval",
            "result": "approved", "producer": command.actor, "timestamp": format_time(now),
            "artifacts": []}


def mission_approve(view: View, command: Command, context: Context) -> list[Draft]:
    mission = target_mission(command)
    unfinished = [i for i in mission.work_items
                  if view.items[i].state not in (VERIFIED, CANCELLED)]
    if unfinished:
        raise ProtocolError("TRANSITION_NOT_PERMITTED",
                            f"Mission {mission.id} has WorkItems not verified or cancelled",
                            {"unfinished": unfinished})
    if not any(view.items[i].state == VERIFIED for i in mission.work_items):
        raise ProtocolError("TRANSITION_NOT_PERMITTED",
                            f"Mission {mission.id} has no verified WorkItem: there is nothing "
                            "to approve (fail or cancel it instead)", {"verified": 0})
    drafts = [Draft("mission.approved", {"by": command.actor,
                                         "comment": command.body.get("comment")}, mission.id)]
    parent = parent_item(view, mission)
    if parent is not None and parent.child_mission_id == mission.id:
        lifecycle.permitted(parent.state, "child mission approval")
        evidence = _child_approval_evidence(parent, mission, command, context.now)
        drafts.append(item_draft(parent, "work.verified", {"evidence": [evidence],
                                                           "by": command.actor,
                                                           "childMissionId": mission.id}))
    return drafts


def mission_refuse_approval(view: View, command: Command, context: Context) -> list[Draft]:
    """Not approved, yet: the reasons are recorded for the Coordinator and the Mission
    stays active for more work (to end it, mission.fail or mission.cancel)."""
    body = command.body
    mission = target_mission(command)
    items = body.get("workItems", [])
    strangers = [entry["workItemId"] for entry in items
                 if entry["workItemId"] not in mission.work_items]
    if strangers:
        raise ProtocolError("VALIDATION_ERROR",
                            f"body.workItems: not WorkItems of Mission {mission.id}: "
                            f"{', '.join(strangers)}", {"path": "body.workItems"})
    return [Draft("mission.approval_refused", {"by": command.actor, "reason": body["reason"],
                                               "workItems": items}, mission.id)]


def mission_end(event_type: str, item_event: str, child_failed: bool) -> Handler:
    def handle(view: View, command: Command, context: Context) -> list[Draft]:
        mission = target_mission(command)
        reason = command.body.get("reason") or f"Mission {mission.id} {event_type.split('.')[1]}"
        drafts = _end_work_of(view, mission, item_event, command, context, reason, {mission.id})
        drafts.append(Draft(event_type, {"by": command.actor, "reason": reason}, mission.id))
        parent = parent_item(view, mission)
        if child_failed and parent is not None and parent.child_mission_id == mission.id:
            drafts.append(_parent_of_failed_child(parent, mission, command, context, reason))
        return drafts
    return handle


# A child Mission ends the way its parent WorkItem does (work.cancel, work.fail, or its
# Mission's mission.cancel / mission.fail).
MISSION_ENDING = {"work.cancelled": "mission.cancelled", "work.failed": "mission.failed"}


def child_missions(view: View, item_id: str) -> list[Mission]:
    """The active child Missions of WorkItem `item_id` (the shell loads every descendant
    of the WorkItems a work.cancel, work.fail, mission.cancel or mission.fail ends)."""
    return sorted((m for m in view.missions.values()
                   if m.parent_work_item_id == item_id and m.state == MISSION_ACTIVE),
                  key=lambda m: m.id)


def end_child_missions(view: View, item: WorkItem, item_event: str, command: Command,
                       context: Context, seen: set[str] | None = None) -> list[Draft]:
    """The drafts that end every active child Mission of `item`, recursively and deepest
    first: a child's unfinished WorkItems (and their own child Missions) are ended as
    mission_end ends a Mission's, then `mission.cancelled` / `mission.failed` of the child.
    Each draft applies cleanly in order, and nothing of the ended tree stays live."""
    seen = set() if seen is None else seen
    drafts: list[Draft] = []
    for child in child_missions(view, item.id):
        if child.id in seen:
            continue
        seen.add(child.id)
        reason = f"parent WorkItem {item.id} {item_event.split('.')[1]}"
        drafts += _end_work_of(view, child, item_event, command, context, reason, seen)
        drafts.append(Draft(MISSION_ENDING[item_event], {
            "by": command.actor, "reason": reason, "parentWorkItemId": item.id,
            "cause": "parent work item failure or cancellation"}, child.id))
    return drafts


def _end_work_of(view: View, mission: Mission, item_event: str, command: Command,
                 context: Context, reason: str, seen: set[str]) -> list[Draft]:
    """End the unfinished WorkItems of an ending Mission, each after its child Missions
    (those of a finished WorkItem too: nothing under an ended Mission stays active)."""
    drafts: list[Draft] = []
    for item_id in mission.work_items:
        item = view.items[item_id]
        drafts += end_child_missions(view, item, item_event, command, context, seen)
        if item.state in UNFINISHED:
            drafts += release(item, context, reason)
            drafts.append(item_draft(item, item_event, {
                "reason": reason, "by": command.actor, "evidence": [],
                "cause": "parent mission failure or cancellation"}))
    return drafts


def _parent_of_failed_child(parent: WorkItem, mission: Mission, command: Command,
                            context: Context, reason: str) -> Draft:
    if parent.child_failure_policy == "fail":
        evidence = {**_child_approval_evidence(parent, mission, command, context.now),
                    "method": "child-mission-outcome", "result": f"child Mission failed: {reason}"}
        return item_draft(parent, "work.failed", {"reason": reason, "by": command.actor,
                                                  "evidence": [evidence],
                                                  "cause": "child mission failure"})
    return item_draft(parent, "work.child_mission_failed",
                      {"childMissionId": mission.id, "policy": "block", "reason": reason})


def work_propose(view: View, command: Command, context: Context) -> list[Draft]:
    body = command.body
    mission = target_mission(command)
    proposal_id = new_id(view.proposals, command, body.get("proposalId"), "prp", "Work Proposal")
    contract = {**check_contract(body["contract"]), "revision": 1}
    return [Draft("work.proposed", {"proposalId": proposal_id, "contract": contract,
                                    "proposer": command.actor}, mission.id)]


def work_authorize(view: View, command: Command, context: Context) -> list[Draft]:
    body = command.body
    mission = target_mission(command)
    item_id = new_id(view.items, command, body.get("workItemId"), "wi", "WorkItem")
    proposal_id = body.get("proposalId")
    lifecycle.permitted(lifecycle.PROPOSAL if proposal_id else lifecycle.NONE, command.type)
    if proposal_id:
        proposal = view.proposals.get(proposal_id)
        if proposal is None or proposal.mission_id != mission.id:
            raise ProtocolError("NOT_FOUND",
                                f"no Work Proposal {proposal_id} in Mission {mission.id}")
        if proposal.status != "open":
            raise ProtocolError("TRANSITION_NOT_PERMITTED",
                                f"Work Proposal {proposal_id} was already authorized")
    contract = check_new_contract(view, mission, body["contract"], item_id, 1,
                                  edges_of(view, mission))
    return [Draft("work.authorized", {"workItemId": item_id, "proposalId": proposal_id,
                                      "contract": contract}, mission.id, item_id)]


def work_revise_contract(view: View, command: Command, context: Context) -> list[Draft]:
    item = target_item(view, command)
    mission = active_mission(view, item.mission_id)
    revision = item.contract_revision + 1
    contract = check_new_contract(view, mission, command.body["contract"], item.id, revision,
                                  edges_of(view, mission))
    return [item_draft(item, "work.contract_revised", {
        "contract": contract, "contractRevision": revision,
        "previousRevision": item.contract_revision,
        "resolvedAmbiguities": list(item.open_ambiguities)})]
