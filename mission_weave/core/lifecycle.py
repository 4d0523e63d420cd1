"""The WorkItem state machine of seed §10.2, as one table.

Hold TABLE against the seed row by row: same order, same states, same notes.
`permitted()` is the only gate; a (state, trigger) pair that is in neither table
is TRANSITION_NOT_PERMITTED. Pure: no Django, no clock.
"""

from dataclasses import dataclass

from mission_weave.protocol.errors import ProtocolError

from .state import ACTIVE, BLOCKED, CANCELLED, FAILED, OFFERED, OPEN, QUEUED, SUBMITTED, VERIFIED

NONE = "none"  # no WorkItem exists yet
PROPOSAL = "proposal"  # an open Work Proposal

STATES = (NONE, PROPOSAL, OPEN, OFFERED, QUEUED, ACTIVE, BLOCKED, SUBMITTED, VERIFIED, FAILED,
          CANCELLED)


@dataclass(frozen=True)
class Row:
    sources: frozenset[str]
    trigger: str
    targets: frozenset[str]
    note: str


def row(sources: str, trigger: str, targets: str, note: str) -> Row:
    return Row(frozenset(sources.split()), trigger, frozenset(targets.split()), note)


UNFINISHED = "open offered queued active blocked submitted"

# Current state(s)                        Transition                  Next state(s)   Notes
TABLE = (
    row("none",                            "work.propose",             "proposal",
        "Any Group member may propose; no WorkItem exists yet"),
    row("none proposal",                   "work.authorize",           "open",
        "Coordinator or scoped delegate creates the WorkItem"),
    row("open offered queued active blocked failed", "work.offer",     "offered",
        "With no live owner. Creates, replaces, or extends a durable offer; "
        "an expired owner is fenced first"),
    row("offered",                         "work.accept_offer",        "queued",
        "Atomic ownership epoch begins"),
    row("offered",                         "offer expiry",             "offered",
        "Expiry invalidates acceptance but does not itself append an Event or change state"),
    row("queued",                          "approval.grant_execution", "queued",
        "When required. Satisfies the start gate without executing work"),
    row("queued",                          "work.start",               "active",
        "Valid ownership and Execution Lease required"),
    row("active",                          "work.checkpoint",          "queued",
        "Durable progress releases execution while retaining a bounded ownership lease"),
    row("active",                          "work.block",               "blocked",
        "Checkpoint and bounded blocked lease"),
    row("blocked",                         "work.unblock",             "queued open",
        "Re-enters its queue or is re-offered after ownership expiry"),
    row("active",                          "work.submit",              "submitted",
        "Artifacts and Evidence required"),
    row("submitted",                       "work.accept_result",       "verified",
        "Coordinator review succeeds"),
    row(UNFINISHED,                        "work.fail",                "failed",
        "Failure Evidence required; a Coordinator may later issue a new work.offer"),
    row(UNFINISHED,                        "work.cancel",              "cancelled",
        "Cleanup policy applies"),
    row("open offered queued active blocked", "mission.create_child",  "blocked",
        "Ownership is fenced while the linked child Mission runs"),
    row("blocked",                         "child mission approval",   "verified",
        "Child Approval becomes parent WorkItem Evidence"),
    row("blocked",                         "child mission failure",    "blocked failed",
        "The declared child-failure policy controls propagation"),
    row(UNFINISHED,                        "parent mission failure or cancellation",
        "failed cancelled",
        "Terminal Mission state propagates to unfinished WorkItems"),
)

# Commands that act on a WorkItem without moving it. They are not rows of §10.2;
# listing them here keeps "everything else is rejected" true and visible.
WITHIN_STATE = (
    row("offered",                         "work.decline_offer",       "offered",
        "A structured decline (§10.3); the offer is closed, the WorkItem stays offered"),
    row("queued",                          "work.accept_offer",        "queued",
        "The current owner renews acceptance of a revised contract (§10.1)"),
    row("open offered queued blocked failed", "work.revise_contract",  "same",
        "Revision + 1; not while active (preempt first); renewed acceptance required"),
    row("queued",                          "approval.refuse_execution", "queued",
        "The MissionOwner refuses the start gate, with a reason; a grant may follow"),
    row("active",                          "lease.renew",              "active",
        "Extends the Execution Lease; the renewal history is kept"),
    row("active",                          "work.progress",            "active",
        "Structured progress (§11.4)"),
    row("active",                          "work.request_preemption",  "active",
        "Cooperative: the worker checkpoints at its next safe point (§11.3)"),
    row("active",                          "capability.rotate",        "active",
        "The lease holder's capability tokens are revoked and a new one issued (§11.3)"),
    row("active",                          "capability.narrow",        "active",
        "A new token with a subset of the held scopes; the old ones are revoked (§11.3)"),
    row("active",                          "usage.record",             "active",
        "Six-dimension usage charged up the budget ancestry, all or nothing (§11.5)"),
    row("submitted",                       "evidence.record",          "submitted",
        "Reviewer-Agent Evidence for the submission under review (§13.2)"),
    row("queued active",                   "schedule.disclose",        "same",
        "The owner's estimated start, completion and capacity (§11.2)"),
    row("open offered queued active blocked submitted verified failed cancelled",
        "conversation.post",               "same",
        "The WorkItem Conversation; an open ambiguity blocks acceptance (§10.1)"),
)

# Triggers that name a command a client sends against an existing WorkItem.
ITEM_COMMANDS = tuple(dict.fromkeys(
    r.trigger for r in TABLE + WITHIN_STATE
    if "." in r.trigger and r.trigger not in ("work.propose", "work.authorize")))


def _lookup(state: str, trigger: str) -> Row | None:
    for candidate in TABLE + WITHIN_STATE:
        if candidate.trigger == trigger and state in candidate.sources:
            return candidate
    return None


def allows(state: str, trigger: str) -> bool:
    """Whether the §10.2 table has a row for `trigger` from `state` (for showing controls)."""
    return _lookup(state, trigger) is not None


def permitted(state: str, trigger: str) -> frozenset[str]:
    """The possible next states of `trigger` from `state`, or TRANSITION_NOT_PERMITTED."""
    found = _lookup(state, trigger)
    if found is None:
        raise ProtocolError(
            "TRANSITION_NOT_PERMITTED",
            f"{trigger} is not permitted while the WorkItem is {state!r} (§10.2)",
            {"state": state, "command": trigger})
    return frozenset({state}) if found.targets == {"same"} else found.targets


def as_markdown() -> str:
    """The table rendered for the docs, straight from the code."""
    lines = ["| Current state | Transition | Next state | Notes |", "| --- | --- | --- | --- |"]
    for r in TABLE:
        sources = ", ".join(s for s in STATES if s in r.sources)
        targets = " or ".join(s for s in STATES if s in r.targets)
        lines.append(f"| {sources} | `{r.trigger}` | {targets} | {r.note} |")
    return "\n".join(lines)
