"""A WorkItem's audit trail as a timeline grouped by Ownership Epoch: each epoch's owner,
its Execution Leases (start, renewals, how each ended) and its entries in order, with the
refused commands among them where they were aimed. Pure: the documents of
apps/api/views.audit_trail in, plain data out.

A group with `epoch` None holds what happened while nobody owned the item: before the
first acceptance (authorized, offered, declined, revised) or between two owners."""

from mission_weave.protocol.timefmt import parse_time

FENCING_CODES = frozenset({"STALE_OWNERSHIP", "STALE_LEASE", "LEASE_EXPIRED"})

# The events that close a lease, and what the timeline calls that end. A failure or
# cancellation closes it by `lease.revoked` first, whose reason says which.
LEASE_ENDS = {"work.checkpointed": "checkpointed", "work.blocked": "blocked",
              "work.submitted": "submitted", "lease.expired": "expired",
              "lease.revoked": "revoked"}

OWNERSHIP_EXPIRY = {"start_by": "the start-by deadline passed",
                    "blocked_lease": "the blocked lease ran out",
                    "lease": "the lease timed out", "fenced": "fenced by a new offer"}


def timeline(events: list[dict], refused: list[dict]) -> list[dict]:
    """[{epoch, owner, accepted_at, start_by, leases, entries, ended}] in order; `events`
    in sequence order, `refused` as apps/api/reads.refused_command gives them."""
    groups = [_group()]
    leases: dict[str, dict] = {}
    for record in _chronological(events, refused):
        if "sequence" not in record:  # a refused command: it appended nothing
            _target(groups, leases, record)["entries"].append(_refusal_entry(record))
            continue
        if record["type"] == "work.offer_accepted":
            groups.append(_group(record))
        current = groups[-1]
        _follow_lease(current, leases, record)
        current["entries"].append(_event_entry(record))
        ended = _epoch_end(record) if current["epoch"] is not None else None
        if ended:
            current["ended"] = ended
            groups.append(_group())
    return [group for group in groups if group["entries"]]


def _chronological(events: list[dict], refused: list[dict]) -> list[dict]:
    """The events in sequence order, each refusal placed before the first event that
    happened after it (one clock stamps both; a tie puts the event first)."""
    pending = sorted(refused, key=lambda r: parse_time(r["at"]))
    merged = []
    for event in events:
        while pending and parse_time(pending[0]["at"]) < parse_time(event["occurredAt"]):
            merged.append(pending.pop(0))
        merged.append(event)
    return merged + pending


def _group(accepted: dict | None = None) -> dict:
    if accepted is None:
        return {"epoch": None, "owner": None, "accepted_at": None, "start_by": None,
                "leases": [], "entries": [], "ended": None}
    data = accepted["data"]
    return {"epoch": data["ownershipEpoch"], "owner": _agent(data["agentId"]),
            "accepted_at": accepted["occurredAt"], "start_by": data["startBy"],
            "leases": [], "entries": [], "ended": None}


def _target(groups: list, leases: dict, refusal: dict) -> dict:
    """The epoch a refused command named (by its lease, else its ownershipEpoch), so a
    late result from a fenced owner shows beside the work it belonged to; else the
    group it happened in."""
    command = refusal["command"]
    lease = leases.get(command.get("leaseId"))
    epoch = lease["epoch"] if lease else command.get("ownershipEpoch")
    named = [g for g in groups if epoch is not None and g["epoch"] == epoch]
    return named[-1] if named else groups[-1]


def _follow_lease(group: dict, leases: dict, event: dict) -> None:
    data, at = event["data"], event["occurredAt"]
    if event["type"] == "work.started":
        started = {"lease_id": data["leaseId"], "epoch": data["ownershipEpoch"],
                   "started_at": at, "expires_at": data["expiresAt"], "renewals": [],
                   "ended_at": None, "end": "open", "end_reason": None}
        leases[started["lease_id"]] = started
        group["leases"].append(started)
        return
    lease = leases.get(data.get("leaseId"))
    if lease is None or lease["end"] != "open":
        return
    if event["type"] == "lease.renewed":
        lease["renewals"].append({"at": at, "expires_at": data["expiresAt"]})
        lease["expires_at"] = data["expiresAt"]
    elif event["type"] in LEASE_ENDS:
        lease.update(ended_at=at, end=LEASE_ENDS[event["type"]], end_reason=data.get("reason"))


