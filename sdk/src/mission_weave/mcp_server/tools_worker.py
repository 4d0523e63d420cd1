"""The worker's tools: find offered work, take it, and do it under the lease, in the
order the protocol allows: list_offers -> accept_offer -> start_work -> (read_inputs,
report_progress, publish_deliverable) -> submit_work; or block_work, pause_work, give_up.

Module note: no `from __future__ import annotations` here, so that the MCP SDK reads each
tool's parameter types (its input schema) from the signature as written."""

import base64
import binascii
from typing import Annotated, Literal

from mcp.server import MCPServer
from pydantic import Field

from mission_weave.protocol.json_types import JsonObject
from mission_weave.protocol.timefmt import format_time, parse_time
from mission_weave.sdk.client import utcnow

from . import reads
from .agent import Agent
from .answers import Refusal
from .evidence import EvidenceInput, criteria_of, record
from .lease_keeper import HeldLease
from .tools_shared import READ_ONLY, adder

WorkItemId = Annotated[str, Field(description="The WorkItem's id, as list_offers or "
                                  "list_my_work show it.")]
MINE = ("queued", "active", "blocked", "submitted")


def decode(content_base64: str) -> bytes:
    """Standard or URL-safe base64, padded or not."""
    text = "".join(content_base64.split())
    try:
        return base64.b64decode(text.replace("-", "+").replace("_", "/")
                                + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError) as error:
        raise Refusal("VALIDATION_ERROR", f"content_base64 is not base64: {error}") from None


