"""What the sweeper decides for itself when a deadline passes (§10.2, §11.3, §11.5).

Pure, like `commands.decide`: the view is one Group's due WorkItems (and their
Missions, and their dependencies) as read under the Group lock, and `context.now` is the
only time used, so a stale candidate list from the shell is harmless: an item that was
renewed, started, accepted or already fenced since it was selected yields nothing here.

A lease timeout appends `lease.expired`; a missed start-by deadline or a run-out blocked
lease `work.ownership_expired` (a missed start-by of an epoch never started with the
`attempt` it used up, retries.py). Either way the item has no live owner any more: it is
re-offerable at once by a Coordinator and counts against nobody's capacity. Under
`autoDispatch` a timed-out attempt (lease or start-by, not a blocked one, which waits for
its blocker's resolution) is also ended in the same transaction: `work.failed` by the
server, offered again once the contract's backoff has passed, or never when its retry
budget is spent (dispatch.py). Offer expiry itself appends nothing (§10.2); only
automatic dispatch of the next candidate does, and that decision belongs to
`dispatch.redispatch`. A new session of the owner finds a lease past its expiry the
same way (`commands.revoke_for_session` calls `decide`).
"""

from collections.abc import Callable, Iterable
from datetime import datetime

from . import dispatch, retries
from .commands.base import Context, Draft, item_draft
from .json_types import JsonObject
from .state import ACTIVE, BLOCKED, FAILED, MISSION_ACTIVE, OFFERED, QUEUED, View, WorkItem

# What automatic dispatch appends for an item (dispatch.redispatch).
Redispatch = Callable[[View, WorkItem, Context], list[Draft]]

LEASE_EXPIRED, OWNERSHIP_EXPIRED = "lease.expired", "work.ownership_expired"


def _ownership_expired(item: WorkItem, reason: str) -> Draft:
    data = {"agentId": item.owner, "ownershipEpoch": item.ownership_epoch, "reason": reason}
    if reason == "start_by":
        data["attempt"] = retries.missed_start_attempt(item)  # §11.4: an attempt used up
    return item_draft(item, OWNERSHIP_EXPIRED, data)


def expire(item: WorkItem, now: datetime) -> list[Draft]:
    """Close what a passed deadline ended: the lease of active work (timeout: one
    `lease.expired`; with its lease closed the owner is no longer live, and the next
    work.offer fences it), the start-by deadline of queued work, the blocked lease of
    blocked work. The same boundaries as `fencing`: at `expires_at` a renewal is
    already refused."""
    lease = item.live_lease
    if item.state == ACTIVE and lease is not None and now >= lease.expires_at:
        return [item_draft(item, LEASE_EXPIRED, {"leaseId": lease.id, "reason": "timeout"})]
    if item.owner is None:
        return []
    if item.state == QUEUED and item.start_by is not None and now >= item.start_by:
        return [_ownership_expired(item, "start_by")]
    if item.state == BLOCKED and item.blocked_until is not None and now >= item.blocked_until:
        return [_ownership_expired(item, "blocked_lease")]
    return []


def wants_dispatch(view: View, item: WorkItem, now: datetime) -> bool:
    """An item automatic dispatch may have something to do for, in an active Mission that
    asked for it: an offered item whose unanswered offers all expired, a failed item whose
    retry backoff ran out, an active or queued item whose owner timed out. Reads neither
    the contract nor the dependencies (the shell selects with it before the lock);
    `dispatch.redispatch` decides."""
    mission = view.missions.get(item.mission_id)
    if mission is None or not mission.auto_dispatch or mission.state != MISSION_ACTIVE:
        return False
    if item.state == OFFERED:
        unanswered = [o for o in item.offers if o.status == "live"]
        return bool(unanswered) and not any(o.is_live(now) for o in unanswered)
    if item.state == FAILED:
        return item.retry_at is not None and now >= item.retry_at
    return dispatch.timed_out(item, now) is not None


def decide(view: View, context: Context, redispatch: Redispatch | None = None,
           item_ids: Iterable[str] | None = None) -> list[Draft]:
    """Every draft the sweep appends for the WorkItems `item_ids` (default: all of the
    view; the others are what they depend on), in item id order: each one's expiry, then
    `redispatch(view, item, context)` as the expiry leaves it, all in one transaction, so
    that a timed-out item is never left expired but not reassigned. Without `redispatch`
    (no automatic dispatch available) expired offers, due retries and timeouts get only
    their expiry."""
    drafts: list[Draft] = []
    for item_id in sorted(view.items if item_ids is None else item_ids):
        item = view.items.get(item_id)
        if item is None:
            continue
        expired = expire(item, context.now)
        drafts += expired
        if redispatch is not None and wants_dispatch(view, item, context.now):
            future, current = dispatch.evolved(view, expired, item_id, context.now)
            assert current is not None, "an expiry never removes its WorkItem"
            drafts += redispatch(future, current, context)
    return drafts


def split(view: View, now: datetime) -> tuple[list[Draft], list[str]]:
    """(the expiry drafts, in item id order; the ids of the items due automatic
    dispatch). An expiry needs nothing but its own WorkItem, so the sweeper decides it
    before taking the Group lock and appends it if the item is unchanged under it;
    dispatch ranks the Group's workers and is decided under the lock (`decide`), and so
    is the expiry of an item it is for: a timeout and its reassignment are one
    transaction, or neither happened and the item is still due next sweep."""
    drafts: list[Draft] = []
    dispatching: list[str] = []
    for item_id in sorted(view.items):
        item = view.items[item_id]
        if wants_dispatch(view, item, now):
            dispatching.append(item_id)
        else:
            drafts += expire(item, now)
    return drafts, dispatching


def counts(events: Iterable[JsonObject | Draft]) -> JsonObject:
    """The sweep's answer for what it appended (event documents or Drafts)."""
    types = [e["type"] if isinstance(e, dict) else e.type for e in events]
    return {"expiredLeases": types.count(LEASE_EXPIRED),
            "expiredOwnerships": types.count(OWNERSHIP_EXPIRED),
            "redispatched": types.count("work.offered"),
            "failed": types.count("work.failed")}
