"""The Coordinator's tools, offered only to an Agent with the `coordinator` role in the
Group: plan a Mission (create_mission, authorize_work_item, revise_contract,
add_dependency), place its work (offer_work_item, unblock_work) and decide on results
(read_review, accept_result, fail_result).

No `from __future__ import annotations`: the MCP SDK reads the signatures as written."""

import copy
from datetime import timedelta
from typing import Annotated, Any, Literal

from mcp.server import MCPServer
from pydantic import BaseModel, Field

from mission_weave.protocol.json_types import JsonObject
from mission_weave.protocol.timefmt import format_time
from mission_weave.sdk.client import utcnow

from .agent import Agent
from .answers import Refusal
from .evidence import EvidenceInput, criteria_of, record
from .tools_shared import READ_ONLY, adder

WorkItemId = Annotated[str, Field(description="The WorkItem's id.")]
CONTRACT_SCHEMA = "mwp.work-contract/1"
# What a contract says when the Coordinator does not: a plain, low-risk item.
DEFAULT_TERMS: JsonObject = {
    "urgency": "normal", "businessImpact": "medium",
    "retry": {"maxAttempts": 3, "backoff": {"strategy": "fixed", "initialSeconds": 60,
                                            "maxSeconds": 60}},
    "risk": {"class": "low", "requiresExecutionApproval": False}}


class Deliverable(BaseModel):
    id: str = Field(description="A short id, e.g. 'summary'.")
    description: str = Field(description="What the deliverable is.")
    mediaType: Annotated[str | None, Field(description="e.g. 'text/markdown'.")] = None


class Criterion(BaseModel):
    id: str = Field(description="A short id, e.g. 'ac1'.")
    description: str = Field(description="What must hold for the result to be accepted.")
    method: Annotated[str | None, Field(
        description="How it is checked, e.g. 'check:media-type:text/markdown' or "
                    "'check:max-size:8192' (the server's review runs these), or prose.")] = None


class Capability(BaseModel):
    id: str = Field(description="A capability id workers declare in their Agent Card, "
                    "e.g. 'research'.")
    version: Annotated[str, Field(description="Its version.")] = "1"


def item_contract(item: JsonObject, changes: JsonObject) -> JsonObject:
    """The item's contract with `changes` (top-level members) applied, as the next
    revision."""
    contract: JsonObject = copy.deepcopy(item["contract"])
    contract.update(changes)
    contract["revision"] = item["contractRevision"] + 1
    return contract


