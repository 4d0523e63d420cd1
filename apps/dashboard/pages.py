"""What each page shows, read from the projections and the log (never written here).
Each function takes a Viewer whose membership was checked, and reads that Group only."""

import contextlib
from dataclasses import replace

from django.db.models import Q

from apps.api import reads
from apps.api.artifact_views import HASH
from apps.api.views import audit_trail
from apps.artifacts import provenance
from apps.artifacts.models import Artifact
from apps.identity.models import Membership
from apps.ledger.models import Event, Group
from apps.ledger.pipeline import policy
from apps.notify import waits
from apps.work import models as work_models
from apps.work import work_store
from mission_weave.core import dag, fencing, lifecycle, ranking, retries, state, state_documents
from mission_weave.core import waiting as inbox_rules
from mission_weave.core.commands import review as review_rules
from mission_weave.protocol.errors import ProtocolError

from . import (
    access,
    artifact_content,
    budget_report,
    contract_diff,
    conversation,
    decisions,
    graph,
    mission_markup,
    timeline,
)
from .access import NotFound, Viewer

DECISIONS = ("work.verified", "work.failed")
BEFORE_START = frozenset({state.OPEN, state.OFFERED, state.QUEUED})


def head_sequence(viewer: Viewer) -> int:
    return Group.objects.values_list("head_sequence", flat=True).get(id=viewer.group_id)


def group_page(viewer: Viewer) -> dict:
    group = Group.objects.get(id=viewer.group_id)
    missions = [state_documents.mission_from_doc(r.doc) for r in
                work_models.Mission.objects.filter(group_id=viewer.group_id).order_by("mission_id")]
    counts: dict[str, dict[str, int]] = {}
    for mission_id, item_state in work_models.WorkItem.objects.filter(
            group_id=viewer.group_id).values_list("mission_id", "state"):
        counts.setdefault(mission_id, {}).setdefault(item_state, 0)
        counts[mission_id][item_state] += 1
    return {"group": group, "missions": [
        {"mission": m, "counts": sorted(counts.get(m.id, {}).items())} for m in missions]}


def my_missions(user) -> list:
    """Per live membership, the Missions the user takes part in: those they own,
    coordinate or are a delegate of, in every state, the active ones first (the home
    page; every Mission of a Group is on the Group's page). [{group, missions: [{mission,
    part}]}], Groups without such a Mission left out."""
    found = []
    for member in access.memberships(user):
        principal = member.principal
        rows = work_models.Mission.objects.filter(group_id=member.group_id).filter(
            Q(doc__owner_id=principal) | Q(doc__coordinator_id=principal)
            | Q(doc__delegates__contains=[principal]))
        missions = sorted((state_documents.mission_from_doc(r.doc) for r in rows),
                          key=lambda m: (m.state != state.MISSION_ACTIVE, m.id))
        if missions:
            found.append({"group": member.group, "missions": [
                {"mission": m, "part": _part(m, principal)} for m in missions]})
    return found


def _part(mission: state.Mission, principal: str) -> str:
    parts = [name for name, holds in (
        ("owner", mission.owner_id == principal),
        ("coordinator", mission.coordinator_id == principal),
        ("delegate", principal in mission.delegates and mission.coordinator_id != principal))
        if holds]
    return ", ".join(parts)


def get_mission(viewer: Viewer, mission_id: str) -> state.Mission:
    row = work_models.Mission.objects.filter(group_id=viewer.group_id,
                                             mission_id=mission_id).first()
    if row is None:
        raise NotFound(mission_id)
    return state_documents.mission_from_doc(row.doc)


def items_of(viewer: Viewer, mission_id: str) -> list:
    return [state_documents.item_from_doc(r.doc) for r in work_models.WorkItem.objects.filter(
        group_id=viewer.group_id, mission_id=mission_id).order_by("work_item_id")]


