"""The one path for every change (DESIGN.md):

    authenticate, verify -> idempotency -> lock the Group -> decide -> append
    -> apply to the projections -> commit -> publish on commit

HTTP, WebSocket, the dashboard and the sweeper all come through `submit` or
`submit_system`; nothing else writes the log or the projections.
"""

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from mission_weave.protocol.canonical import content_hash, without
from mission_weave.protocol.errors import ProtocolError
from mission_weave.protocol.timefmt import format_time

from apps.identity import principals
from apps.identity.principals import Principal
from apps.work import commands, state, store
from apps.work.commands import Context, Policy

from . import chain, envelope as envelopes, publish
from .models import CommandRecord, Event, Group


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict


def policy() -> Policy:
    return Policy(
        start_window_seconds=settings.MW_START_WINDOW_SECONDS,
        default_lease_seconds=settings.MW_DEFAULT_LEASE_SECONDS,
        max_lease_seconds=settings.MW_MAX_LEASE_SECONDS,
        default_blocked_lease_seconds=settings.MW_DEFAULT_BLOCKED_LEASE_SECONDS,
        max_blocked_lease_seconds=settings.MW_MAX_BLOCKED_LEASE_SECONDS,
        max_urgent_candidates=settings.MW_MAX_URGENT_CANDIDATES)


def submit(group_id: str, envelope, principal: Principal, now: datetime | None = None) -> Answer:
    """Decide one signed command. Raises ProtocolError for a rejection; a rejection
    after authentication is remembered under the command id like an acceptance."""
    now = now or timezone.now()
    envelopes.check_envelope(envelope, group_id)
    member = principals.membership(group_id, principal)
    principals.check_envelope_identity(envelope, principal, now)
    principals.check_membership_epoch(member, envelope["membershipEpoch"])
    command = envelopes.to_command(envelope, frozenset(member.roles))
    fingerprint = content_hash(without(envelope, "signature"))

    with transaction.atomic():
        group = _lock(group_id)
        prior = CommandRecord.objects.filter(group=group, command_id=command.id).first()
        if prior is not None:
            return _repeat(prior, fingerprint)
        try:
            view = store.load(group.id, command)
            context = Context(now=now, policy=policy(), candidates=store.candidates(group.id, command))
            drafts = commands.decide(view, command, context)
        except ProtocolError as rejection:
            _remember(group, command, fingerprint, rejection.http_status, rejection.as_json(),
                      envelope, now)
            answer = Answer(rejection.http_status, rejection.as_json())
        else:
            events = _append(group, view, drafts, command.actor, command.id, now)
            body = {"commandId": command.id, "events": events, "duplicate": False}
            _remember(group, command, fingerprint, 200, body, None, now)
            answer = Answer(200, body)
    return answer


def submit_system(group_id: str, decide_system, now: datetime, load) -> list:
    """Append what the server decides for itself (actor `system`): the sweeper, session
    replacement. `load(group_id)` gives the view; `decide_system(view)` the drafts."""
    with transaction.atomic():
        group = _lock(group_id)
        view = load(group.id)
        drafts = decide_system(view)
        if not drafts:
            return []
        command_id = commands.derive_id("sys", f"{group.id}/{group.head_sequence}")
        return _append(group, view, drafts, "system", command_id, now)


def _lock(group_id: str) -> Group:
    group = Group.objects.select_for_update().filter(id=group_id).first()
    if group is None:  # membership was checked first, so only a race gets here
        raise ProtocolError("NOT_A_MEMBER", "you are not a member of this Group")
    return group


def _repeat(prior: CommandRecord, fingerprint: str) -> Answer:
    if prior.content_hash != fingerprint:
        error = ProtocolError("IDEMPOTENCY_MISMATCH",
                              f"command id {prior.command_id} was used for a different command")
        return Answer(error.http_status, error.as_json())
    body = dict(prior.response)
    if prior.accepted:
        body["duplicate"] = True
    return Answer(prior.status, body)


def _remember(group, command, fingerprint, status, response, envelope, now) -> None:
    CommandRecord.objects.create(
        group=group, command_id=command.id, content_hash=fingerprint, type=command.type,
        actor=command.actor, work_item_id=command.work_item_id, accepted=status == 200,
        status=status, response=response, envelope=envelope, created_at=now)


def _append(group: Group, view: state.View, drafts: list, actor: str, command_id: str,
            now: datetime) -> list:
    """Number, chain and store the events; apply them to the projections."""
    before = view.copy()
    documents, rows = [], []
    sequence, prev_hash = group.head_sequence, group.head_hash
    for index, draft in enumerate(drafts):
        sequence += 1
        state.evolve(view, state.Event(draft.type, draft.data, now, draft.mission_id,
                                       draft.work_item_id))
        document = chain.seal({
            "id": commands.derive_id("evt", command_id, f"{group.id}/{index}"),
            "groupId": group.id, "sequence": sequence, "type": draft.type,
            "occurredAt": format_time(now), "actor": actor, "commandId": command_id,
            "missionId": draft.mission_id, "workItemId": draft.work_item_id,
            "revision": _revision(view, draft), "data": draft.data, "prevHash": prev_hash})
        prev_hash = document["hash"]
        documents.append(document)
        rows.append(event_row(group.id, document, now))
    Event.objects.bulk_create(rows)
    store.save(group.id, before, view)
    Group.objects.filter(id=group.id).update(head_sequence=sequence, head_hash=prev_hash)
    group.head_sequence, group.head_hash = sequence, prev_hash
    transaction.on_commit(lambda: publish.events(group.id, documents))
    return documents


def _revision(view: state.View, draft) -> int | None:
    if draft.work_item_id in view.items:
        return view.items[draft.work_item_id].revision
    if draft.mission_id in view.missions:
        return view.missions[draft.mission_id].revision
    return None


def event_row(group_id: str, document: dict, occurred_at: datetime) -> Event:
    return Event(
        group_id=group_id, sequence=document["sequence"], event_id=document["id"],
        type=document["type"], occurred_at=occurred_at, actor=document["actor"],
        command_id=document["commandId"], mission_id=document["missionId"],
        work_item_id=document["workItemId"], revision=document["revision"],
        data=document["data"], prev_hash=document["prevHash"], hash=document["hash"])


def event_document(row: Event) -> dict:
    """The wire form of a stored event (PROTOCOL §3)."""
    return {"id": row.event_id, "groupId": row.group_id, "sequence": row.sequence,
            "type": row.type, "occurredAt": format_time(row.occurred_at), "actor": row.actor,
            "commandId": row.command_id, "missionId": row.mission_id,
            "workItemId": row.work_item_id, "revision": row.revision, "data": row.data,
            "prevHash": row.prev_hash, "hash": row.hash}
