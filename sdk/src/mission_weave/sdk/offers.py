"""The Worker's answers to offers (§10.3): accepting one is a durable commitment, so
admission control (admission.py, a pure decision) first checks that the worker can keep
it; an offer it refuses is declined with the reason and a detail. A contract revised
before the item started must be accepted again; a revision admission control refuses is
left unaccepted (there is no offer to decline), so the item never starts.

What the decision rests on (`facts`) comes from the worker's view of the Group's log,
its slots (slots.py), its membership (session.py) and its two estimates, which a
subclass overrides or the constructor replaces (`Worker.estimate_seconds`,
`Worker.estimate_cost`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from . import admission
from .client import ApiError, utcnow
from .queues import Item

if TYPE_CHECKING:
    from .worker import Worker

log = logging.getLogger("mission_weave.sdk.worker")

START_WINDOW_SECONDS = 600  # the server's default start window (MW_START_WINDOW_SECONDS)


class Offers:
    def __init__(self, worker: Worker, *, capability_ranges: Mapping[str, str] | None,
                 needs: Mapping[str, Sequence[str]] | None, queue_capacity: int | None,
                 start_window_seconds: int):
        self.worker = worker
        self.capability_ranges = dict(capability_ranges or {})
        for spec in self.capability_ranges.values():
            admission.parse_spec(spec)  # a bad range is an error now, not at the first offer
        self.needs = {kind: tuple(names) for kind, names in (needs or {}).items()}
        self.queue_capacity, self.start_window_seconds = queue_capacity, start_window_seconds

    def facts(self, group_id: str, item: Item, now: datetime, *,
              revision: bool = False) -> admission.Facts:
        """What admission control decides an offer (or a revised contract) on."""
        worker, slots = self.worker, self.worker.slots
        owned = slots.owned_count()
        waiting = slots.waiting_count()
        capacity = max(1, slots.capacity)
        ahead = max(0, owned - capacity + 1)  # items before this one when every slot is taken
        typical = worker.estimate_seconds(item.contract)
        window = worker.facts[group_id].start_within.get(item.id) or self.start_window_seconds
        return admission.Facts(
            now=now, card=worker.card, roles=worker.session.roles_in(group_id),
            needs=self.needs, capability_ranges=self.capability_ranges,
            dependencies_met=worker.work[group_id].dependencies_met(item),
            slots=slots.capacity, owned=owned, waiting=waiting,
            queue_capacity=self.queue_capacity, check_capacity=not revision,
            start_delay_seconds=0.0 if revision else math.ceil(ahead / capacity) * typical,
            start_by=None if revision else now + timedelta(seconds=window),
            estimate_seconds=worker.estimate_seconds(item.contract),
            usage=worker.facts[group_id].usage.get(item.id, {}),
            estimate_cost=worker.estimate_cost(item.contract))

    async def consider(self, group_id: str, item: Item) -> None:
        """Accept the offer, or decline it with admission control's reason."""
        worker = self.worker
        decline = admission.admit(item.contract, worker.admission_facts(group_id, item, utcnow()))
        if decline is not None:
            await self._decline(group_id, item, decline)
            return
        try:
            await worker.client.command(group_id, "work.accept_offer",
                                        {"contractRevision": item.contract_revision},
                                        workItemId=item.id)
            worker.slots.accepting.add((group_id, item.id, item.ownership_epoch))
            log.info("accepted %s", item.id)
        except ApiError as error:  # another worker won, the offer moved on, ...
            log.info("accepting %s refused: %s", item.id, error.code)
            worker.slots.refuse(group_id, item.id)

    async def accept_revision(self, group_id: str, item: Item) -> None:
        """A contract revised before we started it must be accepted again (§10.2). There
        is no offer to decline: a revision admission control refuses is left unaccepted
        (the item stays gated; the coordinator sees it never starts)."""
        worker = self.worker
        decline = admission.admit(item.contract, worker.admission_facts(
            group_id, item, utcnow(), revision=True))
        if decline is not None:
            log.warning("not accepting revision %s of %s: %s (%s)", item.contract_revision,
                        item.id, decline.reason, decline.detail)
            worker.slots.refuse(group_id, item.id)
            return
        try:
            await worker.client.command(group_id, "work.accept_offer",
                                        {"contractRevision": item.contract_revision},
                                        workItemId=item.id)
            log.info("accepted revision %s of %s", item.contract_revision, item.id)
        except ApiError as error:
            log.info("accepting revision of %s refused: %s", item.id, error.code)
        worker.slots.refuse(group_id, item.id)

    async def _decline(self, group_id: str, item: Item, decline: admission.Decline) -> None:
        log.info("declining %s: %s (%s)", item.id, decline.reason, decline.detail)
        try:
            await self.worker.client.command(group_id, "work.decline_offer", decline.body(),
                                             workItemId=item.id)
        except ApiError as error:
            log.info("declining %s refused: %s", item.id, error.code)
        self.worker.slots.refuse(group_id, item.id)