def graph_nodes(viewer: Viewer, items: list, expanded: set, depth: int = 0) -> dict:
    """The graph's input (graph.py): each item's state, goal, dependencies and policy, and
    its child Mission with the child's own items when that child is expanded."""
    nodes = {}
    for item in items:
        child = None
        if item.child_mission_id:
            row = work_models.Mission.objects.filter(group_id=viewer.group_id,
                                                     mission_id=item.child_mission_id).first()
            if row is not None:
                mission = state_documents.mission_from_doc(row.doc)
                inner = (graph_nodes(viewer, items_of(viewer, mission.id), expanded, depth + 1)
                         if mission.id in expanded and depth < 3 else {})
                child = {"id": mission.id, "title": mission.title, "state": mission.state,
                         "count": len(mission.work_items), "nodes": inner}
        nodes[item.id] = {"state": item.state, "goal": item.contract["goal"],
                          "depends_on": tuple(item.depends_on),
                          "policy": item.dependency_policy, "child": child}
    return nodes


def mission_page(viewer: Viewer, mission_id: str, expanded=frozenset(), cycle=None) -> dict:
    mission = get_mission(viewer, mission_id)
    items = items_of(viewer, mission_id)
    nodes = graph_nodes(viewer, items, set(expanded))
    # The layout and its markup are cached under a digest of the graph's input, so a
    # change that shows in the graph is a new entry and a page view reuses the last one.
    drawing = mission_markup.graph_markup(viewer.group_id, nodes, expanded, cycle,
                                          lambda: graph.layout(nodes, set(expanded), cycle))
    unfinished = [i for i in items if i.state not in (state.VERIFIED, state.CANCELLED)]
    # Every decision and what answers a refusal, in one read of the log.
    log = decisions.mission_events(viewer.group_id, mission_id, [i.id for i in items],
                                   (*decisions.DECISIONS, *decisions.ANSWERS))
    approval = next((e for e in reversed(log) if e["type"] == decisions.APPROVED), None)
    active = mission.state == state.MISSION_ACTIVE
    coordinates = viewer.coordinates(mission) and active
    parent = None
    if mission.parent_mission_id:
        parent = get_mission(viewer, mission.parent_mission_id)
    budgets = budget_report.mission_budgets(viewer.group_id, mission, items)
    return {"mission": mission, "items": items, "graph_markup": drawing, "cycle": cycle,
            "unfinished": unfinished, "approval": approval, "parent": parent,
            "matrix": evidence_matrix(viewer, items),
            "decisions": decisions.decisions(log),
            "refusal": inbox_rules.refusal_status(log) if active else None,
            **budgets,
            "rows": mission_markup.rows(viewer.group_id, items, unfinished,
                                        budgets["item_budgets"]),
            "approval_blocked": approval_blocked(items),
            "children": child_missions(viewer, mission_id),
            "proposals": waits.open_proposals(viewer.group_id, [mission_id]).get(mission_id, [])
            if coordinates else [],
            "can_plan": coordinates,
            "can_end": active and (viewer.coordinates(mission) or viewer.owns(mission)),
            "can_approve": viewer.owns(mission) and active}


def evidence_matrix(viewer: Viewer, items: list) -> list:
    """Per WorkItem with a submission, per criterion: the worker's Evidence, the check,
    the reviewer Evidence and the verdict for the submitted contract revision, and the
    artifacts it cites with the review's hash verification."""
    decided = {}  # item id -> its latest decision event, for all of them in one query
    for event in Event.objects.filter(group_id=viewer.group_id,
                                      work_item_id__in=[i.id for i in items],
                                      type__in=DECISIONS).order_by("sequence"):
        decided[event.work_item_id] = event
    matrix = []
    for item in items:
        if not item.submission:
            continue
        integrity = {a["hash"]: a for a in
                     ((item.review or {}).get("integrity") or {}).get("artifacts", [])}
        artifacts = [{**a, "integrity": integrity.get(a["hash"])}
                     for a in artifacts_of(viewer, item) if a["submitted"]]
        decision = decided.get(item.id)
        rows = criteria_rows(item)
        # The decision on this submission (verified is final; failed until it is offered
        # again): its Evidence beside each criterion, and what it overrode.
        overridden = (with_decision(rows, decision.type, decision.data)
                      if decision and item.state in (state.VERIFIED, state.FAILED) else [])
        matrix.append({"item": item, "criteria": rows, "artifacts": artifacts,
                       "revision": item.submission.get("contractRevision"),
                       "decision": decision, "overridden": overridden,
                       "verdict": ((item.review or {}).get("evaluation") or {}).get("verdict")})
    return matrix


