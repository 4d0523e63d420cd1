"""The Worker's admission control (§10.3): may it credibly commit to an offered WorkItem?

Pure: plain data in, a decision out; no I/O, no clock (`Facts.now`). The Worker
(worker.py) gathers the `Facts` from its Agent Card, its membership, its per-Group
queues and its own estimates, and calls `admit(contract, facts)` for every live offer
addressed to it. `None` means accept; a `Decline` is sent as
`work.decline_offer {reason, detail}`. `assess()` gives every dimension that fails, in
the order below; the first is the reason sent.

The seven dimensions, with the `reason` each declines with:

1. **authorization eligibility** (`authorization`): the Worker holds the `worker` role
   in the item's Group (when its membership is known), and the contract's `allowed`
   tools, data and operations include everything the Worker declares it uses
   (`needs`; its capability token is scoped to `allowed`, so work needing more could
   not be done under it).
2. **capability ids and versions** (`capability`): every `{id, version}` the contract
   requires is on the Agent Card with exactly that version, or matches a version range
   the Worker declares for that id (`capability_ranges`, below).
3. **dependencies** (`dependency`): the item's declared dependencies satisfy its policy
   as the Worker's own view of the Group's log knows them (queues.py).
4. **concurrency** (`capacity`): the items the Worker owns in `queued` or `active`
   (all Groups, acceptances in flight included) are fewer than its slots (the Agent
   Card's `maxConcurrency`; the server refuses an acceptance past it too).
5. **queue capacity** (`capacity`): fewer than `queue_capacity` accepted items wait for
   a slot (all Groups, acceptances in flight included; default: as many as the slots,
   which concurrency already implies, so set it lower to keep a shorter queue).
6. **deadline** (`deadline`): the item can start by its `startBy` (acceptance time plus
   the offer's `startWithinSeconds`, or the server's start window) and finish, by the
   Worker's own estimate of its duration, before the contract's `deadline`.
7. **budgets** (`budget`): the Worker's own estimate of what the item will use
   (a six-dimension delta) fits, in every dimension the contract budgets, within the
   contract's budgets minus what the item has already used (§11.5 usage events).

Capability versions
-------------------
The Agent Card keeps exact versions (`{"id": "summarize", "version": "1"}`, one entry
per version it provides), because the server ranks candidates by an exact match of
the contract's `{id, version}` against the card (mission_weave/core/ranking.py); a
range written on the card would match nothing there. A range is the Worker's own,
local declaration: `Worker(capability_ranges={"summarize": ">=1,<3"})` (or
`--capability-range summarize=">=1,<3"`) says its implementation accepts those
versions as well, e.g. for an offer addressed to it by name. The syntax:

- a comma-separated list of clauses, all of which must hold: `>=1,<3`;
- a clause is an operator `==`, `!=`, `>=`, `>`, `<=`, `<` and a version, or a bare
  version (exact match, like `==`); `*` matches any version;
- versions made of dot-separated integers compare numerically, missing parts being
  zero (`1` == `1.0` < `1.10` < `2`); any other version only matches `==`/bare and
  `!=` by string equality, and never an ordering clause.

An exact version on the card is always accepted; a range adds versions, it never
removes one the card lists.
"""

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from types import MappingProxyType
from typing import Any

from mission_weave.protocol.json_types import JsonObject
from mission_weave.protocol.timefmt import format_time, parse_time

AUTHORIZATION, CAPABILITY, DEPENDENCY = "authorization", "capability", "dependency"
CAPACITY, DEADLINE, BUDGET = "capacity", "deadline", "budget"
REASONS = (CAPACITY, DEADLINE, CAPABILITY, AUTHORIZATION, DEPENDENCY, BUDGET)

FINANCIAL = "financial"
COUNTS = ("tokens", "toolCalls", "computeSeconds", "wallClockSeconds", "sideEffects")
DIMENSIONS = (FINANCIAL, *COUNTS)
ALLOWED_KINDS = ("tools", "data", "operations")

