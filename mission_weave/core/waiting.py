""""Waiting on me": what a signed-in human has to decide in a Mission, and whether the
MissionOwner's latest refusal of the final Approval is still unanswered. Pure: the
dashboard's home page (apps/dashboard/pages.inbox) and the notifications (apps/notify)
both ask it, so a mail goes out for exactly what the page lists.

`waiting(mission, items, principal, roles, now, refusal_open)` says what waits on this
principal, by the authority the pipeline applies (core/commands/authority.py): the
MissionOwner decides execution approvals and the final Approval; the Mission's
Coordinator (or a delegate) reviews results, unblocks, answers ambiguities and refusals,
and re-offers work whose owner has gone; Work Proposals wait on the Coordinator too, until
one authorizes them.

A refused final Approval waits on the Coordinator until new or revised work answers it
(ANSWERS: a WorkItem authorized, a contract revised, a result submitted or accepted, a
WorkItem cancelled, after the refusal; `refusal_status` over the Mission's events says
which); while it does, the final Approval is not the owner's to decide again, and leaves
their Waiting on me.

Work whose owner has gone: a failed item with no automatic retry coming, an open item
that had an owner, and a queued or active item whose ownership ran out, whether the
sweeper has said so yet (start-by passed, lease expired: the owner is still named) or
has (`work.ownership_expired` fenced the owner: the item stays queued with no owner)."""

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mission_weave.core import fencing, lifecycle, state
from mission_weave.core.commands import authority
from mission_weave.protocol.timefmt import parse_time

DONE = (state.VERIFIED, state.CANCELLED)
# Where on its page each decision is taken (the section's id).
ANCHORS = {"execution-approval": "execution-approval", "final-approval": "final-approval",
           "approval-refused": "plan", "review": "decide", "unblock": "steer",
           "ambiguity": "conversation", "execution-refused": "steer", "re-offer": "steer",
           "proposals": "proposals"}


@dataclass(frozen=True)
class Waiting:
    kind: str  # a short key: execution-approval, final-approval, review, ...
    what: str  # a sentence saying what is to be decided
    mission: state.Mission
    item: state.WorkItem | None
    since: datetime | None
    group_id: str = ""  # filled in by pages.inbox, which knows the membership

    @property
    def anchor(self) -> str:
        return ANCHORS[self.kind]


def waiting(mission: state.Mission, items: list[state.WorkItem], principal: str,
            roles: Collection[str], now: datetime, refusal_open: bool | None = None,
            proposals: Collection[state.Proposal] = ()) -> list[Waiting]:
    """What in this active Mission waits on `principal` with `roles` in its Group.
    `refusal_open`: whether the owner's latest refusal of the final Approval is still
    unanswered (refusal_status over its events); None takes the projection's word for it
    (`approval_refusal`, cleared by work.authorized and work.contract_revised only).
    `proposals`: the Mission's Work Proposals (those not yet authorized wait)."""
    if refusal_open is None:
        refusal_open = mission.approval_refusal is not None
    found: list[Waiting] = []
    if "owner" in roles and principal == mission.owner_id and principal.startswith("user:"):
        found += _owners(mission, items, refusal_open)
    if "coordinator" in roles and principal in authority.coordinators(mission):
        found += _coordinators(mission, items, now, refusal_open)
        found += _proposals(mission, proposals)
    return found


def _proposals(mission: state.Mission,
               proposals: Collection[state.Proposal]) -> list[Waiting]:
    """One entry for all the Mission's proposals not yet authorized (each mail names the
    oldest and how many; the Mission page lists them all)."""
    waiting_ones = sorted((p for p in proposals if p.mission_id == mission.id
                           and p.status == "open"),
                          key=lambda p: (p.created_at is None, p.created_at, p.id))
    if not waiting_ones:
        return []
    oldest = waiting_ones[0]
    more = f" and {len(waiting_ones) - 1} more" if len(waiting_ones) > 1 else ""
    return [Waiting("proposals", f"Work proposed by {oldest.proposer}: "
                    f"“{oldest.contract.get('goal', '')}”{more}",
                    mission, None, oldest.created_at)]