def with_decision(rows: list, kind: str, data: dict) -> list:
    """Each criterion row with the decision's own Evidence citing it (`decided`) and
    whether the acceptance overrode it (`overridden`): only a criterion that had not
    passed, as work.verified's `review.overridden` names it (an older event may name one
    that passed: it is not called overridden). Returns the overridden criteria's ids."""
    named = set(((data.get("review") or {}).get("overridden")) or []) \
        if kind == "work.verified" else set()
    overridden = []
    for row in rows:
        criterion = row["criterion"]["id"]
        row["decided"] = [e for e in data.get("evidence", []) if criterion in e["criteria"]]
        row["overridden"] = criterion in named and row["verdict"] != "pass"
        if row["overridden"]:
            overridden.append(criterion)
    return overridden


def approval_blocked(items: list) -> str | None:
    """Why the final Approval would be refused now (core/commands/missions.py), or None."""
    unfinished = [i.id for i in items if i.state not in (state.VERIFIED, state.CANCELLED)]
    if unfinished:
        return f"not every WorkItem is verified or cancelled yet: {', '.join(unfinished)}"
    if not any(i.state == state.VERIFIED for i in items):
        return "no WorkItem is verified: there is nothing to approve (fail or cancel instead)"
    return None


def work_item(viewer: Viewer, item_id: str) -> state.WorkItem:
    row = work_models.WorkItem.objects.filter(group_id=viewer.group_id,
                                              work_item_id=item_id).first()
    if row is None:
        raise NotFound(item_id)
    return state_documents.item_from_doc(row.doc)


def artifacts_of(viewer: Viewer, item: state.WorkItem) -> list:
    """The artifacts published for the item or cited by its submission, with their
    manifests' summary (hash, media type, size, producer, sources)."""
    cited = set((item.submission or {}).get("artifacts", []))
    for record in (item.submission or {}).get("evidence", []):
        cited.update(record.get("artifacts", []))
    rows = Artifact.objects.filter(group_id=viewer.group_id, work_item_id=item.id) | \
        Artifact.objects.filter(group_id=viewer.group_id, hash__in=sorted(cited))
    found = []
    for row in rows.order_by("recorded_at", "hash").distinct():
        summary = provenance.summary(row.doc)
        found.append({**summary, "size": row.doc["manifest"].get("size"),
                      "submitted": row.hash in cited})
    missing = sorted(cited - {a["hash"] for a in found})
    return found + [{"hash": h, "missing": True, "submitted": True} for h in missing]


def criteria_rows(item: state.WorkItem) -> list:
    """Per acceptance criterion: the submitted Evidence citing it, the check, the
    reviewer Evidence, and the latest evaluation's verdict and why (§13.2)."""
    submission = item.submission or {}
    review = item.review or {}
    evaluation = {c["id"]: c for c in (review.get("evaluation") or {}).get("criteria", [])}
    reviewer = {e["id"]: e for e in review.get("reviewerEvidence", [])}
    rows = []
    # A submission verified, failed or cancelled: no one awaits Evidence for it now.
    decided = bool(submission) and item.state in (state.VERIFIED, state.FAILED,
                                                  state.CANCELLED)
    for criterion in item.contract["acceptanceCriteria"]:
        judged = evaluation.get(criterion["id"])
        basis = judged["basis"] if judged else \
            "not evaluated yet" if submission else "nothing submitted yet"
        if decided and (not judged or judged["verdict"] == "pending"):
            basis = (f"not decided by the review: the submission was {item.state} before "
                     "a reviewer gave Evidence (see the decision and its Evidence)")
        rows.append({
            "criterion": criterion,
            "submitted": [e for e in submission.get("evidence", [])
                          if criterion["id"] in e["criteria"]],
            "reviewer": [reviewer[i] for i in (judged or {}).get("reviewerEvidence", [])
                         if i in reviewer],
            "check": (judged or {}).get("check"),
            "verdict": judged["verdict"] if judged else "pending",
            "basis": basis,
            "decided_by": (judged or {}).get("decidedBy"),
        })
    return rows


def decision(trail: dict) -> dict | None:
    """The latest human or agent decision on a submission (work.verified / work.failed)."""
    decided = [e for e in trail["events"] if e["type"] in DECISIONS]
    return decided[-1] if decided else None


