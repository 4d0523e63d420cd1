"""Push committed events to the channel layer. Redis is a hint, PostgreSQL the record:
a lost push is filled from the log by sequence, so a failure here is logged, not raised."""

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

log = logging.getLogger(__name__)


def channel_group(group_id: str) -> str:
    return f"mw.group.{group_id}"


def events(group_id: str, documents: list) -> None:
    layer = get_channel_layer()
    if layer is None or not documents:
        return
    try:
        async_to_sync(layer.group_send)(channel_group(group_id), {
            "type": "group.events", "groupId": group_id,
            "headSequence": documents[-1]["sequence"], "events": documents})
    except Exception:  # the log already holds the events; subscribers catch up from it
        log.warning("publishing events of group %s failed", group_id, exc_info=True)