def _owners(mission: state.Mission, items: list[state.WorkItem],
            refusal_open: bool) -> list[Waiting]:
    found = []
    for item in items:
        risk = item.contract["risk"]
        if (risk["requiresExecutionApproval"] and not item.execution_approved
                and item.execution_refusal is None
                and lifecycle.allows(item.state, "approval.grant_execution")):
            found.append(Waiting("execution-approval",
                                 f"Execution approval for a {risk['class']}-risk WorkItem",
                                 mission, item, item.updated_at))
    # Refused and not answered yet: it waits on the Coordinator, not on the owner.
    if items and not refusal_open and all(i.state in DONE for i in items) and \
            any(i.state == state.VERIFIED for i in items):
        found.append(Waiting("final-approval", "Final Approval: every WorkItem is done",
                             mission, None, max(i.updated_at for i in items if i.updated_at)))
    return found


def _coordinators(mission: state.Mission, items: list[state.WorkItem], now: datetime,
                  refusal_open: bool) -> list[Waiting]:
    found = []
    refusal = mission.approval_refusal
    if refusal is not None and refusal_open:
        per_item = "".join(f"; {entry['workItemId']}: {entry['reason']}"
                           for entry in refusal["workItems"])
        found.append(Waiting("approval-refused", f"{refusal['by']} refused the final "
                             f"Approval: {refusal['reason']}{per_item}",
                             mission, None, parse_time(refusal["at"])))
    for item in items:
        for kind, what, since in _item_decisions(item, now):
            found.append(Waiting(kind, what, mission, item, since))
    return found


def _item_decisions(item: state.WorkItem,
                    now: datetime) -> list[tuple[str, str, datetime | None]]:
    """(kind, what, since) for each decision the Coordinator owes this WorkItem."""
    found: list[tuple[str, str, datetime | None]] = []
    since = item.updated_at
    if item.state == state.SUBMITTED:
        at = (item.submission or {}).get("at")
        found.append(("review", "Review the submitted result", parse_time(at) if at else since))
    if item.state == state.BLOCKED and not item.child_mission_id:
        found.append(("unblock", f"Blocked: the worker needs “{item.required_resolution}”",
                      since))
    if item.open_ambiguities:
        found.append(("ambiguity", "An ambiguity is open: acceptance is blocked", since))
    if item.execution_refusal is not None:
        refusal = item.execution_refusal
        found.append(("execution-refused",
                      f"{refusal['by']} refused execution: {refusal['reason']}",
                      parse_time(refusal["at"])))
    if item.state == state.FAILED and not item.retry_at:
        found.append(("re-offer", "Failed: offer it again or cancel it", since))
    elif item.state == state.OPEN and item.last_owner:
        found.append(("re-offer", f"Its owner {item.last_owner} is gone: offer it again",
                      since))
    elif item.state in (state.QUEUED, state.ACTIVE) and item.owner \
            and not fencing.owner_is_live(item, now):
        found.append(("re-offer", f"Its owner {item.owner} missed its deadline: offer it "
                      "again", since))
    elif item.state in (state.QUEUED, state.ACTIVE) and item.owner is None:
        # work.ownership_expired (the sweeper, without automatic dispatch) fenced the owner
        # and left the item queued with no owner: nothing happens until it is offered.
        found.append(("re-offer", f"Its owner {item.last_owner or 'unknown'} was fenced "
                      "(its ownership expired): offer it again", since))
    return found


# --- the MissionOwner's refusal of the final Approval, and what answers it ----------------
REFUSED = "mission.approval_refused"
ANSWERS = ("work.authorized", "work.contract_revised", "work.submitted", "work.verified",
           "work.cancelled")


def refusal_status(events: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """{refusal, answer}: the latest `mission.approval_refused` among `events` (one
    Mission's, in sequence order, dicts with at least `type` and `sequence`) and the first
    event after it that answers it (ANSWERS), or None for the answer while there is none;
    None when the Mission was never refused."""
    latest: dict[str, Any] | None = None
    for event in events:
        if event["type"] == REFUSED:
            latest = {"refusal": event, "answer": None}
        elif latest is not None and latest["answer"] is None and event["type"] in ANSWERS:
            latest["answer"] = event
    return latest
