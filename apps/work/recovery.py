"""Recovery paths the server starts itself (§11.3, §11.5)."""

from datetime import datetime

from apps.identity import sessions
from apps.ledger import pipeline
from mission_weave.core import commands
from mission_weave.core.state import ACTIVE

from . import models, work_store


def open_session(request: dict, now: datetime) -> dict:
    """Open an Agent session (PROTOCOL §1). It supersedes the Agent's previous one, whose
    leases are revoked and their WorkItems returned to `queued` before this returns
    (§11.3: before the new runtime may start them under new leases)."""
    opened = sessions.open_session(request, now)
    revoke_agent_leases(request["agentId"], now)
    return opened


def revoke_agent_leases(agent_id: str, now: datetime) -> int:
    """Session replacement: in each Group, one system transaction revokes the agent's
    open leases and returns those WorkItems to `queued` (§11.3); a lease already past its
    expiry is closed as the sweeper would close it (its Mission tells whether automatic
    dispatch ends the attempt). Returns the count of events appended."""
    held = (models.WorkItem.objects.filter(owner=agent_id, state=ACTIVE, lease_id__isnull=False)
            .values_list("group_id", "work_item_id"))
    by_group: dict[str, list[str]] = {}
    for group_id, item_id in held:
        by_group.setdefault(group_id, []).append(item_id)
    policy = pipeline.policy()
    revoked = 0
    for group_id, item_ids in by_group.items():
        events = pipeline.submit_system(
            group_id, lambda view: commands.revoke_for_session(view, agent_id, now, policy), now,
            lambda gid, ids=item_ids: work_store.load_items_and_missions(gid, ids))
        revoked += len(events or ())  # None only with skip_locked, not used here
    return revoked
