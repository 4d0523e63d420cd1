"""A fake event feed for the inbox unit tests: a hash-chained Group log served the way
GET /events serves it, with an optional online floor and a signed snapshot below it."""

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mission_weave.protocol import canonical
from mission_weave.sdk.client import ApiError

AUTHORITY_KEY_ID = "authority#1"


def chain(count: int, group_id: str = "grp_t", start: int = 1, prev: str | None = None) -> list:
    events, prev_hash = [], prev or canonical.ZERO_HASH
    for sequence in range(start, start + count):
        event = {"id": f"ev-{group_id}-{sequence}", "groupId": group_id, "sequence": sequence,
                 "type": "conversation.message_posted", "occurredAt": "2026-11-29T08:00:00Z",
                 "actor": "agent:a", "commandId": f"cmd-{sequence}", "missionId": None,
                 "workItemId": None, "revision": sequence, "data": {"n": sequence},
                 "prevHash": prev_hash}
        event["hash"] = canonical.content_hash(event)
        prev_hash = event["hash"]
        events.append(event)
    return events


class FakeFeed:
    """Stands in for the Client in Inbox: events(), get(url), authority_keys()."""

    def __init__(self, events: list, floor: int = 0, group_id: str = "grp_t"):
        self.log, self.floor, self.group_id = events, floor, group_id
        self.authority = Ed25519PrivateKey.generate()
        at_floor = next((e["hash"] for e in events if e["sequence"] == floor), None)
        self.snapshot_doc = canonical.sign({"id": "snap-1", "groupId": group_id,
                                            "sequence": floor, "hash": at_floor,
                                            "state": {"workItems": []}},
                                           self.authority, AUTHORITY_KEY_ID)
        self.reference = {"id": "snap-1", "groupId": group_id, "sequence": floor,
                          "hash": at_floor, "url": "/snapshots/snap-1",
                          "signature": self.snapshot_doc["signature"]}
        self.requests = []

    def auth_headers(self) -> dict:
        return {}

    async def events(self, group_id: str, after: int, limit: int) -> dict:
        self.requests.append(after)
        if after < self.floor:
            raise ApiError(410, "CURSOR_TOO_OLD", "below the floor",
                           {"snapshot": self.reference})
        page = [e for e in self.log if e["sequence"] > after][:limit]
        return {"events": page, "headSequence": self.log[-1]["sequence"] if self.log else 0}

    async def get(self, url: str) -> dict:
        assert url == self.reference["url"]
        return self.snapshot_doc

    async def authority_keys(self) -> dict:
        return {AUTHORITY_KEY_ID: self.authority.public_key()}