def acceptance_override(item: state.WorkItem) -> dict | None:
    """For the Coordinator deciding on a submission: what accepting it now would
    override, from the review evaluated again with every Evidence recorded so far, as
    work.accept_result counts it (mission_weave/core/commands/review.py override()):
    {verdict, integrity, open, overridden, failing}; None unless it is submitted."""
    if item.state != state.SUBMITTED or item.submission is None:
        return None
    return review_rules.override(item)


def work_item_page(viewer: Viewer, item_id: str, now, diff: str | None = None) -> dict:
    item = work_item(viewer, item_id)
    mission = get_mission(viewer, item.mission_id)
    trail = audit_trail(viewer.group_id, item_id)
    review = item.review or {}
    evaluation = review.get("evaluation")
    submitted = item.state == state.SUBMITTED
    controls = coordinator_controls(viewer, mission, item, now)
    history = revisions(trail)
    rows = criteria_rows(item)
    decided = decision(trail)
    overridden = (with_decision(rows, decided["type"], decided["data"])
                  if decided and item.state in (state.VERIFIED, state.FAILED) else [])
    return {
        "item": item, "read": reads.work_item(item), "mission": mission,
        "artifacts": artifacts_of(viewer, item), "criteria": rows,
        "review": review, "evaluation": evaluation, "trail": trail,
        "decision": decided, "decision_overridden": overridden,
        "execution_decision": execution_decision(trail, item),
        "controls": controls,
        "placement": placement(viewer, item, now) if controls.get("offer") else None,
        "offer_blocked": offer_blocked(viewer, item),
        "offer_unavailable": offer_unavailable(item, now) if controls else None,
        "offer_rounds": offer_rounds(trail, item.state), "retry": retry_budget(item),
        "revisions": history, "diff": revision_diff(history, diff, item.contract_revision),
        "reaccept_pending": (item.owner is not None and item.accepted_revision is not None
                             and item.accepted_revision != item.contract_revision),
        "timeline": timeline.timeline(trail["events"], trail["refusedCommands"]),
        "conversation": conversation.conversation(trail["events"], item.open_ambiguities),
        "children": child_missions_of_item(viewer, item),
        "can_raise": bool(viewer.roles - {"observer"}), "can_resolve": viewer.coordinates(mission),
        "can_decide": viewer.coordinates(mission) and submitted,
        "override": acceptance_override(item),
        "execution_card": execution_card(viewer, mission, item),
        **budget_report.item_budgets(viewer.group_id, item),
    }


def execution_decision(trail: dict, item: state.WorkItem) -> dict | None:
    """The MissionOwner's latest execution approval or refusal of this WorkItem, with its
    comment or reason, for everyone who reads the page (None if there was none)."""
    if not item.contract["risk"]["requiresExecutionApproval"]:
        return None
    found = [e for e in trail["events"] if e["type"] in (decisions.GRANTED,
                                                           decisions.EXECUTION_REFUSED)]
    return found[-1] if found else None


def execution_card(viewer: Viewer, mission: state.Mission, item: state.WorkItem) -> dict | None:
    """For the MissionOwner of a risky WorkItem not yet approved: what will run, by when
    it must start, what unfinished work waits on it downstream, the budget at stake, and
    whether it can be decided now."""
    risk = item.contract["risk"]
    if not (viewer.owns(mission) and risk["requiresExecutionApproval"]
            and not item.execution_approved and item.state in BEFORE_START):
        return None
    items = {i.id: i for i in items_of(viewer, mission.id)}
    return {"risk": risk, "capabilities": item.contract.get("capabilities") or [],
            "allowed": item.contract.get("allowed", {}),
            "budgets": item.contract.get("budgets", {}),
            # Verified and cancelled work waits on nothing any more.
            "downstream": [items[i] for i in downstream(item.id, items)
                           if items[i].state not in (state.VERIFIED, state.CANCELLED)],
            "start_by": item.start_by if item.state == state.QUEUED else None,
            "start_within": item.start_within_seconds,
            "refusal": item.execution_refusal,
            "decidable": lifecycle.allows(item.state, "approval.grant_execution")}


