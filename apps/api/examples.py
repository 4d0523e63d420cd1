"""One example envelope per command type, for the OpenAPI document (apps/api/openapi.py puts
each on its `<Type>Command` schema and on the commands endpoint, where Swagger UI and ReDoc
offer them by type).

One story in one Group: coordinator-1 plans a Mission that alice owns, worker-7 summarizes
the Q3 report, reviewer-2 reviews it. Every example is what its sender would really send at
EXAMPLE_NOW: tests/integration/test_openapi_examples.py fills in the ids of a real Group
(the names below), moves the times to now, signs and posts each one, and expects 200. The
`signature` members are placeholders: a client signs the envelope with its own key
(PROTOCOL §1), and the manifest and the Context Package with their producer's."""

import base64
import copy
import hashlib

from mission_weave.core.json_types import JsonObject

EXAMPLE_NOW = "2026-11-29T08:00:00Z"  # every time below is relative to this `issuedAt`

GROUP = "grp_acme-research"
OTHER_GROUP = "grp_acme-board"  # where an approved artifact is forwarded
COORDINATOR = "agent:coordinator-1"
WORKER = "agent:worker-7"
REVIEWER = "agent:reviewer-2"
OWNER = "user:alice"  # a human MissionOwner: logged in, so no session epoch, no signature
MISSION = "msn_5c1e8a3f92d04b7e6a1c0d2f"
WORK_ITEM = "wi_8fce485495e01f954048e572"
LEASE = "lease_7af1ebee5ef00cf86ede9a1e"
PACKAGE = "pkg-q3-context"

# The deliverable worker-7 uploads (PUT /api/v1/blobs/{hash}) and then publishes.
DELIVERABLE = (b"# Q3 at a glance\n\nRevenue rose 12% to $48.2M; gross margin held at 61%.\n"
               b"Outlook: guidance raised for Q4. Risks: two supplier contracts renew in "
               b"January.\n")
DELIVERABLE_HASH = "sha256:" + hashlib.sha256(DELIVERABLE).hexdigest()
REPORT_HASH = "sha256:9f2c4e1d7a8b3c6e5f0a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f5a6"

CONTRACT = {
    "schema": "mwp.work-contract/1",
    "goal": "Summarize the Q3 earnings report for the board",
    "deliverables": [{"id": "summary", "description": "A one-page summary in Markdown",
                      "mediaType": "text/markdown"}],
    "acceptanceCriteria": [
        {"id": "ac1", "description": "Covers revenue, margin, outlook and risks"},
        {"id": "ac2", "description": "At most 500 words", "method": "word-count"}],
    "inputs": [{"ref": REPORT_HASH, "description": "the Q3 earnings report (PDF)"}],
    "dependencies": {"workItems": [], "policy": "all_verified"},
    "allowed": {"tools": ["search"], "data": [], "operations": ["read"], "resources": {}},
    "capabilities": [{"id": "summarize", "version": "1"}],
    "deadline": "2026-12-04T17:00:00Z",
    "urgency": "normal",
    "businessImpact": "medium",
    "budgets": {"financial": {"amount": "10.00", "currency": "USD"}, "tokens": 100000,
                "toolCalls": 50, "computeSeconds": 600, "wallClockSeconds": 3600,
                "sideEffects": 0},
    "retry": {"maxAttempts": 3, "backoff": {"strategy": "exponential", "initialSeconds": 10,
                                            "maxSeconds": 300, "multiplier": 2}},
    "risk": {"class": "low", "requiresExecutionApproval": False},
}
PROGRESS = {"phase": "drafting", "milestones": ["read the report", "outline"],
            "nextCheckpoint": "first draft", "blockers": [],
            "estimate": {"completion": "2026-11-29T09:30:00Z", "confidence": 0.7,
                         "remainingSeconds": 5400},
            "evidenceRefs": []}


def _evidence(id_, producer, criteria, method, result, at) -> dict:
    return {"id": id_, "subject": "deliverable:summary", "criteria": criteria, "method": method,
            "result": result, "producer": producer, "timestamp": at,
            "artifacts": [DELIVERABLE_HASH]}


SELF_CHECK = [
    _evidence("ev-w7-ac1", WORKER, ["ac1"], "self-check",
              "pass: revenue, margin, outlook and risks each have a paragraph",
              "2026-11-29T07:58:40Z"),
    _evidence("ev-w7-ac2", WORKER, ["ac2"], "word-count", "pass: 412 words",
              "2026-11-29T07:58:41Z")]
