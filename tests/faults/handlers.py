"""The SDK workers' handler in the fault tests (`--handler tests.faults.handlers:hold`):
reports progress, holds the item until the file $MW_FAULT_GO exists, then publishes a
markdown deliverable and returns Evidence for every criterion (the worker submits it)."""

import asyncio
import os
from pathlib import Path


async def hold(ctx):
    await ctx.progress("started", milestones=["read the contract"])
    go = Path(os.environ["MW_FAULT_GO"])
    while not go.exists():
        await asyncio.sleep(0.1)
    summary = await ctx.publish_artifact(f"# {ctx.contract['goal']}\n\nBy {ctx.producer}.\n"
                                         .encode(), "text/markdown")
    criteria = [c["id"] for c in ctx.contract["acceptanceCriteria"]]
    evidence = ctx.evidence(criteria, method="self-check", result="pass: written",
                            artifacts=[summary])
    return {"evidence": [evidence], "artifacts": [summary]}