def downstream(item_id: str, items: dict) -> list:
    """The WorkItems that wait on `item_id`, directly or through others, in id order."""
    waiting, frontier = set(), [item_id]
    while frontier:
        current = frontier.pop()
        for other in items.values():
            if current in other.depends_on and other.id not in waiting:
                waiting.add(other.id)
                frontier.append(other.id)
    return sorted(waiting)


def offer_blocked(viewer: Viewer, item: state.WorkItem) -> list:
    """Why an offer now could not lead to a start: an open ambiguity (no one may accept
    until a contract revision clears it) or unmet dependencies (DEPENDENCIES_NOT_MET)."""
    reasons = []
    if item.open_ambiguities:
        reasons.append(f"acceptance is blocked while the ambiguity "
                       f"{', '.join(item.open_ambiguities)} is open: answer it, then revise "
                       f"the contract to clear it")
    if item.depends_on:
        states = dict(work_models.WorkItem.objects.filter(
            group_id=viewer.group_id, work_item_id__in=item.depends_on).values_list(
            "work_item_id", "state"))
        if not dag.dependencies_met(item.dependency_policy,
                                    [states.get(d, "missing") for d in item.depends_on]):
            waiting = ", ".join(f"{d} ({states.get(d, 'unknown')})" for d in item.depends_on)
            reasons.append(f"its dependencies do not meet {item.dependency_policy} yet: "
                           f"{waiting}")
    return reasons


def revision_diff(history: list, wanted: str | None, current: int) -> dict | None:
    """`?diff=A..B`: the field-by-field difference between two contract revisions
    (by default the one before the current and the current)."""
    by_revision = {entry["revision"]: entry["contract"] for entry in history}
    a, b = current - 1, current
    if wanted:
        with contextlib.suppress(ValueError):
            a, b = (int(part) for part in wanted.split("..", 1))
    if a not in by_revision or b not in by_revision:
        return None
    return {"rev_a": a, "rev_b": b, "rows": contract_diff.diff(by_revision[a], by_revision[b])}


def child_missions_of_item(viewer: Viewer, item: state.WorkItem) -> list:
    return [state_documents.mission_from_doc(r.doc) for r in work_models.Mission.objects.filter(
        group_id=viewer.group_id, doc__parent_work_item_id=item.id).order_by("mission_id")]


def artifact_record(viewer: Viewer, name: str) -> dict:
    """The artifact `name` of the viewer's Group: NotFound for a malformed name and for
    one unknown here (another Group's artifact is as unknown as one never published)."""
    if not HASH.match(name):
        raise NotFound(name)
    try:
        return provenance.record(viewer.group_id, name)
    except ProtocolError as error:  # NOT_FOUND: unknown in this Group
        raise NotFound(name) from error


def artifact_page(viewer: Viewer, name: str, now, page: int = 1, as_text: bool = False) -> dict:
    """The artifact's content as the reader shows it by its media type (a page of it for
    text), its manifest and its provenance."""
    record = artifact_record(viewer, name)
    return {"provenance": provenance.graph(viewer.group_id, name),
            "reading": artifact_content.reading(viewer, record, now, page, as_text)}


# --- planning: who may be named, what may be placed where ------------------------------

def principals_with(viewer: Viewer, role: str, humans_only: bool = False) -> list:
    """The Group's live members with `role` (the MissionOwner is a human)."""
    found = sorted(m.principal for m in Membership.objects.filter(
        group_id=viewer.group_id, active=True) if role in m.roles)
    return [p for p in found if p.startswith("user:")] if humans_only else found


def workers(viewer: Viewer) -> list:
    return [p.removeprefix("agent:") for p in principals_with(viewer, "worker")
            if p.startswith("agent:")]


def placement(viewer: Viewer, item: state.WorkItem, now) -> dict:
    """What `work.offer` with candidates "auto" would find right now: the eligible
    workers ranked with their full selection basis, and why the others are not
    (the same facts and ranking the pipeline uses, apps/work/work_store.py, core/ranking.py)."""
    pool = list(work_store.candidate_facts(viewer.group_id, None, history=True).values())
    ttl = policy().presence_ttl_seconds
    facts = {c.agent_id: c for c in pool}
    return {"ranked": ranking.rank(item.contract, pool, now, ttl),
            "excluded": {agent: [why_not(rule, item.contract, facts[agent], now, ttl)
                                 for rule in rules]
                         for agent, rules in ranking.excluded(item.contract, pool, now,
                                                              ttl).items()}}