USAGE_EVENT = "ext.missionweaveprotocol.core.resource_usage_recorded"

_EMPTY: Mapping[str, str] = MappingProxyType({})


# --- version ranges ---------------------------------------------------------------------

class VersionSpecError(ValueError):
    """A version range that is not in the syntax above."""


_CLAUSE = re.compile(r"^\s*(==|!=|>=|<=|>|<)?\s*([^\s=!<>,]+)\s*$")
_NUMERIC = re.compile(r"^\d+(\.\d+)*$")


Clause = tuple[str, str]  # (operator, version)


def parse_spec(spec: str) -> list[Clause]:
    """`">=1,<3"` -> [(">=", "1"), ("<", "3")]; `"*"` -> []; raises VersionSpecError."""
    if not isinstance(spec, str) or not spec.strip():
        raise VersionSpecError(f"an empty version range: {spec!r}")
    if spec.strip() == "*":
        return []
    clauses = []
    for part in spec.split(","):
        match = _CLAUSE.match(part)
        if match is None:
            raise VersionSpecError(f"not a version clause: {part!r} in {spec!r} (write e.g. "
                                   "\">=1,<3\", \"==2\" or \"2\")")
        clauses.append((match.group(1) or "==", match.group(2)))
    return clauses


def _numeric(version: str) -> tuple[int, ...] | None:
    return tuple(int(p) for p in version.split(".")) if _NUMERIC.match(version) else None