MANIFEST: JsonObject = {
    "hash": DELIVERABLE_HASH, "mediaType": "text/markdown", "schema": None,
    "size": len(DELIVERABLE), "producer": "worker-7", "agentCardVersion": "1",
    "missionId": MISSION, "groupId": GROUP, "workItemId": WORK_ITEM, "sources": [],
    "versions": {"tool": "pandoc 3.1", "model": None, "capability": "summarize@1"},
    "createdAt": "2026-11-29T07:57:12Z", "classification": "internal",
    "uri": f"https://files.acme.example/q3/{DELIVERABLE_HASH[7:19]}.md",
}
CONTEXT_PACKAGE = {
    "id": PACKAGE, "version": 1, "scope": {"missionId": MISSION},
    "sourceEvents": {"from": 118, "to": 164}, "artifacts": [DELIVERABLE_HASH],
    "decisions": ["use the audited Q3 figures, not the preliminary ones"],
    "constraints": ["at most 500 words", "no figures before their press release"],
    "unresolvedQuestions": ["should Q2 be compared?"],
    "generator": "coordinator-1", "createdAt": "2026-11-29T07:59:30Z",
}

# type -> (actor, what the envelope names beside the body, body)
ITEM = {"workItemId": WORK_ITEM}
HOLDER = {"workItemId": WORK_ITEM, "ownershipEpoch": 1, "leaseId": LEASE}
OWNED = {"workItemId": WORK_ITEM, "ownershipEpoch": 1}
COMMANDS: dict[str, tuple[str, JsonObject, JsonObject]] = {
    "mission.create": (COORDINATOR, {}, {
        "title": "Q3 board pack", "ownerId": OWNER, "coordinatorId": COORDINATOR,
        "budgets": {"financial": {"amount": "250.00", "currency": "USD"},
                    "tokens": 2000000}}),
    "mission.create_child": (COORDINATOR, ITEM, {
        "title": "Q3 figures, checked line by line", "childFailurePolicy": "block"}),
    "mission.approve": (OWNER, {}, {
        "missionId": MISSION, "comment": "Read the summary and the review: approved."}),
    "mission.refuse_approval": (OWNER, {}, {
        "missionId": MISSION, "reason": "The risks section is missing the supplier contracts.",
        "workItems": [{"workItemId": WORK_ITEM,
                       "reason": "Name the two supplier contracts renewing in January."}]}),
    "mission.fail": (COORDINATOR, {}, {
        "missionId": MISSION, "reason": "The Q3 report was withdrawn for restatement."}),
    "mission.cancel": (COORDINATOR, {}, {
        "missionId": MISSION, "reason": "The board meeting moved to Q1; not needed now."}),
    "work.propose": (WORKER, {}, {"missionId": MISSION, "contract": CONTRACT}),
    "work.authorize": (COORDINATOR, {}, {"missionId": MISSION, "contract": CONTRACT}),
    "work.revise_contract": (COORDINATOR, ITEM, {
        "contract": {**CONTRACT, "deadline": "2026-12-07T17:00:00Z", "urgency": "high"}}),
    "work.offer": (COORDINATOR, ITEM, {
        "candidates": ["worker-7"], "mode": "sequential", "expiresAt": "2026-11-29T08:10:00Z",
        "startWithinSeconds": 900}),
    "work.decline_offer": (WORKER, ITEM, {
        "reason": "capacity", "detail": "busy with two items until 14:00 UTC"}),
    "work.accept_offer": (WORKER, ITEM, {"contractRevision": 1}),
    "approval.grant_execution": (OWNER, ITEM, {
        "comment": "Read-only access to the report is fine."}),
    "approval.refuse_execution": (OWNER, ITEM, {
        "reason": "Not before the audit committee has signed off the figures."}),
    "work.start": (WORKER, OWNED, {"leaseSeconds": 900}),
    "lease.renew": (WORKER, HOLDER, {"leaseSeconds": 900}),
    "work.progress": (WORKER, HOLDER, PROGRESS),
    "work.checkpoint": (WORKER, HOLDER, {"progress": {**PROGRESS, "phase": "outlined"}}),
    "work.block": (WORKER, HOLDER, {
        "checkpoint": {"progress": {**PROGRESS, "phase": "waiting for figures"}},
        "requiredResolution": "Access to the audited Q3 figures (the draft has preliminary "
                              "ones).", "blockedLeaseSeconds": 3600}),
    "work.unblock": (COORDINATOR, ITEM, {
        "resolution": "The audited figures are attached to the contract's inputs."}),
    "work.submit": (WORKER, HOLDER, {
        "contractRevision": 1, "artifacts": [DELIVERABLE_HASH], "evidence": SELF_CHECK}),
    "work.accept_result": (COORDINATOR, ITEM, {"evidence": [
        _evidence("ev-c1-review", COORDINATOR, ["ac1", "ac2"], "coordinator-review",
                  "pass: read it; all four topics, 412 words", "2026-11-29T07:59:50Z")]}),
    "evidence.record": (REVIEWER, ITEM, {"evidence": [
        _evidence("ev-r2-ac1", REVIEWER, ["ac1"], "reviewer-read",
                  "pass: the outlook is in paragraph 3, the risks in paragraph 4",
                  "2026-11-29T07:59:20Z")]}),
    "work.fail": (WORKER, HOLDER, {
        "evidence": [_evidence("ev-w7-fail", WORKER, ["ac1"], "self-check",
                               "fail: the report's risk section is an unreadable scan",
                               "2026-11-29T07:59:00Z")],
        "reason": "the input cannot be read", "permanent": False}),
    "work.cancel": (COORDINATOR, ITEM, {"reason": "Covered by the CFO's own summary."}),
    "work.request_preemption": (COORDINATOR, ITEM, {
        "reason": "An urgent item needs worker-7; checkpoint at the next safe point."}),
    "conversation.post": (WORKER, ITEM, {
        "kind": "message", "text": "Should the summary compare with Q2, or Q3 alone?"}),
    "artifact.publish": (WORKER, HOLDER, MANIFEST),
    "context.publish": (COORDINATOR, {}, CONTEXT_PACKAGE),
    "artifact.approve_forwarding": (OWNER, {}, {
        "hash": DELIVERABLE_HASH, "targetGroupId": OTHER_GROUP,
        "comment": "The board's Group may reuse the summary."}),
    "artifact.forward": (COORDINATOR, {}, {"hash": DELIVERABLE_HASH,
                                           "targetGroupId": OTHER_GROUP}),
    "capability.rotate": (WORKER, HOLDER, {"expiresInSeconds": 900}),
    "capability.narrow": (WORKER, HOLDER, {"scopes": {"tools": []}}),
    "usage.record": (WORKER, HOLDER, {
        "financial": {"amount": "0.42", "currency": "USD"}, "tokens": 18250, "toolCalls": 6,
        "computeSeconds": 41, "wallClockSeconds": 300, "sideEffects": 0}),
    "schedule.disclose": (WORKER, OWNED, {
        "estimatedStart": {"from": "2026-11-29T08:30:00Z", "to": "2026-11-29T09:00:00Z"},
        "estimatedCompletion": "2026-11-29T10:30:00Z", "confidence": 0.8,
        "capacityStatus": "busy", "calculatedAt": EXAMPLE_NOW}),
}
SIGNED_BODIES = {"artifact.publish": "worker-7", "context.publish": "coordinator-1"}