def why_not(rule: str, contract: dict, candidate: ranking.Candidate, now, ttl: int) -> str:
    """A ranking rule an Agent fails, in words a Coordinator can act on."""
    if rule == ranking.CAPABILITY_REQUIRED:
        missing = ranking.capability_match(contract.get("capabilities", []),
                                           candidate.card)["missing"]
        listed = candidate.card.get("capabilities", [])
        return (f"its Agent Card lacks {_capabilities(missing)} "
                f"(it lists {_capabilities(listed) or 'none'})")
    if rule == ranking.CAPACITY:
        seen = ranking.availability(candidate, now, ttl)
        if seen["status"] == "offline":
            return "offline, by its Presence report"
        if seen["source"] == "presence" and seen["availableSlots"] < 1:
            return "no free slot, by its Presence report"
        return (f"no free slot: it owns {seen['load']} queued or active WorkItem(s) and "
                f"its Agent Card allows {seen['maxConcurrency']}")
    return "not a worker of this Group" if rule == ranking.WORKER_ROLE else rule


def _capabilities(capabilities: list) -> str:
    return ", ".join(f"{c.get('id')} {c.get('version')}" for c in capabilities)


def offer_rounds(trail: dict, item_state: str = state.OFFERED) -> list:
    """Each work.offered with what became of it: per candidate its rank, expiry and
    selection basis, a decline and its reason, the acceptance (the first one wins)
    and the withdrawals that followed. The candidates still to be offered in turn
    (`pending`) only for the latest round while the item is offered: after an
    acceptance, a new offer or the item's end, that queue is moot."""
    rounds = []
    for event in trail["events"]:
        kind, data = event["type"], event["data"]
        if kind == "work.offered":
            rounds.append({"at": event["occurredAt"], "sequence": event["sequence"],
                           "actor": event["actor"], "mode": data["mode"],
                           "pending": data.get("pendingCandidates", []),
                           "offers": {o["agentId"]: {**o, "outcome": "offered"}
                                      for o in data["offers"]}})
            continue
        offers = rounds[-1]["offers"] if rounds else {}
        if kind == "work.offer_declined" and data.get("agentId") in offers:
            offers[data["agentId"]].update(outcome="declined", reason=data.get("reason"),
                                           detail=data.get("detail"))
        elif kind == "work.offer_accepted" and data.get("agentId") in offers:
            offers[data["agentId"]].update(outcome="accepted first", at=event["occurredAt"])
            for loser in data.get("withdrawn", []):
                if loser in offers:
                    offers[loser]["outcome"] = "withdrawn (another accepted first)"
        elif kind == "work.offer_withdrawn":
            for agent_id in data.get("agentIds", []):
                if agent_id in offers and offers[agent_id]["outcome"] == "offered":
                    offers[agent_id]["outcome"] = f"withdrawn ({data.get('reason', '')})"
    for index, entry in enumerate(rounds):
        entry["offers"] = list(entry["offers"].values())
        if index < len(rounds) - 1 or item_state != state.OFFERED:
            entry["pending"] = []
    return rounds


def retry_budget(item: state.WorkItem) -> dict:
    """Attempts so far against the contract's retry budget, the next automatic retry's
    backoff, and why automatic retries stopped (§11.4; a Coordinator may offer anyway)."""
    retry = item.contract["retry"]
    return {"attempts": item.attempts, "max_attempts": retry["maxAttempts"],
            "left": max(retry["maxAttempts"] - item.attempts, 0),
            "backoff_seconds": retries.backoff_seconds(retry, item.attempts),
            "retry_at": item.retry_at, "exhausted": item.retry_exhausted}


def revisions(trail: dict) -> list:
    """The contract at each revision: [{revision, at, actor, contract}], oldest first."""
    found = []
    for event in trail["events"]:
        if event["type"] == "work.authorized":
            found.append({"revision": 1, "at": event["occurredAt"], "actor": event["actor"],
                          "contract": event["data"]["contract"]})
        elif event["type"] == "work.contract_revised":
            found.append({"revision": event["data"]["contractRevision"],
                          "at": event["occurredAt"], "actor": event["actor"],
                          "contract": event["data"]["contract"]})
    return found