def _compare(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    width = max(len(a), len(b))
    a, b = a + (0,) * (width - len(a)), b + (0,) * (width - len(b))
    return (a > b) - (a < b)


def _clause_holds(version: str, op: str, bound: str) -> bool:
    mine, theirs = _numeric(version), _numeric(bound)
    if mine is None or theirs is None:
        if op == "==":
            return version == bound
        if op == "!=":
            return version != bound
        return False  # no order between non-numeric versions
    order = _compare(mine, theirs)
    return {"==": order == 0, "!=": order != 0, ">=": order >= 0, ">": order > 0,
            "<=": order <= 0, "<": order < 0}[op]


def version_matches(version: str, spec: str) -> bool:
    """Whether a contract's required `version` is within the range `spec`."""
    return all(_clause_holds(str(version), op, bound) for op, bound in parse_spec(spec))


def missing_capabilities(required: list[JsonObject], card: JsonObject,
                         ranges: Mapping[str, str] = _EMPTY) -> list[JsonObject]:
    """The required `{id, version}` entries neither the card (exactly) nor a declared
    range covers."""
    offered = {(c.get("id"), c.get("version")) for c in card.get("capabilities", [])}
    missing = []
    for need in required:
        if (need.get("id"), need.get("version")) in offered:
            continue
        spec = ranges.get(need["id"]) if "id" in need else None
        if spec is not None and version_matches(need.get("version", ""), spec):
            continue
        missing.append(need)
    return missing


# --- budgets ------------------------------------------------------------------------------

def _money(value: Any) -> tuple[Decimal, Any] | None:  # a JSON amount, or not
    if not isinstance(value, dict):
        return None
    try:
        return Decimal(str(value.get("amount", "0"))), value.get("currency")
    except InvalidOperation:
        return None


def budget_shortfall(budgets: JsonObject, usage: JsonObject, estimate: JsonObject
                     ) -> JsonObject | None:
    """The first budgeted dimension whose remaining budget (budget minus usage) cannot
    cover the estimate: `{dimension, budget, used, remaining, estimate}`, or None. A
    dimension the contract does not budget never declines."""
    budgets, usage, estimate = budgets or {}, usage or {}, estimate or {}
    for name in COUNTS:
        if name not in budgets or not estimate.get(name):
            continue
        remaining = budgets[name] - usage.get(name, 0)
        if estimate[name] > remaining:
            return {"dimension": name, "budget": budgets[name], "used": usage.get(name, 0),
                    "remaining": remaining, "estimate": estimate[name]}
    limit, wanted = _money(budgets.get(FINANCIAL)), _money(estimate.get(FINANCIAL))
    if limit is not None and wanted is not None and wanted[0] > 0:
        spent = _money(usage.get(FINANCIAL)) or (Decimal(0), limit[1])
        if wanted[1] != limit[1] or spent[1] != limit[1]:
            return {"dimension": FINANCIAL, "budget": budgets[FINANCIAL],
                    "used": usage.get(FINANCIAL), "remaining": None,
                    "estimate": estimate[FINANCIAL],
                    "note": f"the estimate is in {wanted[1]}, the budget in {limit[1]}"}
        remaining = limit[0] - spent[0]
        if wanted[0] > remaining:
            return {"dimension": FINANCIAL, "budget": budgets[FINANCIAL],
                    "used": usage.get(FINANCIAL),
                    "remaining": {"amount": format(remaining, "f"), "currency": limit[1]},
                    "estimate": estimate[FINANCIAL]}
    return None


# --- the decision -------------------------------------------------------------------------

@dataclass(frozen=True)
class Decline:
    reason: str  # one of REASONS
    detail: str
    dimension: str  # which of the seven checks: authorization, capability, ...

    def body(self) -> JsonObject:
        """The `work.decline_offer` body."""
        return {"reason": self.reason, "detail": self.detail[:1000]}


@dataclass(frozen=True)
class Facts:
    """What the Worker knows when it considers one offer (or a revised contract)."""

    now: datetime
    card: JsonObject
    # Its roles in the item's Group; None when its membership was not read (unknown:
    # the server, which refuses a non-worker's acceptance, decides).
    roles: frozenset[str] | None = None
    # {"tools"|"data"|"operations": names} its handler uses
    needs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    capability_ranges: Mapping[str, str] = field(default_factory=dict)  # id -> version range
    dependencies_met: bool = True
    slots: int = 1  # its declared execution slots (the card's maxConcurrency)
    owned: int = 0  # items it owns in queued or active, all Groups, in-flight acceptances too
    waiting: int = 0  # of those, the ones not running (queued, in-flight acceptances)
    queue_capacity: int | None = None  # most accepted items waiting for a slot; None: slots
    check_capacity: bool = True  # False for a revision of an item it already owns
    start_delay_seconds: float = 0.0  # its estimate of how long until a slot is free for it
    start_by: datetime | None = None
    estimate_seconds: float = 0.0  # its estimate of the item's duration
    usage: JsonObject = field(default_factory=dict)  # what the item has used so far
    estimate_cost: JsonObject = field(default_factory=dict)  # its estimate of the item's use


def assess(contract: JsonObject, facts: Facts) -> list[Decline]:
    """Every dimension that fails, as Declines, in the order of the module docstring."""
    declines: list[Decline] = []

    def decline(reason: str, detail: str, dimension: str | None = None) -> None:
        declines.append(Decline(reason, detail, dimension or reason))

    # 1. authorization eligibility
    if facts.roles is not None and "worker" not in facts.roles:
        decline(AUTHORIZATION, f"this agent does not have the worker role in this Group "
                f"(roles: {', '.join(sorted(facts.roles)) or 'none'})")
    allowed = contract.get("allowed") or {}
    beyond = {kind: sorted(set(facts.needs.get(kind, ())) - set(allowed.get(kind) or ()))
              for kind in ALLOWED_KINDS}
    beyond = {kind: names for kind, names in beyond.items() if names}
    if beyond:
        decline(AUTHORIZATION, "the contract does not allow what this worker uses: " + "; ".join(
            f"{kind} {', '.join(names)}" for kind, names in beyond.items()))
    # 2. capability ids and versions
    missing = missing_capabilities(contract.get("capabilities") or [], facts.card,
                                   facts.capability_ranges)
    if missing:
        decline(CAPABILITY, "no matching capability for " + ", ".join(
            f"{c.get('id')} {c.get('version')}" for c in missing))
    # 3. dependencies
    if not facts.dependencies_met:
        policy = (contract.get("dependencies") or {}).get("policy", "all_verified")
        decline(DEPENDENCY, f"its dependencies do not satisfy {policy} in this worker's "
                "view of the Group")
    # 4. concurrency, 5. queue capacity
    if facts.check_capacity:
        if facts.owned >= facts.slots:
            decline(CAPACITY, f"no free slot: {facts.owned} WorkItems owned, "
                    f"maxConcurrency {facts.slots}", "concurrency")
        queue_capacity = facts.slots if facts.queue_capacity is None else facts.queue_capacity
        if facts.waiting >= queue_capacity:
            decline(CAPACITY, f"the queue is full: {facts.waiting} accepted WorkItems wait "
                    f"for a slot, at most {queue_capacity}", "queue capacity")
    # 6. deadline
    starts = facts.now + timedelta(seconds=max(0.0, facts.start_delay_seconds))
    if facts.start_by is not None and starts > facts.start_by:
        decline(DEADLINE, f"it could start at {_iso(starts)} at the earliest, after its "
                f"startBy {_iso(facts.start_by)}")
    deadline = _deadline(contract)
    if deadline is not None:
        finishes = starts + timedelta(seconds=max(0.0, facts.estimate_seconds))
        if finishes > deadline:
            decline(DEADLINE, f"estimated to finish at {_iso(finishes)} "
                    f"({math.ceil(facts.estimate_seconds)} s from its start), after the "
                    f"deadline {_iso(deadline)}")
    # 7. budgets
    short = budget_shortfall(contract.get("budgets") or {}, facts.usage, facts.estimate_cost)
    if short is not None:
        decline(BUDGET, f"the {short['dimension']} budget cannot cover it: estimate "
                f"{_amount(short['estimate'])}, remaining {_amount(short['remaining'])} "
                f"(budget {_amount(short['budget'])}, used {_amount(short['used'])})"
                + (f"; {short['note']}" if short.get("note") else ""))
    return declines


def admit(contract: JsonObject, facts: Facts) -> Decline | None:
    """None to accept; else the first failing dimension's Decline."""
    declines = assess(contract, facts)
    return declines[0] if declines else None


def _deadline(contract: JsonObject) -> datetime | None:
    text = contract.get("deadline")
    return parse_time(text) if text else None


def _iso(moment: datetime) -> str:
    return format_time(moment)


def _amount(value: Any) -> str:  # a JSON amount: a count or {amount, currency}
    if isinstance(value, dict):
        return f"{value.get('amount')} {value.get('currency')}"
    return "none" if value is None else str(value)


# --- what admission needs from the log beyond queues.py -----------------------------------

class AdmissionView:
    """Per-Group facts folded from the same events as queues.GroupWork: each item's
    latest offer start window (`startWithinSeconds`) and its six-dimension usage so far
    (the totals of `ext.missionweaveprotocol.core.resource_usage_recorded`). Pure."""

    def __init__(self) -> None:
        self.applied = 0
        self.start_within: dict[str, int | None] = {}
        self.usage: dict[str, JsonObject] = {}

    def apply(self, event: JsonObject) -> None:
        if event["sequence"] <= self.applied:
            return
        self.applied = event["sequence"]
        data = event.get("data") or {}
        if event["type"] == "work.offered" and event.get("workItemId"):
            self.start_within[event["workItemId"]] = data.get("startWithinSeconds")
        elif event["type"] == USAGE_EVENT:
            for level in data.get("chargedTo", []):
                if level.get("level") == "workItem":
                    self.usage[level["id"]] = dict(level.get("usage") or {})

    def load_snapshot(self, sequence: int, work_items: list[JsonObject]) -> None:
        """From a snapshot's WorkItem documents (snake_case projections)."""
        self.start_within = {d["id"]: d.get("start_within_seconds") for d in work_items}
        self.usage = {d["id"]: dict(d.get("usage") or {}) for d in work_items}
        self.applied = sequence
