"""An A2A message as a Work Contract (PROTOCOL §7 "Work Contract v1") for `work.propose`.

The message's text parts, joined, are the goal; each data part that is a JSON object is a
set of contract members laid over the template (a client may give its own
`acceptanceCriteria`, `deliverables`, `budgets`, `deadline`, ...). What neither gives comes
from the template. Nothing is checked here: the Group Authority checks the contract, and
its refusal (INVALID_CONTRACT with the reason) is what the A2A client gets back.
"""

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from a2a.helpers import get_data_parts, get_text_parts
from a2a.types.a2a_pb2 import Message

from mission_weave.protocol.json_types import JsonObject
from mission_weave.protocol.timefmt import format_time
from mission_weave.sdk.client import utcnow

SCHEMA = "mwp.work-contract/1"

# Without a deadline from the template or the message, the work is due this long after
# it is proposed.
DEFAULT_DEADLINE = timedelta(days=7)

# The defaults of a proposal whose message and template say nothing more: one deliverable,
# one criterion, modest budgets, low risk. A deployment sets its own with
# `--contract-template FILE` (a JSON object of contract members).
DEFAULT_TEMPLATE: JsonObject = {
    "deliverables": [{"id": "result", "description": "The result the requester asked for",
                      "mediaType": "text/markdown"}],
    "acceptanceCriteria": [{"id": "goal-met",
                            "description": "The result does what the goal asks"}],
    "dependencies": {"workItems": [], "policy": "all_verified"},
    "capabilities": [],
    "urgency": "normal",
    "businessImpact": "medium",
    "budgets": {"financial": {"amount": "10.00", "currency": "USD"}, "tokens": 100000,
                "toolCalls": 100, "computeSeconds": 3600, "wallClockSeconds": 86400,
                "sideEffects": 0},
    "retry": {"maxAttempts": 3, "backoff": {"strategy": "exponential", "initialSeconds": 30,
                                            "maxSeconds": 600, "multiplier": 2}},
    "risk": {"class": "low", "requiresExecutionApproval": False},
}


def load_template(path: str | Path | None) -> JsonObject:
    """The template in `path` (a JSON object of contract members), else the default."""
    if path is None:
        return dict(DEFAULT_TEMPLATE)
    template = json.loads(Path(path).read_text())
    if not isinstance(template, dict):
        raise ValueError(f"{path}: a contract template is a JSON object of contract members")
    return template


def contract_from(message: Message, template: JsonObject) -> JsonObject:
    """The Work Contract the message proposes: the template, then the members of its data
    parts, then its text as the goal (when it has text)."""
    contract: JsonObject = {"schema": SCHEMA, **template}
    for data in get_data_parts(message.parts):
        if isinstance(data, dict):
            contract.update(_whole_numbers(data))
    goal = "\n".join(text for text in get_text_parts(message.parts) if text.strip())
    if goal:
        contract["goal"] = goal
    contract.setdefault("goal", "")  # the Authority refuses an empty goal, saying so
    contract.setdefault("deadline", format_time(utcnow() + DEFAULT_DEADLINE))
    return contract


def _whole_numbers(value: Any) -> Any:
    """A data part's numbers arrive as doubles (google.protobuf.Value): 3.0 is the
    integer 3 again, as the contract's counts require."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _whole_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_whole_numbers(item) for item in value]
    return value
