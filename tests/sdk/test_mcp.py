"""`mw-mcp` against the live server (tests/sdk/conftest.py), driven by the `mcp` package's
own client as an LLM host would drive it: a worker over stdio takes two WorkItems end to
end while the Coordinator works through a second MCP server over streamable HTTP; a
second worker is refused what the protocol refuses, and its lease is kept in the
background; each Agent sees the tools of its roles."""

import asyncio
import subprocess
from datetime import timedelta

import httpx
import pytest

from mission_weave.sdk.client import utcnow
from tests.sdk.conftest import OWNER, run
from tests.sdk.mcp_support import (
    MW_MCP,
    call,
    http_server,
    http_session,
    refusal,
    resource,
    stdio_session,
    tool_names,
)
from tests.sdk.test_live import mission, offer

pytestmark = pytest.mark.django_db(transaction=True)

COORDINATOR_TOOLS = {"create_mission", "authorize_work_item", "revise_contract",
                     "add_dependency", "offer_work_item", "unblock_work", "read_review",
                     "accept_result", "fail_result"}
WORKER_TOOLS = {"list_offers", "list_my_work", "accept_offer", "decline_offer", "start_work",
                "report_progress", "publish_deliverable", "submit_work", "block_work",
                "pause_work", "give_up"}
READS = {"get_work_item", "read_inputs", "read_conversation", "read_mission_graph",
         "post_message"}


def authorize(item_id: str, mission_id: str, goal: str) -> dict:
    return {"mission_id": mission_id, "work_item_id": item_id, "goal": goal,
            "deliverables": [{"id": "doc", "description": goal, "mediaType": "text/markdown"}],
            "acceptance_criteria": [
                {"id": "markdown", "description": "A Markdown document",
                 "method": "check:media-type:text/markdown"},
                {"id": "sound", "description": "Says something true"}],
            "capabilities": [{"id": "research", "version": "1"}],
            "deadline": "2030-01-01T00:00:00Z",
            "budgets": {"financial": {"amount": "5.00", "currency": "USD"}, "tokens": 10000,
                        "toolCalls": 20, "computeSeconds": 600, "wallClockSeconds": 3600,
                        "sideEffects": 0}}


async def take_offer(worker, item_id: str) -> dict:
    """As an LLM would: find the offer, accept it, start it."""
    offers = await call(worker, "list_offers")
    offered = {o["id"]: o for o in offers["offers"]}
    assert item_id in offered, offers
    assert offered[item_id]["acceptanceCriteria"] and offered[item_id]["budgets"]
    await call(worker, "accept_offer", work_item_id=item_id)
    return await call(worker, "start_work", work_item_id=item_id)


async def deliver(worker, item_id: str, text: str, sources=()) -> str:
    published = await call(worker, "publish_deliverable", work_item_id=item_id,
                           media_type="text/markdown", text=text, sources=list(sources),
                           deliverable_id="doc")
    submitted = await call(worker, "submit_work", work_item_id=item_id, evidence=[
        {"criteria": ["markdown", "sound"], "result": "pass: checked by reading it"}])
    assert submitted["state"] == "submitted"
    assert submitted["artifacts"] == [published["hash"]]
    return published["hash"]