def register(server: MCPServer, agent: Agent) -> None:
    add = adder(server)

    async def create_mission(
            title: Annotated[str, Field(description="The Mission's title.")],
            owner_id: Annotated[str, Field(description="The MissionOwner: a member principal "
                                           "with the owner role, e.g. 'user:alice'.")],
            mission_id: Annotated[str | None, Field(description="An id of your choosing "
                                                    "(else the server picks one).")] = None,
    ) -> JsonObject:
        """Create a Mission that you coordinate. Next: authorize_work_item for each piece
        of work."""
        body: JsonObject = {"title": title, "ownerId": owner_id,
                            "coordinatorId": agent.principal}
        if mission_id:
            body["missionId"] = mission_id
        answer = await agent.command("mission.create", body)
        created = answer["events"][-1]
        return {"missionId": created.get("missionId") or created["data"].get("missionId"),
                "title": title}

    async def authorize_work_item(
            mission_id: Annotated[str, Field(description="The Mission it belongs to.")],
            goal: Annotated[str, Field(description="What the work must achieve.")],
            deliverables: Annotated[list[Deliverable], Field(description="What the worker "
                                                             "delivers (at least one).")],
            acceptance_criteria: Annotated[list[Criterion], Field(description="How the "
                                           "result is judged (at least one).")],
            capabilities: Annotated[list[Capability], Field(description="What a worker "
                                    "needs to be offered it.")],
            deadline: Annotated[str, Field(description="RFC 3339 UTC, e.g. "
                                           "'2026-12-31T17:00:00Z'.")],
            budgets: Annotated[dict[str, Any], Field(description="All six dimensions, e.g. "
                               "{\"financial\": {\"amount\": \"10.00\", \"currency\": \"USD\"}, "
                               "\"tokens\": 100000, \"toolCalls\": 50, \"computeSeconds\": 600, "
                               "\"wallClockSeconds\": 3600, \"sideEffects\": 0}.")],
            depends_on: Annotated[list[str], Field(description="Ids of WorkItems of the same "
                                  "Mission that must be verified first.")] = [],  # noqa: B006
            work_item_id: Annotated[str | None, Field(description="An id of your choosing "
                                                      "(else the server picks one).")] = None,
            more_terms: Annotated[dict[str, Any], Field(description="Other Work Contract v1 "
                                  "members, e.g. inputs, allowed, urgency (low|normal|high|"
                                  "critical), businessImpact, retry, risk, exclusive.")]
            = {},  # noqa: B006
    ) -> JsonObject:
        """Authorize a WorkItem of a Mission with its Work Contract (`work.authorize`): it
        is `open`, ready to be offered (offer_work_item) once its dependencies are
        verified."""
        contract: JsonObject = {
            **DEFAULT_TERMS, "schema": CONTRACT_SCHEMA, "goal": goal,
            "deliverables": [d.model_dump(exclude_none=True) for d in deliverables],
            "acceptanceCriteria": [c.model_dump(exclude_none=True) for c in acceptance_criteria],
            "capabilities": [c.model_dump() for c in capabilities],
            "dependencies": {"workItems": list(depends_on), "policy": "all_verified"},
            "deadline": deadline, "budgets": budgets, **more_terms}
        body: JsonObject = {"missionId": mission_id, "contract": contract}
        if work_item_id:
            body["workItemId"] = work_item_id
        answer = await agent.command("work.authorize", body)
        authorized = answer["events"][-1]
        return {"workItemId": authorized.get("workItemId")
                or authorized["data"].get("workItemId"), "state": "open",
                "contractRevision": 1}

    async def revise_contract(
            work_item_id: WorkItemId,
            changes: Annotated[dict[str, Any], Field(description="Top-level contract members "
                               "to replace, e.g. {\"goal\": \"...\", \"deadline\": "
                               "\"2026-12-31T17:00:00Z\"}; the rest stays.")],
    ) -> JsonObject:
        """Revise a WorkItem's contract (`work.revise_contract`, the next revision). Not
        while it is active; an owner who has not started must accept it again."""
        item = await agent.work_item(work_item_id)
        contract = item_contract(item, changes)
        await agent.command("work.revise_contract", {"contract": contract},
                            workItemId=work_item_id)
        return {"workItemId": work_item_id, "contractRevision": contract["revision"]}

    async def add_dependency(
            work_item_id: WorkItemId,
            depends_on: Annotated[str, Field(description="The WorkItem (same Mission) that "
                                             "must be verified before this one starts.")],
    ) -> JsonObject:
        """Make a WorkItem depend on another: a revision of its contract's
        `dependencies.workItems`. A cycle is refused (DEPENDENCY_CYCLE)."""
        item = await agent.work_item(work_item_id)
        dependencies = dict(item["contract"].get("dependencies")
                            or {"workItems": [], "policy": "all_verified"})
        if depends_on in dependencies["workItems"]:
            raise Refusal("VALIDATION_ERROR", f"{work_item_id} already depends on {depends_on}")
        dependencies["workItems"] = [*dependencies["workItems"], depends_on]
        contract = item_contract(item, {"dependencies": dependencies})
        await agent.command("work.revise_contract", {"contract": contract},
                            workItemId=work_item_id)
        return {"workItemId": work_item_id, "dependsOn": dependencies["workItems"],
                "contractRevision": contract["revision"]}

    async def offer_work_item(
            work_item_id: WorkItemId,
            candidates: Annotated[list[str] | Literal["auto"], Field(description="Agent ids "
                                  "of workers in your order, or \"auto\" for the server to "
                                  "rank the Group's workers.")],
            mode: Annotated[Literal["sequential", "urgent"], Field(description="sequential: "
                            "one candidate at a time; urgent: all at once, first acceptance "
                            "wins.")] = "sequential",
            expires_in_minutes: Annotated[int, Field(ge=1, description="How long the offer "
                                                     "stands.")] = 60,
            candidate_count: Annotated[int | None, Field(description="urgent with \"auto\": "
                                                         "how many to address.")] = None,
    ) -> JsonObject:
        """Offer a WorkItem (`work.offer`) to workers; its dependencies must be verified.
        A worker accepts it, starts it and submits; then read_review and accept_result."""
        body: JsonObject = {"candidates": candidates, "mode": mode, "expiresAt": format_time(
            utcnow() + timedelta(minutes=expires_in_minutes))}
        if candidate_count:
            body["candidateCount"] = candidate_count
        answer = await agent.command("work.offer", body, workItemId=work_item_id)
        offered = next(e["data"] for e in answer["events"] if e["type"] == "work.offered")
        return {"workItemId": work_item_id, "state": "offered",
                "offers": [{"agentId": o["agentId"], "expiresAt": o["expiresAt"]}
                           for o in offered["offers"]],
                "pendingCandidates": offered.get("pendingCandidates")}

    async def unblock_work(
            work_item_id: WorkItemId,
            resolution: Annotated[str, Field(description="The answer to the block's "
                                             "requiredResolution.")],
    ) -> JsonObject:
        """Unblock a blocked WorkItem with your resolution (`work.unblock`): it goes back
        to its owner's queue, or is open to be offered again if the owner's blocked lease
        ran out."""
        answer = await agent.command("work.unblock", {"resolution": resolution},
                                     workItemId=work_item_id)
        return {"workItemId": work_item_id, "next": answer["events"][-1]["data"].get("next")}

    async def read_review(work_item_id: WorkItemId) -> JsonObject:
        """Read the review of a WorkItem's submission: the server's verdict per acceptance
        criterion, the worker's Evidence and artifacts. Read it before accept_result or
        fail_result."""
        review = await agent.get(f"work-items/{work_item_id}/review")
        return {key: review.get(key) for key in (
            "workItemId", "state", "contractRevision", "acceptanceCriteria", "deliverables",
            "submission", "review")}

    async def accept_result(
            work_item_id: WorkItemId,
            summary: Annotated[str, Field(description="Your finding, e.g. 'the summary covers "
                                          "every section'.")],
            evidence: Annotated[list[EvidenceInput] | None, Field(description="Your own "
                                "Evidence records. Default: one record citing every "
                                "criterion, result 'pass: <summary>'.")] = None,
    ) -> JsonObject:
        """Accept a submitted WorkItem's result (`work.accept_result`): it is `verified`.
        The review must have decided every criterion (REVIEW_PENDING otherwise) unless
        your Evidence covers them all; a failed criterion needs your Evidence for it."""
        item = await agent.work_item(work_item_id)
        artifacts = (item.get("submission") or {}).get("artifacts") or []
        given = evidence or [EvidenceInput(criteria=criteria_of(item["contract"]),
                                           result=f"pass: {summary}",
                                           method="coordinator review")]
        answer = await agent.command("work.accept_result", {
            "evidence": [record(agent.principal, work_item_id, e, artifacts) for e in given]},
            workItemId=work_item_id)
        verified = next(e["data"] for e in answer["events"] if e["type"] == "work.verified")
        # The review as decided, and the criteria your Evidence overrode (if any).
        return {"workItemId": work_item_id, "state": "verified",
                "review": verified.get("review")}

    async def fail_result(
            work_item_id: WorkItemId,
            reason: Annotated[str, Field(description="Why the result is not accepted.")],
            permanent: Annotated[bool, Field(description="True if no retry can succeed.")]
            = False,
    ) -> JsonObject:
        """Fail a WorkItem (`work.fail` with your Evidence), e.g. a submission that does
        not meet its criteria. You may offer it again later (offer_work_item)."""
        item = await agent.work_item(work_item_id)
        given = EvidenceInput(criteria=criteria_of(item["contract"]), result=f"fail: {reason}",
                              method="coordinator review")
        artifacts = (item.get("submission") or {}).get("artifacts") or []
        await agent.command("work.fail", {
            "evidence": [record(agent.principal, work_item_id, given, artifacts)],
            "reason": reason, "permanent": permanent}, workItemId=work_item_id)
        return {"workItemId": work_item_id, "state": "failed"}

    for tool in (create_mission, authorize_work_item, revise_contract, add_dependency,
                 offer_work_item, unblock_work, accept_result, fail_result):
        add(tool, None)
    add(read_review, READ_ONLY)
