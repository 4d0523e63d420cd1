"""The work projections' repository: load the slice of state a command needs, and
save what `evolve` changed. The only code that writes Mission/WorkItem/Proposal rows."""

from apps.identity.models import Agent, Membership

from . import models, state
from .commands import Candidate, Command
from .state import View

# Commands that look at a whole Mission: its dependency graph or all its WorkItems.
WHOLE_MISSION = frozenset({"work.revise_contract", "mission.approve", "mission.fail",
                           "mission.cancel"})


def load(group_id: str, command: Command) -> View:
    body = command.body if isinstance(command.body, dict) else {}
    view = View()
    item_ids = {command.work_item_id} if command.work_item_id else set()
    contract = body.get("contract")
    if isinstance(contract, dict) and isinstance(contract.get("dependencies"), dict):
        item_ids |= {d for d in contract["dependencies"].get("workItems") or () if isinstance(d, str)}
    _load_items(view, group_id, work_item_id__in=item_ids)
    mission_ids = {item.mission_id for item in view.items.values()}
    if isinstance(body.get("missionId"), str):
        mission_ids.add(body["missionId"])
    _load_missions(view, group_id, mission_id__in=mission_ids)
    if command.type in WHOLE_MISSION:
        _load_items(view, group_id, mission_id__in=mission_ids)
        parents = {m.parent_work_item_id for m in view.missions.values() if m.parent_work_item_id}
        _load_items(view, group_id, work_item_id__in=parents)
    dependencies = {d for item in view.items.values() for d in item.depends_on} - set(view.items)
    _load_items(view, group_id, work_item_id__in=dependencies)
    if isinstance(body.get("proposalId"), str):
        for row in models.Proposal.objects.filter(group_id=group_id, proposal_id=body["proposalId"]):
            view.proposals[row.proposal_id] = state.proposal_from_doc(row.doc)
    return view


def load_all(group_id: str) -> View:
    """Every projected object of the Group, for mw_verify."""
    view = View()
    _load_items(view, group_id)
    _load_missions(view, group_id)
    for row in models.Proposal.objects.filter(group_id=group_id):
        view.proposals[row.proposal_id] = state.proposal_from_doc(row.doc)
    return view


def load_items(group_id: str, item_ids) -> View:
    view = View()
    _load_items(view, group_id, work_item_id__in=list(item_ids))
    return view


def _load_items(view: View, group_id: str, **filters) -> None:
    if any(not value for value in filters.values()):
        return
    for row in models.WorkItem.objects.filter(group_id=group_id, **filters).only("doc"):
        item = state.item_from_doc(row.doc)
        view.items[item.id] = item


def _load_missions(view: View, group_id: str, **filters) -> None:
    if any(not value for value in filters.values()):
        return
    for row in models.Mission.objects.filter(group_id=group_id, **filters).only("doc"):
        mission = state.mission_from_doc(row.doc)
        view.missions[mission.id] = mission


def candidates(group_id: str, command: Command) -> dict:
    """Agent Cards and roles of the agents a work.offer names."""
    names = command.body.get("candidates") if isinstance(command.body, dict) else None
    if command.type != "work.offer" or not isinstance(names, list):
        return {}
    names = [n for n in names if isinstance(n, str)]
    roles = {m.principal[len("agent:"):]: frozenset(m.roles)
             for m in Membership.objects.filter(group_id=group_id, active=True,
                                                principal__in=[f"agent:{n}" for n in names])}
    return {agent.id: Candidate(agent.id, roles[agent.id], agent.card)
            for agent in Agent.objects.filter(id__in=list(roles))}


def save(group_id: str, before: View, after: View) -> None:
    """Write the objects `evolve` changed, one upsert per table."""
    items = [i for key, i in after.items.items() if before.items.get(key) is not i]
    missions = [m for key, m in after.missions.items() if before.missions.get(key) is not m]
    proposals = [p for key, p in after.proposals.items() if before.proposals.get(key) is not p]
    if items:
        models.WorkItem.objects.bulk_create(
            [item_row(group_id, i) for i in items], update_conflicts=True,
            unique_fields=["group", "work_item_id"], update_fields=ITEM_COLUMNS)
    if missions:
        models.Mission.objects.bulk_create(
            [mission_row(group_id, m) for m in missions], update_conflicts=True,
            unique_fields=["group", "mission_id"], update_fields=MISSION_COLUMNS)
    if proposals:
        models.Proposal.objects.bulk_create(
            [proposal_row(group_id, p) for p in proposals], update_conflicts=True,
            unique_fields=["group", "proposal_id"], update_fields=["status", "doc"])


ITEM_COLUMNS = ["mission_id", "state", "owner", "ownership_epoch", "revision", "lease_id",
                "lease_expires_at", "start_by", "blocked_until", "doc", "updated_at"]
MISSION_COLUMNS = ["state", "title", "parent_work_item_id", "revision", "doc", "updated_at"]


def item_row(group_id: str, item: state.WorkItem) -> models.WorkItem:
    lease = item.live_lease
    return models.WorkItem(
        group_id=group_id, work_item_id=item.id, mission_id=item.mission_id, state=item.state,
        owner=item.owner, ownership_epoch=item.ownership_epoch, revision=item.revision,
        lease_id=lease.id if lease else None, lease_expires_at=lease.expires_at if lease else None,
        start_by=item.start_by, blocked_until=item.blocked_until, doc=state.to_doc(item),
        updated_at=item.updated_at)


def mission_row(group_id: str, mission: state.Mission) -> models.Mission:
    return models.Mission(
        group_id=group_id, mission_id=mission.id, state=mission.state, title=mission.title,
        parent_work_item_id=mission.parent_work_item_id, revision=mission.revision,
        doc=state.to_doc(mission), updated_at=mission.updated_at)


def proposal_row(group_id: str, proposal: state.Proposal) -> models.Proposal:
    return models.Proposal(group_id=group_id, proposal_id=proposal.id,
                           mission_id=proposal.mission_id, status=proposal.status,
                           doc=state.to_doc(proposal))