def test_a_worker_over_stdio_and_a_coordinator_over_http_take_work_to_verified(live_group):
    url, w1 = live_group.server.url, live_group.workers[0]
    errlog = live_group.tmp / "mw-mcp.log"

    async def scenario():
        async with http_session(url, live_group.coordinator.key_file, errlog=errlog) as coord, \
                stdio_session(url, w1.key_file, errlog=errlog) as worker:
            tools = await tool_names(coord), await tool_names(worker)
            created = await call(coord, "create_mission", title="Quarterly report",
                                 owner_id=OWNER, mission_id="m-mcp")
            m = created["missionId"]
            await call(coord, "authorize_work_item", **authorize("research", m, "Find facts"))
            await call(coord, "authorize_work_item", **authorize("report", m, "Write it up"))
            added = await call(coord, "add_dependency", work_item_id="report",
                               depends_on="research")
            await call(coord, "offer_work_item", work_item_id="research", candidates=[w1.name])

            started = await take_offer(worker, "research")
            research = await deliver(worker, "research", "# Facts\n\nThe answer is 42.\n")
            await call(worker, "post_message", work_item_id="research", text="Done; sources "
                       "are in the document.")
            review = await call(coord, "read_review", work_item_id="research")
            conversation = await call(coord, "read_conversation", work_item_id="research")
            accepted = await call(coord, "accept_result", work_item_id="research",
                                  summary="facts hold")

            await call(coord, "offer_work_item", work_item_id="report", candidates="auto")
            await take_offer(worker, "report")
            inputs = await call(worker, "read_inputs", work_item_id="report")
            as_resource = await resource(worker, "missionweave://work-items/report/inputs")
            contract = await resource(worker, "missionweave://work-items/report/contract")
            report = await deliver(worker, "report", "# Report\n\nIt is 42.\n", [research])
            await call(coord, "accept_result", work_item_id="report", summary="well written")
            graph = await resource(coord, f"missionweave://missions/{m}/graph")
            mine = await call(worker, "list_my_work")
            return (tools, added, started, research, review, accepted, conversation, inputs,
                    as_resource, contract, report, graph, mine)

    (tools, added, started, research, review, accepted, conversation, inputs, as_resource,
     contract, report, graph, mine) = run(scenario(), 90)

    coordinator_tools, worker_tools = tools
    # Each sees the tools of its roles (live_group's are coordinator and worker).
    assert coordinator_tools == COORDINATOR_TOOLS | READS
    assert worker_tools == WORKER_TOOLS | READS
    assert added["dependsOn"] == ["research"] and added["contractRevision"] == 2
    assert started["state"] == "active" and started["lease"]["leaseId"]
    assert review["state"] == "submitted" and review["submission"]["artifacts"] == [research]
    # The review checked the media type; "sound" waited for a reviewer, so the
    # Coordinator's acceptance overrode it, and says so.
    verdicts = {c["id"]: c["verdict"] for c in review["review"]["evaluation"]["criteria"]}
    assert verdicts == {"markdown": "pass", "sound": "pending"}
    assert accepted["state"] == "verified" and accepted["review"]["overridden"] == ["sound"]
    assert conversation["messages"][-1]["text"].startswith("Done")
    # The report's input is the research's artifact, its text included.
    [dependency] = inputs["dependencies"]
    assert dependency["workItemId"] == "research" and dependency["state"] == "verified"
    assert dependency["artifacts"][0]["hash"] == research
    assert "The answer is 42." in dependency["artifacts"][0]["text"]
    assert as_resource == inputs
    assert contract["contract"]["dependencies"]["workItems"] == ["research"]
    assert {i["id"]: i["state"] for i in graph["workItems"]} == {"research": "verified",
                                                                  "report": "verified"}
    assert graph["edges"] == [{"from": "research", "to": "report"}]
    assert mine["workItems"] == []  # nothing left in the worker's queue

    async def provenance():
        async with live_group.client(live_group.coordinator) as c:
            await c.open_session()
            return await c.get(f"/api/v1/groups/{live_group.group_id}/artifacts/{report}"
                               "/provenance")
    assert research in str(run(provenance()))  # the report was derived from the research


def sweep(now):
    """One sweep, from a thread of its own (whose database connection it closes)."""
    from django.db import connection

    from apps.work import sweeper

    try:
        return sweeper.sweep(now)
    finally:
        connection.close()


def test_refusals_come_back_as_tool_errors_with_the_protocol_code(live_group):
    g, url, w2 = live_group.group_id, live_group.server.url, live_group.workers[1]
    errlog = live_group.tmp / "mw-mcp.log"
    evidence = [{"criteria": ["ac1", "ac2"], "result": "pass: done"}]

    async def audit(c, item_id):
        return await c.get(f"/api/v1/groups/{g}/work-items/{item_id}/audit")

    def types(trail):
        return [e["type"] for e in trail["events"]]

    async def scenario():
        async with live_group.client(live_group.coordinator) as c, \
                stdio_session(url, w2.key_file, "--lease-seconds", "2",
                              errlog=errlog) as worker:
            await c.open_session()
            await mission(c, g, {"task": [], "quick": []})
            await offer(c, g, "task", w2.name)
            await call(worker, "accept_offer", work_item_id="task")
            without_lease = await refusal(worker, "submit_work", work_item_id="task",
                                          evidence=evidence)
            bad_arguments = await refusal(worker, "decline_offer", work_item_id="task",
                                          reason="bored")

            await call(worker, "start_work", work_item_id="task")
            await asyncio.sleep(4.5)  # past two 2-second leases: only renewals keep it
            progress = await call(worker, "report_progress", work_item_id="task",
                                  phase="halfway")
            kept = types(await audit(c, "task"))

            # The lease taken away: the sweeper expires it (as if a minute had passed).
            await asyncio.to_thread(sweep, utcnow() + timedelta(minutes=1))
            after_expiry = await refusal(worker, "submit_work", work_item_id="task",
                                         evidence=evidence)
            again = await refusal(worker, "report_progress", work_item_id="task",
                                  phase="still at it")

            # A submission ends the keeping: no renewal is sent after it.
            await offer(c, g, "quick", w2.name)
            await call(worker, "accept_offer", work_item_id="quick")
            await call(worker, "start_work", work_item_id="quick")
            await deliver_quick(worker)
            await asyncio.sleep(1.5)  # more than the 2/3 s between renewals
            quick = await audit(c, "quick")
            return without_lease, bad_arguments, progress, kept, after_expiry, again, \
                types(await audit(c, "task")), await c.work_item(g, "task"), quick

    async def deliver_quick(worker):
        await call(worker, "publish_deliverable", work_item_id="quick",
                   media_type="text/markdown", text="# Quick\n")
        await call(worker, "submit_work", work_item_id="quick", evidence=evidence)

    without_lease, bad_arguments, progress, kept, after_expiry, again, task_types, item, \
        quick = run(scenario(), 60)

    assert without_lease.startswith("VALIDATION_ERROR: "), without_lease
    assert "start_work" in without_lease  # what to do next
    assert "reason" in bad_arguments and "Traceback" not in bad_arguments
    assert progress == {"workItemId": "task", "reported": "halfway"}
    assert kept.count("lease.renewed") >= 3 and "lease.expired" not in kept
    assert after_expiry.startswith("LEASE_EXPIRED: "), after_expiry
    assert again.startswith("LEASE_EXPIRED: ") and "lost" in again
    assert "lease.expired" in task_types and "work.submitted" not in task_types
    assert item["state"] != "submitted"
    assert "work.submitted" in types(quick)
    assert [r["type"] for r in quick["refusedCommands"]] == []  # no renewal after it