def _epoch_end(event: dict) -> str | None:
    """Why this event ends the current owner's epoch (evolve.py clears the owner), if it does."""
    data, kind = event["data"], event["type"]
    if kind == "work.ownership_expired":
        return "ownership expired: " + OWNERSHIP_EXPIRY.get(data["reason"], data["reason"])
    if kind == "work.unblocked" and data["next"] != "queued":
        return "unblocked after the owner's ownership ran out"
    if kind == "mission.child_created":
        return f"handed to child Mission {data['childMissionId']}"
    if kind == "work.failed":
        return f"failed: {data.get('reason') or 'failed'}"
    if kind == "work.cancelled":
        return "cancelled"
    if kind == "work.verified":
        return "verified"
    return None


def _event_entry(event: dict) -> dict:
    data = event["data"]
    return {"sequence": event["sequence"], "at": event["occurredAt"], "kind": event["type"],
            "actor": event["actor"], "summary": summary(event), "progress": _progress(event),
            "required_resolution": data.get("requiredResolution"), "fenced": False,
            "refusal": None}


def _refusal_entry(refusal: dict) -> dict:
    code, message = refusal["error"]["code"], refusal["error"]["message"]
    return {"sequence": None, "at": refusal["at"], "kind": "refused", "actor": refusal["actor"],
            "summary": f"{refusal['type']} refused: {code} — {message} (kept for audit)",
            "progress": None, "required_resolution": None, "fenced": code in FENCING_CODES,
            "refusal": {"command_id": refusal["commandId"], "type": refusal["type"],
                        "code": code, "message": message, "status": refusal["status"]}}


def _progress(event: dict) -> dict | None:
    data = event["data"]
    if event["type"] in ("work.checkpointed", "work.progress_reported"):
        return data["progress"]
    if event["type"] == "work.blocked":
        # Older logs hold the progress fields as the checkpoint itself (state._block_checkpoint).
        checkpoint = data["checkpoint"]
        return checkpoint.get("progress", checkpoint)
    return None


# --- summaries: one sentence a person understands per event ------------------------------

def summary(event: dict) -> str:
    phrase = SUMMARIES.get(event["type"])
    if phrase is None:
        return f"{event['type']} by {event['actor']}"
    return phrase(event["data"], _Clock(event["occurredAt"]), event)


class _Clock:
    """A server-written time as HH:MM:SS (UTC), with its date when not the event's day."""

    def __init__(self, at: str):
        self.day = at[:10]

    def __call__(self, moment: str) -> str:
        if moment[:10] == self.day:
            return moment[11:19]
        return f"{moment[:10]} {moment[11:19]}"


def _agent(agent_id: str) -> str:
    return f"agent:{agent_id}"


def _agents(agent_ids: list) -> str:
    return ", ".join(_agent(a) for a in agent_ids)


def _progress_phrase(progress: dict) -> str:
    """e.g. "phase 'draft', 2 milestones reached, next 'figures', 1 blocker"."""
    parts = [f"phase '{progress['phase']}'"]
    milestones = progress.get("milestones") or []
    if milestones:
        parts.append(f"{len(milestones)} milestone{_s(milestones)} reached")
    if progress.get("nextCheckpoint"):
        parts.append(f"next '{progress['nextCheckpoint']}'")
    blockers = progress.get("blockers") or []
    if blockers:
        parts.append(f"{len(blockers)} blocker{_s(blockers)}")
    return ", ".join(parts)


def _s(things) -> str:
    return "" if len(things) == 1 else "s"


def _quote(text: str, limit: int = 80) -> str:
    return f"“{text if len(text) <= limit else text[:limit - 1] + '…'}”"


def _offered(data, clock, event):
    offers = data["offers"]
    text = (f"offered to {_agents([o['agentId'] for o in offers])} ({data['mode']}) "
            f"until {clock(offers[0]['expiresAt'])}")
    if data.get("pendingCandidates"):
        text += f"; {len(data['pendingCandidates'])} more in line"
    if data.get("autoDispatch"):
        text = f"reassigned automatically after {data['autoDispatch']['after']}: {text}"
    return text


def _declined(data, clock, event):
    detail = f" ({data['detail']})" if data.get("detail") else ""
    return f"offer to {_agent(data['agentId'])} declined: {data['reason']}{detail}"


def _unblocked(data, clock, event):
    text = f"unblocked: {_quote(data['resolution'])}; "
    if data["next"] == "queued":
        return text + f"back in the queue, start by {clock(data['startBy'])}"
    if data.get("expiredOwner"):
        return text + f"reopened, as the ownership of {_agent(data['expiredOwner'])} had run out"
    return text + "reopened without an owner"


