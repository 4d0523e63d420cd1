"""What a tool hands back to the LLM: compact JSON on success; on a refusal an MCP tool
error (`isError: true`) whose text starts with the protocol's `CODE: message`, then what
to do next where that is clear, so that the model can correct itself."""

import functools
import inspect
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from mcp.types import CallToolResult, TextContent

from mission_weave.protocol.json_types import JsonObject
from mission_weave.sdk.client import ApiError

log = logging.getLogger("mission_weave.mcp_server")

# What the model can do about a refusal, by the protocol's code (PROTOCOL §2).
NEXT_STEPS = {
    "STALE_LEASE": "The lease on this WorkItem is no longer yours: stop working on it; "
                   "list_my_work shows what you still own.",
    "LEASE_EXPIRED": "The lease expired: stop working on it; the Coordinator may offer it "
                     "again (list_offers).",
    "STALE_OWNERSHIP": "You no longer own this WorkItem (another attempt or owner took "
                       "over, or its start-by deadline passed): stop working on it.",
    "OFFER_NOT_LIVE": "That offer cannot be accepted or declined any more (expired, "
                      "withdrawn, declined or not addressed to you): call list_offers.",
    "CONTRACT_REVISION_MISMATCH": "The contract was revised: read it again (get_work_item) "
                                  "and accept the new revision (accept_offer) first.",
    "EVIDENCE_INCOMPLETE": "Give Evidence for every acceptance criterion (and deliver every "
                           "deliverable with a published artifact), then submit again.",
    "DEPENDENCIES_NOT_MET": "Its dependencies are not verified yet: wait for them "
                            "(read_mission_graph shows their states).",
    "APPROVAL_REQUIRED": "The MissionOwner must grant execution first: wait, or ask in the "
                         "Conversation (post_message).",
    "TRANSITION_NOT_PERMITTED": "The WorkItem is not in a state that allows this: read it "
                                "(get_work_item) and pick the step its state allows.",
    "REVIEW_PENDING": "The review has not decided every criterion: read_review again "
                      "shortly, or accept with your own Evidence for every criterion.",
    "NOT_FOUND": "Check the id (list_my_work, list_offers, read_mission_graph).",
    "FORBIDDEN": "Your role or ownership does not allow this command.",
}


class Refusal(Exception):
    """A refusal decided before anything was sent, in the protocol's vocabulary."""

    def __init__(self, code: str, message: str, hint: str | None = None):
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.hint = code, message, hint


def compact(document: Any) -> str:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False, default=str)


def ok(document: JsonObject) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=compact(document))])


def refused(code: str, message: str, hint: str | None = None,
            details: JsonObject | None = None) -> CallToolResult:
    text = f"{code}: {message}"
    if details:
        text += f" (details: {compact(details)})"
    next_step = hint or NEXT_STEPS.get(code)
    if next_step:
        text += f"\nNext: {next_step}"
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


Tool = Callable[..., Awaitable[JsonObject]]


def answering(tool: Tool) -> Callable[..., Awaitable[CallToolResult]]:
    """The tool as MCP calls it: its JSON answer, or its refusal as a tool error. The
    wrapper keeps the tool's name, docstring and parameters (its input schema)."""

    @functools.wraps(tool)
    async def call(**arguments: Any) -> CallToolResult:
        try:
            return ok(await tool(**arguments))
        except Refusal as refusal:
            return refused(refusal.code, refusal.message, refusal.hint)
        except ApiError as error:
            return refused(error.code, error.message, details=error.details or None)
        except (httpx.TransportError, OSError) as error:
            log.warning("%s: the Group service could not be reached: %r", tool.__name__, error)
            return refused("UNAVAILABLE", f"the Group service could not be reached ({error!r})",
                           "Try again in a moment; nothing was changed if no answer came.")

    call.__signature__ = inspect.signature(tool, eval_str=True).replace(  # type: ignore[attr-defined]
        return_annotation=CallToolResult)
    return call
