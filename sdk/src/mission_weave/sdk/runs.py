"""One WorkItem's run in one slot: start it under a lease, run the handler beside the
lease's renewal (leases.py), then submit the handler's result, or fail the item with
Evidence when the handler raised, and say how it ended (`Outcome`, what `--once`
reports).

A refused `work.submit` is an error for the caller, and the item is failed with the
refusal as Evidence rather than left `active` until its lease runs out, unless the
refusal says the lease is no longer the worker's (LEASE_GONE): then it is only reported.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .client import ApiError, utcnow
from .handler_context import Preempted, WorkContext
from .leases import LEASE_GONE

if TYPE_CHECKING:
    from .scheduler import Assignment
    from .worker import Worker

log = logging.getLogger("mission_weave.sdk.worker")

# Evidence results and failure reasons are cut here, below what the server takes.
LONGEST_TEXT = 9000


@dataclass(frozen=True)
class Outcome:
    """How one WorkItem's run in a slot ended (what `--once` reports)."""

    group_id: str
    work_item_id: str
    state: str  # submitted | blocked | checkpointed | failed | refused | lease-lost | stopped
    ok: bool
    message: str


Said = Callable[[str, bool, str], Outcome]  # (state, ok, message) -> the run's Outcome


class Runs:
    def __init__(self, worker: Worker):
        self.worker = worker

    def start(self, assignment: Assignment) -> None:
        """Run the assignment in its slot, in a task of its own."""
        task = asyncio.create_task(self._run(assignment))
        self.worker.slots.running[(assignment.group_id, assignment.work_item_id)] = (task, None)

    async def _run(self, assignment: Assignment) -> None:
        worker = self.worker
        group_id, item_id = assignment.group_id, assignment.work_item_id
        key = (group_id, item_id)
        try:
            item = worker.work[group_id].items[item_id]
            try:
                grant = await worker.leases.start(group_id, item_id, assignment.ownership_epoch)
            except ApiError as error:
                log.info("starting %s refused: %s", item_id, error.code)
                worker.slots.refuse(group_id, item_id)
                worker.ended(Outcome(group_id, item_id, "refused", False,
                                     f"the server refused work.start for {item_id}: {error}"))
                return
            worker.slots.leased(assignment, grant.lease_id, grant.credential)
            ctx = WorkContext(worker, group_id, item, assignment, grant.lease_id,
                              grant.capability_token)
            ctx.lease_expires_at = grant.expires_at
            worker.slots.running[key] = (worker.slots.running[key][0], ctx)
            began = utcnow()
            ended = await self._execute(ctx)
            if not ctx.checkpointed and ctx.lease_lost is None:
                worker.slots.durations[group_id].append((utcnow() - began).total_seconds())
            worker.ended(ended)
        except asyncio.CancelledError:
            worker.ended(Outcome(group_id, item_id, "stopped", False,
                                 f"{item_id} was stopped before it ended (the worker is "
                                 "stopping)"))
            raise
        except ApiError as error:
            log.warning("running %s: the server refused: %s", item_id, error)
            worker.ended(Outcome(group_id, item_id, "refused", False,
                                 f"the server refused a command on {item_id}: {error}"))
        except Exception as error:
            log.exception("running %s failed", item_id)
            worker.ended(Outcome(group_id, item_id, "failed", False,
                                 f"running {item_id} failed: {error!r}"))
        finally:
            worker.slots.release(assignment)
            worker.wake.set()
            await worker.session.report_presence()

    async def _execute(self, ctx: WorkContext) -> Outcome:
        """Run the handler in its own task beside the lease renewal, then submit its
        result (or fail the item with Evidence). When the lease is lost meanwhile the
        renewal (or the log) cancels the handler's task and nothing is submitted.
        Offline (§11.5), a handler that ended waits for the reconciliation, then its result
        is submitted under the lease the reconnection started again."""
        worker = self.worker

        def outcome(state: str, ok: bool, message: str) -> Outcome:
            return Outcome(ctx.group_id, ctx.work_item_id, state, ok, message)

        def released() -> Outcome:
            if ctx.blocked:
                return outcome("blocked", True, f"blocked {ctx.work_item_id}")
            return outcome("checkpointed", True, f"checkpointed {ctx.work_item_id}; it is "
                           "queued again")

        def lost() -> Outcome:
            log.error("%s: the lease is gone (%s); the handler was cancelled and nothing "
                      "was submitted", ctx.work_item_id, ctx.lease_lost)
            return outcome("lease-lost", False, f"the lease of {ctx.work_item_id} is gone "
                           f"({ctx.lease_lost}); its handler was cancelled and nothing was "
                           "submitted")

        renewal = asyncio.create_task(worker.leases.keep(ctx))
        run = worker.handler(ctx)
        task = ctx._task = asyncio.create_task(ctx.meter.run(run) if ctx.meter else run)
        try:
            try:
                await asyncio.wait({task})
            except asyncio.CancelledError:  # the worker is stopping
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                raise
        finally:
            renewal.cancel()
            await asyncio.gather(renewal, return_exceptions=True)
        if ctx.lease_lost is None and not ctx.submitted:
            await worker.offline.until_reconciled(ctx)
        lease = ctx._lease_fields()  # the lease the reconnection started again, if it did
        if ctx.lease_lost is not None:
            if not task.cancelled() and task.exception() is not None \
                    and not isinstance(task.exception(), Preempted):
                log.info("the handler of %s raised after its lease was lost: %r",
                         ctx.work_item_id, task.exception())
            return lost()  # even if the handler ignored the cancellation and returned
        ctx._finishing = True  # from here on the worker submits or fails the item itself
        if task.cancelled():  # cancelled by the handler's own code, not by the worker
            return outcome("stopped", False, f"the handler of {ctx.work_item_id} was "
                           "cancelled; nothing was submitted, the item stays active until "
                           "its lease expires")
        try:
            result = task.result()
        except Preempted:
            log.info("%s checkpointed after a preemption request", ctx.work_item_id)
            return released()
        except Exception as error:
            if ctx.checkpointed:
                return released()
            if isinstance(error, ApiError) and error.code in LEASE_GONE:
                ctx.lease_lost = f"the server refused a command: {error.code} {error.message}"
                return lost()  # the handler met the loss first: it cannot be failed by us
            log.warning("handler failed on %s: %r", ctx.work_item_id, error)
            criteria = [c["id"] for c in ctx.contract.get("acceptanceCriteria", [])]
            evidence = ctx.evidence(criteria, "handler", f"failed: {error!r}"[:LONGEST_TEXT])
            await self._charge_before_failing(ctx)
            await worker.client.command(ctx.group_id, "work.fail",
                                        {"evidence": [evidence],
                                         "reason": str(error)[:LONGEST_TEXT]
                                         or type(error).__name__}, **lease)
            return outcome("failed", False, f"the handler failed on {ctx.work_item_id}: "
                           f"{error!r}; the WorkItem was failed with that as its Evidence")
        if ctx.checkpointed:
            return released()
        if ctx.submitted:
            worker.submitted.append((ctx.group_id, ctx.work_item_id))
            return outcome("submitted", True, f"submitted {ctx.work_item_id}")
        if result is None:
            return outcome("refused", False, f"the handler returned nothing for "
                           f"{ctx.work_item_id} and did not checkpoint or block it; it stays "
                           "active until its lease expires")
        try:
            await ctx._charge_now(final=True)
            await worker.client.command(ctx.group_id, "work.submit", {
                "contractRevision": ctx.contract_revision,
                "artifacts": list(result.get("artifacts", [])),
                "evidence": list(result["evidence"])}, **lease)
        except ApiError as error:
            if error.status >= 500 or error.status == 429:
                raise  # not an answer: whether it was submitted is unknown
            return await self._submission_refused(ctx, error, outcome)
        worker.submitted.append((ctx.group_id, ctx.work_item_id))
        log.info("submitted %s", ctx.work_item_id)
        return outcome("submitted", True, f"submitted {ctx.work_item_id}")

    async def _charge_before_failing(self, ctx: WorkContext) -> None:
        """A failed attempt cost what it cost; a refused charge does not stop the failure."""
        try:
            await ctx._charge_now(final=True)
        except ApiError as error:
            log.warning("charging %s before failing it was refused: %s", ctx.work_item_id,
                        error)

    async def _submission_refused(self, ctx: WorkContext, error: ApiError,
                                  outcome: Said) -> Outcome:
        """The server refused `work.submit`: an error for the caller, and the item is
        failed with the refusal as Evidence rather than left `active` until its lease
        runs out, unless the refusal says the lease is no longer ours (then we cannot)."""
        said = f"the server refused work.submit for {ctx.work_item_id}: {error.code} " \
               f"{error.message}"
        log.error("%s", said)
        if error.code in LEASE_GONE:
            return outcome("refused", False, f"{said}; the lease is no longer this "
                           "worker's, so it cannot fail the item")
        criteria = [c["id"] for c in ctx.contract.get("acceptanceCriteria", [])]
        evidence = ctx.evidence(criteria, "submission-refused",
                                f"fail: {error.code} {error.message}"[:LONGEST_TEXT])
        await self._charge_before_failing(ctx)
        try:
            await self.worker.client.command(ctx.group_id, "work.fail", {
                "evidence": [evidence], "reason": f"submission refused: {error.code}"},
                **ctx._lease_fields())
        except ApiError as fail_error:
            log.error("failing %s after the refused submission was refused too: %s",
                      ctx.work_item_id, fail_error)
            return outcome("refused", False, f"{said}; failing it was refused too: "
                           f"{fail_error.code} {fail_error.message}")
        return outcome("refused", False, f"{said}; the WorkItem was failed with that as its "
                       "Evidence")