def register(server: MCPServer, agent: Agent) -> None:
    add = adder(server)

    async def list_offers() -> JsonObject:
        """List the WorkItems offered to you right now, each with its contract's goal,
        deliverables, acceptance criteria, budgets and deadline, and when the offer
        expires. Call this first to find work; then accept_offer (or decline_offer)."""
        now = utcnow()
        offers = []
        for item in await agent.work_items(state="offered"):
            offer = reads.live_offer(item, agent.agent_id, now)
            if offer is not None:
                offers.append({**reads.work_item(item), "offerExpiresAt": offer["expiresAt"]})
        renewals = [reads.work_item(item) for item in await agent.work_items(
            state="queued", owner=agent.agent_id)
            if item.get("acceptedContractRevision") != item["contractRevision"]]
        answer: JsonObject = {"offers": offers}
        if renewals:
            answer["revisedContractsToAccept"] = renewals
        return answer

    async def list_my_work() -> JsonObject:
        """List the WorkItems you own (queued: accepted, waiting for start_work; active:
        you hold the lease; blocked: waiting on your question; submitted: under review),
        with their contract terms and your lease, if any."""
        items = [item for item in await agent.work_items(owner=agent.agent_id, order="priority")
                 if item["state"] in MINE]
        shown = []
        for item in items:
            brief = reads.work_item(item)
            held = agent.leases.held.get(item["id"])
            if held is not None:
                brief["leaseKeeper"] = held.summary()
            shown.append(brief)
        return {"agentId": agent.agent_id, "workItems": shown}

    async def accept_offer(work_item_id: WorkItemId) -> JsonObject:
        """Accept the offer of a WorkItem (or a revised contract of one you own): it
        becomes yours, `queued`, and must be started before `startBy`. Read its contract
        first (list_offers shows it). Next: start_work."""
        item = await agent.work_item(work_item_id)
        answer = await agent.command("work.accept_offer",
                                     {"contractRevision": item["contractRevision"]},
                                     workItemId=work_item_id)
        accepted = next(e["data"] for e in answer["events"]
                        if e["type"] in ("work.offer_accepted", "work.contract_accepted"))
        return {"workItemId": work_item_id, "state": "queued",
                "contractRevision": item["contractRevision"],
                "ownershipEpoch": accepted.get("ownershipEpoch", item["ownershipEpoch"]),
                "startBy": accepted.get("startBy", item.get("startBy")),
                "next": "start_work when you are ready to work on it"}

    async def decline_offer(
            work_item_id: WorkItemId,
            reason: Annotated[Literal["capacity", "deadline", "capability", "authorization",
                                      "dependency", "budget"],
                              Field(description="Why: capacity (too busy), deadline (cannot "
                                    "finish in time), capability (lacks the skill), "
                                    "authorization (not allowed to), dependency (missing "
                                    "input), budget (too little budget).")],
            detail: Annotated[str | None, Field(description="One sentence for the "
                                                "Coordinator.")] = None) -> JsonObject:
        """Decline an offer addressed to you, with the protocol's reason. The Coordinator
        may offer it to someone else."""
        body: JsonObject = {"reason": reason}
        if detail:
            body["detail"] = detail
        await agent.command("work.decline_offer", body, workItemId=work_item_id)
        return {"workItemId": work_item_id, "declined": True, "reason": reason}

    async def start_work(work_item_id: WorkItemId) -> JsonObject:
        """Start a WorkItem you accepted (state `queued`): you get its Execution Lease and
        it becomes `active`. This server renews the lease in the background while you
        work; you never renew it yourself. Next: read_inputs, do the work,
        publish_deliverable, then submit_work (or block_work / give_up)."""
        item = await agent.work_item(work_item_id)
        answer = await agent.command("work.start", agent.leases.body(),
                                     workItemId=work_item_id,
                                     ownershipEpoch=item["ownershipEpoch"])
        started = next(e["data"] for e in answer["events"] if e["type"] == "work.started")
        lease = HeldLease(work_item_id, item["missionId"], started["leaseId"],
                          started["ownershipEpoch"], parse_time(started["expiresAt"]),
                          item["contract"], item["contractRevision"])
        agent.leases.hold(lease)
        return {"workItemId": work_item_id, "state": "active", "lease": lease.summary(),
                "contract": reads.terms(item["contract"]),
                "dependsOn": item.get("dependsOn", []),
                "next": "read_inputs, then publish_deliverable, then submit_work"}

    async def report_progress(
            work_item_id: WorkItemId,
            phase: Annotated[str, Field(description="Where you are, e.g. 'drafting'.")],
            milestones: Annotated[list[str], Field(description="Milestones reached so far.")]
            = [],  # noqa: B006 (pydantic copies defaults)
            next_checkpoint: Annotated[str | None, Field(description="The next milestone.")]
            = None,
            blockers: Annotated[list[str], Field(description="What slows you down, if "
                                                 "anything.")] = []) -> JsonObject:  # noqa: B006
        """Report progress on an active WorkItem you hold the lease on. Optional, but
        useful on long work: the Coordinator sees it."""
        body: JsonObject = {"phase": phase, "milestones": milestones, "blockers": blockers}
        if next_checkpoint:
            body["nextCheckpoint"] = next_checkpoint
        await agent.leases.command(work_item_id, "work.progress", body)
        return {"workItemId": work_item_id, "reported": phase}

    async def publish_deliverable(
            work_item_id: WorkItemId,
            media_type: Annotated[str, Field(description="The content's media type, e.g. "
                                             "'text/markdown', 'application/json', "
                                             "'image/png'.")],
            text: Annotated[str | None, Field(description="The content as text (UTF-8). Give "
                                              "this or content_base64.")] = None,
            content_base64: Annotated[str | None, Field(description="Binary content in "
                                                        "base64. Give this or text.")] = None,
            sources: Annotated[list[str], Field(description="Content hashes ('sha256:...') of "
                                                "the inputs this was derived from, e.g. the "
                                                "dependency artifacts read_inputs showed.")]
            = [],  # noqa: B006
            deliverable_id: Annotated[str | None, Field(description="The contract's "
                                                        "deliverable id this artifact "
                                                        "delivers.")] = None,
            schema: Annotated[str | None, Field(description="A schema id for structured "
                                                "content, if any.")] = None,
            model: Annotated[str | None, Field(description="Your model's name, recorded in "
                                               "the artifact's provenance.")] = None,
    ) -> JsonObject:
        """Publish a deliverable of an active WorkItem: the content is stored under its
        sha256 and its signed manifest published (`artifact.publish`). Returns its hash,
        which submit_work cites. Call after start_work, before submit_work."""
        if (text is None) == (content_base64 is None):
            raise Refusal("VALIDATION_ERROR", "give exactly one of text and content_base64")
        data = text.encode() if text is not None else decode(content_base64 or "")
        held = agent.leases.current(work_item_id)
        item = None if held is not None else await agent.work_item(work_item_id)
        mission_id = held.mission_id if held is not None else item and item["missionId"]
        contract = held.contract if held is not None else (item or {}).get("contract", {})
        name = await agent.client.put_blob(data)
        capabilities = contract.get("capabilities") or []
        manifest = agent.client.key.sign({
            "hash": name, "mediaType": media_type, "schema": schema, "size": len(data),
            "producer": agent.agent_id, "agentCardVersion": agent.card.get("version"),
            "missionId": mission_id, "groupId": agent.group_id, "workItemId": work_item_id,
            "sources": list(sources),
            "versions": {"tool": "mission_weave.mcp_server", "model": model,
                         "capability": capabilities[0]["version"] if capabilities else None},
            "createdAt": format_time(utcnow()), "classification": "internal",
            "uri": f"{agent.client.base_url}/api/v1/blobs/{name}"})
        await agent.leases.command(work_item_id, "artifact.publish", manifest)
        if held is not None:
            held.published.append((name, deliverable_id))
        return {"workItemId": work_item_id, "hash": name, "size": len(data),
                "mediaType": media_type, "deliverableId": deliverable_id,
                "next": "publish more deliverables, or submit_work citing this hash"}

    async def submit_work(
            work_item_id: WorkItemId,
            evidence: Annotated[list[EvidenceInput], Field(description="Evidence records "
                                "that together cover every acceptance criterion of the "
                                "contract.")],
            artifacts: Annotated[list[str] | None, Field(description="The hashes of the "
                                 "deliverables you submit. Default: every artifact you "
                                 "published for this WorkItem since start_work.")] = None,
    ) -> JsonObject:
        """Submit the finished work of an active WorkItem: its deliverables (published with
        publish_deliverable) and your Evidence for each acceptance criterion. The lease
        ends; the server reviews the submission and the Coordinator accepts or fails it."""
        held = agent.leases.current(work_item_id)
        published = held.published if held is not None else []
        submitted = artifacts if artifacts is not None else [h for h, _ in published]
        records = [record(agent.principal, work_item_id, given,
                          [h for h, d in published if d == given.deliverable]
                          if given.deliverable else submitted)
                   for given in evidence]
        revision = held.contract_revision if held is not None \
            else (await agent.work_item(work_item_id))["contractRevision"]
        await agent.leases.command(work_item_id, "work.submit", {
            "contractRevision": revision, "artifacts": submitted, "evidence": records})
        return {"workItemId": work_item_id, "state": "submitted", "artifacts": submitted,
                "criteriaCovered": sorted({c for r in records for c in r["criteria"]})}

    async def block_work(
            work_item_id: WorkItemId,
            question: Annotated[str, Field(description="What must be resolved before you "
                                           "can go on, as a question or request to the "
                                           "Coordinator (the block's requiredResolution).")],
            phase: Annotated[str, Field(description="Where you stopped.")] = "blocked",
    ) -> JsonObject:
        """Block an active WorkItem on a question only the Coordinator can resolve
        (`work.block`): the lease ends, you keep the item until it is unblocked (then
        start_work again). Use post_message instead for a question that does not stop
        you."""
        await agent.leases.command(work_item_id, "work.block", {
            "checkpoint": {"progress": {"phase": phase, "blockers": [question]}},
            "requiredResolution": question})
        return {"workItemId": work_item_id, "state": "blocked", "requiredResolution": question}

    async def pause_work(
            work_item_id: WorkItemId,
            phase: Annotated[str, Field(description="Where you stopped.")],
            milestones: Annotated[list[str], Field(description="Milestones reached.")]
            = [],  # noqa: B006
    ) -> JsonObject:
        """Checkpoint an active WorkItem and give back its lease (`work.checkpoint`): it
        stays yours, `queued`, to be started again (start_work) before its new startBy."""
        answer = await agent.leases.command(work_item_id, "work.checkpoint", {
            "progress": {"phase": phase, "milestones": milestones}})
        checkpointed = answer["events"][-1]["data"]
        return {"workItemId": work_item_id, "state": "queued",
                "startBy": checkpointed.get("startBy")}

    async def give_up(
            work_item_id: WorkItemId,
            reason: Annotated[str, Field(description="Why the work cannot be done, for the "
                                         "Coordinator.")],
            permanent: Annotated[bool, Field(description="True if no retry can succeed "
                                             "(e.g. the goal is impossible).")] = False,
    ) -> JsonObject:
        """Fail an active WorkItem you cannot finish (`work.fail` with your Evidence): the
        lease ends and the Coordinator decides what happens next."""
        held = agent.leases.current(work_item_id)
        contract = held.contract if held is not None \
            else (await agent.work_item(work_item_id))["contract"]
        given = EvidenceInput(criteria=criteria_of(contract), result=f"fail: {reason}",
                              method="worker gave up")
        artifacts = [h for h, _ in held.published] if held is not None else []
        await agent.leases.command(work_item_id, "work.fail", {
            "evidence": [record(agent.principal, work_item_id, given, artifacts)],
            "reason": reason, "permanent": permanent})
        return {"workItemId": work_item_id, "state": "failed"}

    add(list_offers, READ_ONLY)
    add(list_my_work, READ_ONLY)
    for tool in (accept_offer, decline_offer, start_work, report_progress,
                 publish_deliverable, submit_work, block_work, pause_work, give_up):
        add(tool, None)