def _failed(data, clock, event):
    text = f"failed by {data.get('by') or event['actor']}: {data.get('reason') or 'failed'}"
    if data.get("permanent"):
        text += " (permanent)"
    if data.get("retryAt"):
        text += f"; may be offered again from {clock(data['retryAt'])}"
    elif data.get("exhaustedBy"):
        text += f"; no retry left ({data['exhaustedBy']})"
    return text


def _verified(data, clock, event):
    if data.get("childMissionId"):
        return f"verified by the Approval of child Mission {data['childMissionId']}"
    return f"verified: result accepted by {data.get('by') or event['actor']}"


def _message(data, clock, event):
    label = {"ambiguity": "ambiguity raised", "resolution": f"answer to {data.get('resolves')}"}
    return f"{label.get(data['kind'], 'message')} by {data['author']}: {_quote(data['text'])}"


def _revised(data, clock, event):
    text = f"contract revised to revision {data['contractRevision']}"
    if data.get("resolvedAmbiguities"):
        text += f", resolving ambiguity {', '.join(data['resolvedAmbiguities'])}"
    return text


SUMMARIES = {
    "work.authorized": lambda d, clock, e: (
        f"authorized by {e['actor']} (contract revision {d['contract']['revision']})"),
    "work.contract_revised": _revised,
    "work.offered": _offered,
    "work.offer_declined": _declined,
    "work.offer_withdrawn": lambda d, clock, e: (
        f"offer to {_agents(d['agentIds'])} withdrawn: {d['reason']}"),
    "work.offer_accepted": lambda d, clock, e: (
        f"accepted by {_agent(d['agentId'])}: ownership epoch {d['ownershipEpoch']}, "
        f"start by {clock(d['startBy'])}"),
    "work.contract_accepted": lambda d, clock, e: (
        f"{_agent(d['agentId'])} accepted contract revision {d['contractRevision']}"),
    "approval.execution_granted": lambda d, clock, e: (
        f"execution approved by {d['by']} for contract revision {d['contractRevision']}"),
    "work.started": lambda d, clock, e: (
        f"lease {d['leaseId']} started (attempt {d['attempt']}"
        f"{', resumed' if d.get('resumed') else ''}), expires {clock(d['expiresAt'])}"),
    "lease.renewed": lambda d, clock, e: (
        f"lease {d['leaseId']} renewed until {clock(d['expiresAt'])}"),
    "work.progress_reported": lambda d, clock, e: f"progress: {_progress_phrase(d['progress'])}",
    "work.checkpointed": lambda d, clock, e: (
        f"checkpoint: {_progress_phrase(d['progress'])}; lease {d['leaseId']} released, "
        f"start again by {clock(d['startBy'])}"),
    "work.blocked": lambda d, clock, e: (
        f"blocked: needs {_quote(d['requiredResolution'])}; lease {d['leaseId']} released, "
        f"the owner keeps it until {clock(d['blockedUntil'])}"),
    "work.unblocked": _unblocked,
    "lease.expired": lambda d, clock, e: f"lease {d['leaseId']} expired ({d['reason']})",
    "lease.revoked": lambda d, clock, e: f"lease {d['leaseId']} revoked: {d['reason']}",
    "work.ownership_expired": lambda d, clock, e: (
        f"ownership of {_agent(d['agentId'])} (epoch {d['ownershipEpoch']}) expired: "
        f"{OWNERSHIP_EXPIRY.get(d['reason'], d['reason'])}"),
    "work.preemption_requested": lambda d, clock, e: (
        f"preemption of lease {d['leaseId']} requested"
        + (f": {d['reason']}" if d.get("reason") else "")),
    "work.submitted": lambda d, clock, e: (
        f"submitted against contract revision {d['contractRevision']}: "
        f"{len(d['artifacts'])} artifact{_s(d['artifacts'])}, "
        f"{len(d['evidence'])} Evidence record{_s(d['evidence'])}"),
    "work.verified": _verified,
    "work.failed": _failed,
    "work.cancelled": lambda d, clock, e: f"cancelled by {d['by']}: {d['reason']}",
    "mission.child_created": lambda d, clock, e: (
        f"child Mission {d['childMissionId']} created; on its failure: "
        f"{d['childFailurePolicy']}"),
    "work.child_mission_failed": lambda d, clock, e: (
        f"child Mission {d['childMissionId']} failed: {d['reason']}"),
    "conversation.message_posted": _message,
}
