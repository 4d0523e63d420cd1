"""Offer ranking (§10.3): which Workers may receive an offer for a WorkItem, in which
order, and the structured selection basis recorded for each. Pure: plain data in, plain
data out, the time is an argument; no Django, no clock.

The facts about one Agent are a `Candidate`: its roles in the Group, its Agent Card,
its last Presence report, its history in this Group (the WorkItems it owned last that
ended verified or failed, counted by the set of capability ids their contracts required)
and its current load (WorkItems it owns in `queued` or `active`, in every Group).

Policy (the `policyRules` an automatic ranking records, in the order applied):

- `worker-role`: only a member with the `worker` role is eligible (authorization).
- `capability-required`: the Agent Card must list every capability the contract
  requires, with the same id and version.
- `capacity`: the Agent must have room. Its load must be below the card's
  `maxConcurrency`; a fresh Presence report (younger than the Presence TTL) must not
  say `offline` and must report at least one available slot. A stale or missing
  Presence report counts as unknown, not as zero: the card's headroom stands in.
- `reliability-then-availability`: eligible Agents are ordered by their reliability
  for the required capabilities (the WorkItems they last owned in this Group that ended
  verified or failed and required any of them, each counted once however many of them it
  required; for a contract that requires none, every such WorkItem), Laplace-smoothed:
  (verified + 1) / (verified + failed + 2), so an Agent with no history scores 1/2; then
  by availability (a fresh Presence report before an
  unknown one, then more free slots first), then by the lower expected wait.
- `tie-break:agent-id`: what is still equal is ordered by agent id, so the same facts
  always give the same ranking.
- `exclusive:highest-ranked-first`: a contract with `exclusive: true` is offered
  sequentially, one Worker at a time, the highest-ranked eligible one first (§10.3:
  "Exclusive WorkItems SHOULD be offered sequentially to the highest-ranked eligible
  Worker"), a Coordinator's named candidates included, and never to an urgent set.

`expectedCost` is an estimate, not a quote: the contract's budgets are the ceiling any
Worker is held to (so they are the same for every candidate), and `expectedWaitSeconds`
is how long the item may wait for a slot, assuming every item the Agent already owns
uses the contract's `wallClockSeconds` budget: wallClockSeconds * load // maxConcurrency.

The basis holds facts and rule names only; no free-text reasoning is recorded (§10.3:
private chain-of-thought must not be included).
"""

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from fractions import Fraction

from mission_weave.protocol.timefmt import format_time

from .json_types import JsonObject

WORKER_ROLE = "worker-role"
CAPABILITY_REQUIRED = "capability-required"
CAPACITY = "capacity"
ORDER = "reliability-then-availability"
TIE_BREAK = "tie-break:agent-id"
AUTO_RULES = (WORKER_ROLE, CAPABILITY_REQUIRED, CAPACITY, ORDER, TIE_BREAK)
EXCLUSIVE = "exclusive:highest-ranked-first"


def exclusive(contract: JsonObject) -> bool:
    """Whether the contract asks for exclusive placement (`exclusive: true`)."""
    return contract.get("exclusive") is True


@dataclass(frozen=True)
class Presence:
    """An Agent's last capacity report (POST /api/v1/presence)."""

    available_slots: int
    status: str  # available | busy | offline
    reported_at: datetime


@dataclass(frozen=True)
class Candidate:
    """What the Group knows of an Agent that may receive an offer."""

    agent_id: str
    roles: frozenset[str]
    card: JsonObject
    presence: Presence | None = None
    # The WorkItems of this Group it owned last that ended verified or failed:
    # frozenset of the capability ids their contract required -> {verified, failed}.
    reliability: dict[frozenset[str], JsonObject] = field(default_factory=dict)
    load: int = 0  # WorkItems it owns in queued or active, across all Groups

    @property
    def max_concurrency(self) -> int:
        limit: int = self.card.get("maxConcurrency", 1)
        return limit


# --- the basis fields ---------------------------------------------------------------------

def capability_match(required: Sequence[JsonObject], card: JsonObject) -> JsonObject:
    offered = {(c.get("id"), c.get("version")) for c in card.get("capabilities", [])}
    missing = [c for c in required if (c["id"], c["version"]) not in offered]
    return {"required": required, "missing": missing, "matched": not missing}


def fresh_presence(candidate: Candidate, now: datetime, ttl_seconds: int) -> Presence | None:
    """The Presence report if it is younger than the TTL; an old report says nothing."""
    presence = candidate.presence
    if presence is None or now - presence.reported_at >= timedelta(seconds=ttl_seconds):
        return None
    return presence


