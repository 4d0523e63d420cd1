"""The demo handler: "does" the demo Mission's WorkItems (mw_demo: research -> outline,
figures -> report) by writing a short Markdown deliverable, publishing it as an artifact
when the server takes artifacts, and answering every acceptance criterion with Evidence.

    python -m mission_weave.sdk.worker --key .mw/agents/worker-1.json \\
        --handler mission_weave.sdk.demo:handle
"""

import asyncio
import logging

from .client import ApiError
from .handler_context import HandlerResult, WorkContext

log = logging.getLogger("mission_weave.sdk.demo")

STEPS = ("read the contract", "gather the inputs", "write the deliverable")
STEP_SECONDS = 0.5


async def handle(ctx: WorkContext) -> HandlerResult:
    contract = ctx.contract
    for number, step in enumerate(STEPS, start=1):
        # A safe point between steps: a preemption request checkpoints here.
        await ctx.raise_if_preempted(step, milestones=list(STEPS[:number - 1]),
                                     nextCheckpoint=step)
        await asyncio.sleep(STEP_SECONDS)
    inputs = contract.get("dependencies", {}).get("workItems", [])
    text = (f"# {contract['goal']}\n\nWorkItem `{ctx.work_item_id}` of Mission "
            f"`{ctx.mission_id}`.\n\nInputs: {', '.join(inputs) or 'none'}.\n").encode()
    artifacts = []
    try:
        # The contract asks that the deliverable cite its inputs (check:sources-present):
        # a note of what it was made from is published too, and the deliverable names it.
        notes = f"Made for {ctx.work_item_id} from: {', '.join(inputs) or 'the goal'}\n"
        source = await ctx.publish_artifact(notes.encode(), "text/plain")
        artifacts.append(await ctx.publish_artifact(text, "text/markdown", sources=[source]))
    except ApiError as error:  # a server without the artifact store: Evidence alone
        log.info("no artifact for %s: %s", ctx.work_item_id, error.code)
    evidence = []
    for criterion in contract.get("acceptanceCriteria", []):
        evidence.append(ctx.evidence(
            [criterion["id"]], method="self-check",
            result=f"pass: {criterion['description']} (deliverable of {len(text)} bytes; "
                   f"inputs {inputs or 'none'})", artifacts=artifacts))
    return {"evidence": evidence, "artifacts": artifacts}