def test_a_blocked_question_is_answered_and_failures_come_from_both_sides(live_group):
    url, w2 = live_group.server.url, live_group.workers[1]
    errlog = live_group.tmp / "mw-mcp.log"

    async def scenario():
        async with stdio_session(url, live_group.coordinator.key_file, errlog=errlog) as coord, \
                stdio_session(url, w2.key_file, errlog=errlog) as worker:
            m = (await call(coord, "create_mission", title="Q", owner_id=OWNER))["missionId"]
            await call(coord, "authorize_work_item", **authorize("q", m, "Sum up a quarter"))
            await call(coord, "offer_work_item", work_item_id="q", candidates=[w2.name])
            await take_offer(worker, "q")
            blocked = await call(worker, "block_work", work_item_id="q",
                                 question="Which quarter?")
            asked = await call(coord, "read_conversation", work_item_id="q")
            unblocked = await call(coord, "unblock_work", work_item_id="q", resolution="Q3")
            answered = await call(worker, "read_conversation", work_item_id="q")
            await call(worker, "start_work", work_item_id="q")
            gave_up = await call(worker, "give_up", work_item_id="q", reason="no Q3 data")
            after_worker = await call(coord, "get_work_item", work_item_id="q")

            await call(coord, "offer_work_item", work_item_id="q", candidates=[w2.name])
            await take_offer(worker, "q")
            await deliver(worker, "q", "# Q3\n\nNothing to say.\n")
            failed = await call(coord, "fail_result", work_item_id="q", reason="says nothing")
            return blocked, asked, unblocked, answered, gave_up, after_worker, failed, \
                await call(coord, "get_work_item", work_item_id="q")

    blocked, asked, unblocked, answered, gave_up, after_worker, failed, item = \
        run(scenario(), 60)

    assert blocked == {"workItemId": "q", "state": "blocked",
                       "requiredResolution": "Which quarter?"}
    question, answer = asked["messages"][-1], answered["messages"][-1]
    assert (question["kind"], question["text"]) == ("blocked", "Which quarter?")
    assert unblocked["next"] == "queued"  # back with its owner
    assert (answer["kind"], answer["text"]) == ("unblocked", "Q3")
    assert gave_up["state"] == after_worker["state"] == "failed"
    assert failed["state"] == item["state"] == "failed"
    assert item["review"]  # it was reviewed before the Coordinator failed it


def test_over_http_a_bearer_token_is_required_when_set_and_off_loopback(live_group):
    url, w1 = live_group.server.url, live_group.workers[0]
    errlog = live_group.tmp / "mw-mcp.log"
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}}
    accept = {"Accept": "application/json, text/event-stream"}

    async def scenario():
        async with http_server(url, w1.key_file, errlog=errlog, token="s3cret") as endpoint:
            async with httpx.AsyncClient() as plain:
                anonymous = await plain.post(endpoint, json=initialize, headers=accept)
                wrong = await plain.post(endpoint, json=initialize, headers={
                    **accept, "Authorization": "Bearer guess"})
        async with http_session(url, w1.key_file, errlog=errlog, token="s3cret") as worker:
            tools = await tool_names(worker)
        return anonymous.status_code, wrong.status_code, tools

    anonymous, wrong, tools = run(scenario(), 60)
    assert (anonymous, wrong) == (401, 401)
    assert "list_offers" in tools

    # Anywhere but loopback, no token is no server.
    refused = subprocess.run([MW_MCP, "--url", url, "--key", str(w1.key_file), "--transport",
                              "http", "--host", "0.0.0.0"], capture_output=True, text=True,
                             timeout=30, env={"PATH": "/usr/bin:/bin"})
    assert refused.returncode == 2
    assert "MW_MCP_TOKEN" in refused.stderr and "act as this Agent" in refused.stderr