def proposal(viewer: Viewer, mission_id: str, proposal_id: str) -> state.Proposal:
    row = work_models.Proposal.objects.filter(group_id=viewer.group_id, mission_id=mission_id,
                                              proposal_id=proposal_id).first()
    if row is None:
        raise NotFound(proposal_id)
    return state_documents.proposal_from_doc(row.doc)


def child_missions(viewer: Viewer, mission_id: str) -> list:
    return [state_documents.mission_from_doc(r.doc) for r in work_models.Mission.objects.filter(
        group_id=viewer.group_id, doc__parent_mission_id=mission_id).order_by("mission_id")]


def coordinator_controls(viewer: Viewer, mission: state.Mission, item: state.WorkItem,
                         now) -> dict:
    """Which of the Coordinator's commands this viewer could send now, by the §10.2 table
    (core/lifecycle.py) and the Mission's authority; the pipeline still decides. An offer
    needs an item with no live owner (§10.2: a queued, active or blocked item whose owner's
    start-by deadline, lease or blocked lease has run out may be offered again)."""
    if not viewer.coordinates(mission) or mission.state != state.MISSION_ACTIVE:
        return {}
    allows = {name: lifecycle.allows(item.state, command) for name, command in (
        ("offer", "work.offer"), ("preempt", "work.request_preemption"),
        ("unblock", "work.unblock"), ("cancel", "work.cancel"),
        ("revise", "work.revise_contract"), ("child", "mission.create_child"))}
    allows["offer"] = (allows["offer"] and not item.child_mission_id
                       and not fencing.owner_is_live(item, now))
    allows["child"] = allows["child"] and not item.child_mission_id
    return allows


def offer_unavailable(item: state.WorkItem, now) -> dict | None:
    """Why the Coordinator cannot offer the item now ({why, until}: until when, for a live
    owner), or None when an offer is permitted."""
    if item.child_mission_id:
        return {"why": f"its child Mission {item.child_mission_id} is running; the child's "
                       f"Approval verifies it", "until": None}
    if fencing.owner_is_live(item, now):
        until = {state.QUEUED: item.start_by, state.BLOCKED: item.blocked_until,
                 state.ACTIVE: item.live_lease.expires_at if item.live_lease else None}
        return {"why": f"{item.owner} owns it (ownership epoch {item.ownership_epoch}, "
                       f"{item.state}); it can be offered again once that ownership ends, "
                       f"or after a cancellation", "until": until.get(item.state)}
    if not lifecycle.allows(item.state, "work.offer"):
        return {"why": {state.SUBMITTED: "it is submitted: accept or fail the result first",
                        state.VERIFIED: "it is verified, which is final",
                        state.CANCELLED: "it is cancelled, which is final"}.get(
                            item.state, f"it is {item.state}"), "until": None}
    return None


def inbox(user, now, group_id: str | None = None, mission_id: str | None = None) -> list:
    """Everything waiting on `user` in their live memberships (inbox.py), oldest first."""
    rows = []
    for member in access.memberships(user):
        if group_id and member.group_id != group_id:
            continue
        missions = work_models.Mission.objects.filter(group_id=member.group_id,
                                                      state=state.MISSION_ACTIVE)
        if mission_id:
            missions = missions.filter(mission_id=mission_id)
        by_mission = {r.mission_id: state_documents.mission_from_doc(r.doc) for r in missions}
        items: dict[str, list[state.WorkItem]] = {}
        for row in work_models.WorkItem.objects.filter(group_id=member.group_id,
                                                       mission_id__in=list(by_mission)):
            items.setdefault(row.mission_id, []).append(state_documents.item_from_doc(row.doc))
        refused = waits.open_refusals(member.group_id, list(by_mission.values()), items)
        proposals = waits.open_proposals(member.group_id, list(by_mission))
        for mission in by_mission.values():
            rows += [replace(entry, group_id=member.group_id) for entry in inbox_rules.waiting(
                mission, items.get(mission.id, []), member.principal, member.roles, now,
                refusal_open=mission.id in refused, proposals=proposals.get(mission.id, []))]
    return sorted(rows, key=lambda w: (w.since is None, w.since or now, w.group_id,
                                       w.mission.id, w.item.id if w.item else ""))
