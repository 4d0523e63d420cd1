"""Scheduling disclosure (§11.2): the owner of a queued or active WorkItem tells its Group
when it expects to start and finish it. The body is exactly the disclosure (the schema
refuses any other member, so nothing of another Group can ride along); the event carries
it unchanged and the WorkItem keeps the latest one."""

from mission_weave.protocol.errors import ProtocolError
from mission_weave.protocol.timefmt import parse_time

from .. import fencing
from ..state import View
from .base import Command, Context, Draft, item_draft, target_item


def schedule_disclose(view: View, command: Command, context: Context) -> list[Draft]:
    item = target_item(view, command)
    if item.owner is None or item.owner != command.agent_id:
        raise ProtocolError("FORBIDDEN",
                            f"only the owner of WorkItem {item.id} discloses its schedule")
    if command.ownership_epoch is not None and command.ownership_epoch != item.ownership_epoch:
        raise ProtocolError(
            "STALE_OWNERSHIP",
            f"ownershipEpoch {command.ownership_epoch} is not the current epoch "
            f"{item.ownership_epoch}", {"ownershipEpoch": item.ownership_epoch})
    if not fencing.owner_is_live(item, context.now):
        raise ProtocolError("STALE_OWNERSHIP",
                            f"ownership of WorkItem {item.id} expired; nothing to disclose",
                            {"ownershipEpoch": item.ownership_epoch})
    body = command.body
    start_from = parse_time(body["estimatedStart"]["from"])
    if parse_time(body["estimatedStart"]["to"]) < start_from:
        raise ProtocolError("VALIDATION_ERROR",
                            "body.estimatedStart.to is before body.estimatedStart.from",
                            {"path": "body.estimatedStart.to"})
    if parse_time(body["estimatedCompletion"]) < start_from:
        raise ProtocolError("VALIDATION_ERROR",
                            "body.estimatedCompletion is before the estimated start",
                            {"path": "body.estimatedCompletion"})
    return [item_draft(item, "work.schedule_disclosed", dict(body))]