def _placeholder_signature(signer: str, seed: str) -> dict:
    sig = base64.urlsafe_b64encode(hashlib.sha512(seed.encode()).digest()).rstrip(b"=")
    return {"alg": "Ed25519", "keyId": f"{signer}#1", "sig": sig.decode()}


def example(command_type: str) -> dict:
    """The example envelope of `command_type` (a fresh copy)."""
    actor, fields, body = COMMANDS[command_type]
    body = copy.deepcopy(body)
    if command_type in SIGNED_BODIES:
        body["signature"] = _placeholder_signature(SIGNED_BODIES[command_type],
                                                   f"body/{command_type}")
    number = hashlib.sha256(command_type.encode()).hexdigest()
    envelope: JsonObject = {
        "id": f"0193a5e2-{number[:4]}-7{number[4:7]}-9{number[7:10]}-{number[10:22]}",
        "type": command_type, "groupId": GROUP, "actor": actor, "issuedAt": EXAMPLE_NOW}
    if actor.startswith("agent:"):
        envelope["sessionEpoch"] = 3
    envelope["membershipEpoch"] = 1
    envelope.update(copy.deepcopy(fields))
    envelope["body"] = body
    if actor.startswith("agent:"):
        envelope["signature"] = _placeholder_signature(actor.split(":", 1)[1],
                                                       f"envelope/{command_type}")
    return envelope