def availability(candidate: Candidate, now: datetime, ttl_seconds: int) -> JsonObject:
    headroom = max(candidate.max_concurrency - candidate.load, 0)
    presence = fresh_presence(candidate, now, ttl_seconds)
    if presence is None:
        stale = candidate.presence is not None
        return {"source": "card", "presence": "stale" if stale else "unknown",
                "status": None, "availableSlots": None, "estimate": headroom,
                "load": candidate.load, "maxConcurrency": candidate.max_concurrency,
                "reportedAt": None}
    slots = 0 if presence.status == "offline" else min(presence.available_slots, headroom)
    return {"source": "presence", "presence": "fresh", "status": presence.status,
            "availableSlots": presence.available_slots, "estimate": slots,
            "load": candidate.load, "maxConcurrency": candidate.max_concurrency,
            "reportedAt": format_time(presence.reported_at)}


def expected_cost(contract: JsonObject, candidate: Candidate) -> JsonObject:
    budgets = contract.get("budgets") or {}
    wall_clock = budgets.get("wallClockSeconds") or 0
    return {"basis": "contract-budgets",
            "budgets": budgets,
            "expectedWaitSeconds": wall_clock * candidate.load // max(candidate.max_concurrency, 1)}


SCOPE = "this Group, WorkItems last owned"
SCOPE_ANY = "this Group, WorkItems last owned, any capability (the contract requires none)"


def _tally(history: Mapping[frozenset[str], JsonObject],
           counts: Callable[[frozenset[str]], bool]) -> JsonObject:
    """{verified, failed} over the history entries whose capability set `counts`."""
    chosen = [outcome for capabilities, outcome in history.items() if counts(capabilities)]
    return {"verified": sum(o.get("verified", 0) for o in chosen),
            "failed": sum(o.get("failed", 0) for o in chosen)}


def _requiring(capability: str) -> Callable[[frozenset[str]], bool]:
    return lambda ids: capability in ids


def reliability(contract: JsonObject, candidate: Candidate) -> JsonObject:
    """The candidate's verified and failed WorkItems that count for this contract: those
    that required any of its capabilities, each once (perCapability: by capability), or
    all of them when it requires none."""
    required = frozenset(c["id"] for c in contract.get("capabilities", []))
    history = candidate.reliability
    per_capability = {cap: _tally(history, _requiring(cap))
                      for cap in sorted(required)}
    overall = _tally(history, lambda ids: not required or not required.isdisjoint(ids))
    return {**overall, "perCapability": per_capability,
            "scope": SCOPE if required else SCOPE_ANY}


def basis(contract: JsonObject, candidate: Candidate, rules: Sequence[str], now: datetime,
          ttl_seconds: int) -> JsonObject:
    """§10.3's structured selection basis for offering the contract's item to `candidate`."""
    return {
        "capabilityMatch": capability_match(contract.get("capabilities", []), candidate.card),
        "authorizationEligible": "worker" in candidate.roles,
        "availability": availability(candidate, now, ttl_seconds),
        "expectedCost": expected_cost(contract, candidate),
        "reliability": reliability(contract, candidate),
        "policyRules": list(rules),
    }


# --- eligibility and order ------------------------------------------------------------------

def ineligibility(contract: JsonObject, candidate: Candidate, now: datetime,
                  ttl_seconds: int) -> list[str]:
    """The rules `candidate` fails, by name; empty when it is eligible."""
    failed = []
    if "worker" not in candidate.roles:
        failed.append(WORKER_ROLE)
    if not capability_match(contract.get("capabilities", []), candidate.card)["matched"]:
        failed.append(CAPABILITY_REQUIRED)
    if availability(candidate, now, ttl_seconds)["estimate"] < 1:
        failed.append(CAPACITY)
    return failed


def _score(summary: JsonObject) -> Fraction:
    return Fraction(summary["verified"] + 1, summary["verified"] + summary["failed"] + 2)


def _order_key(entry: JsonObject) -> tuple[Fraction, bool, float, float, str]:
    chosen = entry["selectionBasis"]
    known = chosen["availability"]["source"] == "presence"
    return (-_score(chosen["reliability"]), not known, -chosen["availability"]["estimate"],
            chosen["expectedCost"]["expectedWaitSeconds"], entry["agentId"])


def rank(contract: JsonObject, candidates: Iterable[Candidate], now: datetime, ttl_seconds: int,
         rules: Sequence[str] = AUTO_RULES) -> list[JsonObject]:
    """The eligible candidates, best first: [{agentId, selectionBasis}, ...]."""
    eligible = [{"agentId": c.agent_id,
                 "selectionBasis": basis(contract, c, rules, now, ttl_seconds)}
                for c in candidates if not ineligibility(contract, c, now, ttl_seconds)]
    return sorted(eligible, key=_order_key)


def excluded(contract: JsonObject, candidates: Iterable[Candidate], now: datetime,
             ttl_seconds: int) -> JsonObject:
    """agent id -> the rules it fails, for every ineligible candidate."""
    return {c.agent_id: reasons for c in sorted(candidates, key=lambda c: c.agent_id)
            if (reasons := ineligibility(contract, c, now, ttl_seconds))}
