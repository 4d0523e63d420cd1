"""The one path for every change (DESIGN.md):

    authenticate, verify -> lock the Group -> decide -> append -> apply to the
    projections -> remember the answer under the command id -> commit -> publish

Idempotency rests on the unique (group, command id) constraint: a repeated id rolls
its attempt back and gets the first answer, so the common path spends no query on it.

HTTP, WebSocket, the dashboard and the sweeper all come through `submit` or
`submit_system`; nothing else writes the log or the projections. What the pipeline asks
of the apps above the log (who the sender is, the projections, facts outside the log)
and whom it tells of a commit, it reaches through its ports (ports.py): `plugged.members`,
`plugged.projections` and the rest, each described by a Protocol and plugged in by the
app that implements it.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import cache

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from mission_weave.core import chain, commands, state
from mission_weave.core.commands import Context, Policy
from mission_weave.core.evolve import evolve
from mission_weave.protocol.canonical import sha256_hex, signature_key_id
from mission_weave.protocol.errors import ProtocolError
from mission_weave.protocol.timefmt import format_time

from . import db, distribution, faults, group_commit, history, publish
from . import envelope as envelopes
from .models import CommandRecord, Event, Group
from .ports import plugged


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict
    repeat: bool = False  # the first answer of a command id, given again


def policy() -> Policy:
    return Policy(
        start_window_seconds=settings.MW_START_WINDOW_SECONDS,
        default_lease_seconds=settings.MW_DEFAULT_LEASE_SECONDS,
        max_lease_seconds=settings.MW_MAX_LEASE_SECONDS,
        default_blocked_lease_seconds=settings.MW_DEFAULT_BLOCKED_LEASE_SECONDS,
        max_blocked_lease_seconds=settings.MW_MAX_BLOCKED_LEASE_SECONDS,
        max_urgent_candidates=settings.MW_MAX_URGENT_CANDIDATES,
        presence_ttl_seconds=settings.MW_PRESENCE_TTL_SECONDS,
        auto_offer_seconds=settings.MW_AUTO_OFFER_SECONDS,
        offline_grace_seconds=min(settings.MW_OFFLINE_GRACE_SECONDS,
                                  settings.MW_MAX_OFFLINE_GRACE_SECONDS))


def submit(group_id: str, envelope, principal, now: datetime | None = None) -> Answer:
    """Decide one signed command and answer it, over any transport. An answer that
    issued the sender a capability token carries its bearer string too (never stored:
    derived again for a repeated answer)."""
    started = time.perf_counter()
    try:
        answer = _answer(group_id, envelope, principal, now or timezone.now())
    except Exception as error:
        plugged.observer.command(group_id, envelope, principal, started, error)
        raise
    plugged.observer.command(group_id, envelope, principal, started, answer)
    if answer.status != 200:
        return answer
    return Answer(200, plugged.answers.with_bearer(group_id, answer.body, principal))


def _answer(group_id: str, envelope, principal, now: datetime) -> Answer:
    """Decide one signed command and answer it. Failures of identity, membership or
    envelope raise ProtocolError and are not remembered (they prove nothing about the
    id); a decision, acceptance or rejection, is remembered under the command id."""
    signed = envelopes.check_envelope(envelope, group_id)
    fingerprint = sha256_hex(signed)  # what the signature covers is the command's content
    try:
        member = _identified(group_id, envelope, principal, signed, fingerprint, now)
    except ProtocolError:
        # A principal from the session cache is refused only on what is read now.
        principal = plugged.members.afresh(group_id, principal, now)
        if principal is None:
            raise
        member = _identified(group_id, envelope, principal, signed, fingerprint, now)
    if isinstance(member, Answer):
        return member
    command = envelopes.to_command(envelope, member.roles)
    pending = group_commit.Pending(group_id, command, fingerprint, envelope, now,
                                   principal, member,
                                   plugged.members.recheck(group_id, principal,
                                                           signature_key_id(envelope)))
    others = plugged.facts.other_groups(command)
    # A caller's own transaction (a test, a management command) is not shared with
    # other requests' commands; nor is a command that locks other Groups too.
    if not settings.MW_GROUP_COMMIT or connection.in_atomic_block or others:
        return _alone(pending, others)
    return _committer().submit(pending)


def _identified(group_id: str, envelope, principal, signed: bytes, fingerprint: str, now):
    """The sender's membership, once the envelope's identity and epochs are checked; or
    the first answer of a signed retry from an earlier session."""
    member = plugged.members.membership(group_id, principal, signature_key_id(envelope))
    try:
        plugged.members.check_envelope_identity(envelope, principal, member, signed, now)
    except ProtocolError as error:
        # A signed retry from an earlier session, or sent late, still gets the answer
        # its command id was given; only a new decision needs a current session.
        prior = _prior(group_id, envelope["id"]) if error.code in STALE and \
            not plugged.members.cached(principal) else None
        if prior is None:
            raise
        return _repeat(prior, fingerprint)
    plugged.members.check_membership_epoch(member, envelope["membershipEpoch"])
    return member


def _confirmed(pending, rows: list) -> None:
    """A principal from the session cache: its session, membership and key as the locked
    read found them must be the ones it was let in with (ProtocolError otherwise)."""
    plugged.members.confirm(pending.principal, pending.member, rows,
                            signature_key_id(pending.envelope), pending.now)


def _alone(pending, others: set) -> Answer:
    """One command in its own transaction; `others`, the other Groups it locks."""
    group_id, command = pending.group_id, pending.command
    try:
        with db.transaction():  # BEGIN with the lock, COMMIT with the writes
            if others:
                heads = _lock_groups(group_id, others)
                if pending.recheck:
                    _confirmed(pending, db.fetch(*pending.recheck))
                view = plugged.projections.load(group_id, command)
            else:
                # The lock, the sender's recheck and the first read in one round trip:
                # they run once the lock is granted, so they see every command decided,
                # and every revocation committed, before this one.
                asked = time.perf_counter()
                ahead = [_lock_statement(group_id), *filter(None, [pending.recheck])]
                locked, view = plugged.projections.load_after(group_id, command, ahead)
                plugged.observer.lock_waited(time.perf_counter() - asked)
                heads = {group_id: _locked_head(locked[0])}
                if pending.recheck:
                    _confirmed(pending, locked[1])
            answer = _decide_and_write(pending, heads, view, last=True)
    except IntegrityError as error:
        return _answered_before(pending, error)
    return answer


def _together(batch: list) -> None:
    """Group commit (group_commit.py): the batch's commands in one transaction, each
    Group locked once, in id order, and each command decided on what the ones before it
    wrote. Answers are given only once it committed. If the batch fails (a command id
    answered meanwhile refuses it by its unique record, or a command met an error), each
    command goes again alone, so that one command's failure is its own."""
    answers: list[Answer | ProtocolError | None] = []
    plugged.observer.batched(len(batch))
    locks, read_heads = _batch_locks(sorted({p.group_id for p in batch}))
    try:
        # BEGIN with the locks, COMMIT with the last command's writes (if it has any)
        with db.transaction():
            # the locks, the rechecks of cached senders and the first command's reads
            # in one round trip
            ahead = [*locks, *(p.recheck for p in batch if p.recheck)]
            first = batch[0]
            asked = time.perf_counter()
            try:
                locked, view = plugged.projections.load_after(first.group_id, first.command,
                                                            ahead)
            except ProtocolError:  # its reads are refused: lock without them
                locked, view = db.fetch_all(ahead), None
            plugged.observer.lock_waited(time.perf_counter() - asked)
            heads = read_heads(locked[:len(locks)])
            rechecked = iter(locked[len(locks):])
            for index, pending in enumerate(batch):
                try:
                    if pending.recheck:
                        _confirmed(pending, next(rechecked))
                    if pending.group_id not in heads:  # membership was checked: a race
                        raise ProtocolError("NOT_A_MEMBER", "you are not a member of this "
                                            "Group")
                    if index or view is None:
                        view = plugged.projections.load(pending.group_id, pending.command)
                except ProtocolError as error:  # raised before it wrote anything
                    answers.append(error)
                    continue
                answers.append(_decide_and_write(pending, heads, view,
                                                 last=index == len(batch) - 1))
            if not isinstance(answers[-1], Answer):  # the commit did not ride: still due
                faults.reach("before_commit")
    except Exception:
        answers = [None] * len(batch)
    for pending, answer in zip(batch, answers):
        if isinstance(answer, ProtocolError):
            pending.error = answer
        elif answer is None:
            try:
                pending.answer = _alone(pending, set())  # a batch locks no other Group
            except Exception as error:
                pending.error = error
        else:
            pending.answer = answer


def _decide_and_write(pending, heads: dict, view: state.View, last: bool) -> Answer:
    """Decide the command on `view` under its Group's lock and write the decision: its
    events (chained after `heads`, which moves on) or its rejection, and its record.
    `last`: nothing follows in the transaction, so its COMMIT goes with these writes
    (db.transaction); the fault points before a commit are passed before they are sent
    (a crash there leaves the transaction open, and PostgreSQL rolls it back alike)."""
    group_id, command, now = pending.group_id, pending.command, pending.now
    head = heads[group_id]
    try:
        candidates = plugged.projections.candidates(group_id, command, view)
        context = Context(now=now, policy=policy(), candidates=candidates,
                          facts=plugged.facts.load(group_id, command, head[0]))
        decided = time.perf_counter()
        drafts = commands.decide(view, command, context)
    except ProtocolError as rejection:
        answer = Answer(rejection.http_status, rejection.as_json())
        if last:
            faults.reach("before_commit")
        db.execute_batch([_record(group_id, command, pending.fingerprint, answer,
                                  pending.envelope, now)], commit=last)
        return answer
    faults.reach("before_append")
    own = [d for d in drafts if d.group_id in (None, group_id)]
    events, writes = _append(group_id, head, view, own, command.actor, command.id, now)
    writes += _append_elsewhere(group_id, heads, drafts, command, now)
    answer = Answer(200, {"commandId": command.id, "events": events, "duplicate": False})
    writes.append(_record(group_id, command, pending.fingerprint, answer, None, now))
    if last:
        faults.reach("after_append")
        faults.reach("before_commit")
    # With the record: a repeated id fails its unique constraint and takes the whole
    # attempt back with it.
    db.execute_as_one(writes, commit=last)
    if events:
        heads[group_id] = (events[-1]["sequence"], events[-1]["hash"])
    plugged.observer.appended(time.perf_counter() - decided)
    if not last:
        faults.reach("after_append")
    return answer


def _answered_before(pending, error: IntegrityError) -> Answer:
    """The command id was answered before (or just now, by a racing twin): the unique
    constraint rolled this attempt back whole, so answer as we did then."""
    prior = _prior(pending.group_id, pending.command.id)
    if prior is None:
        raise error
    return _repeat(prior, pending.fingerprint)


@cache
def _committer() -> group_commit.GroupCommit:
    return group_commit.GroupCommit(_together, settings.MW_GROUP_COMMIT_MAX,
                                    settings.MW_GROUP_COMMIT_WAIT_MS / 1000)


STALE = frozenset({"STALE_SESSION", "CLOCK_SKEW"})


def _prior(group_id: str, command_id: str) -> CommandRecord | None:
    return CommandRecord.objects.filter(group_id=group_id, command_id=command_id).first()


def submit_system(group_id: str, decide_system, now: datetime, load,
                  skip_locked: bool = False) -> list | None:
    """Append what the server decides for itself (actor `system`): the sweeper, session
    replacement. `load(group_id)` gives the view; `decide_system(view)` the drafts.
    With `skip_locked` a Group that another transaction holds is left for later and the
    answer is None: a sweeper never waits on a busy Group or on another sweeper."""
    with transaction.atomic():
        head = _lock(group_id, skip_locked)
        if head is None:
            return None
        view = load(group_id)
        drafts = decide_system(view)
        events = []
        # One transaction, written in slices: a statement carries at most 65535
        # parameters, and a sweep may expire thousands of leases of one Group at once.
        for start in range(0, len(drafts), SYSTEM_SLICE):
            command_id = commands.derive_id("sys", f"{group_id}/{head[0]}")
            documents, writes = _append(group_id, head, view, drafts[start:start + SYSTEM_SLICE],
                                        "system", command_id, now)
            db.execute_batch(writes)
            events += documents
            head = (documents[-1]["sequence"], documents[-1]["hash"])
        return events


SYSTEM_SLICE = 2000  # events per statement: 13 columns each, well under 65535 parameters


@dataclass(frozen=True)
class Prepared:
    """One WorkItem's system events, evolved, serialized and written out before the
    Group lock (the sweeper's path): the chain's members are all `submit_prepared` adds."""

    work_item_id: str
    version: object  # the projection row's version the events were decided from
    templates: tuple  # chain.Template per event
    rows: tuple  # per event: (type, occurred_at, mission_id, work_item_id, revision, data)
    patch: tuple  # the projections' item_patch


def prepare_system(group_id: str, view: state.View, versions: dict, drafts: list,
                   now: datetime) -> list:
    """[Prepared] for system drafts that each change only the WorkItem they name (a
    deadline's expiry), decided from `view` as read without the lock at `versions`."""
    by_item: dict[str, list] = {}
    for draft in drafts:
        by_item.setdefault(draft.work_item_id, []).append(draft)
    occurred_at, at = format_time(now), connection.ops.adapt_datetimefield_value(now)
    prepared = []
    for item_id, item_drafts in by_item.items():
        before = view.items[item_id]
        alone = state.View(dict(view.missions), {item_id: before})
        templates, rows = [], []
        for draft in item_drafts:
            evolve(alone, state.Event(draft.type, draft.data, now, draft.mission_id,
                                      item_id))
            revision = alone.items[item_id].revision
            templates.append(chain.Template({
                "id": None, "groupId": group_id, "sequence": None, "type": draft.type,
                "occurredAt": occurred_at, "actor": "system", "commandId": None,
                "missionId": draft.mission_id, "workItemId": item_id, "revision": revision,
                "data": draft.data, "prevHash": None}))
            rows.append((draft.type, at, draft.mission_id, item_id, revision,
                         db.to_json(draft.data)))
        if alone.items.keys() != {item_id} or alone.proposals or alone.missions.keys() != \
                view.missions.keys() or any(alone.missions[k] is not m
                                            for k, m in view.missions.items()):
            raise ValueError(f"{item_drafts[0].type} changes more than WorkItem {item_id}")
        patch = plugged.projections.item_patch(group_id, before, alone.items[item_id])
        prepared.append(Prepared(item_id, versions[item_id], tuple(templates), tuple(rows),
                                 patch))
    return prepared


def submit_prepared(group_id: str, prepared: list, skip_locked: bool = False) -> list | None:
    """Append `prepare_system`'s events under the Group lock: those of WorkItems whose
    row is still the version they were decided from (a renewal, a command or another
    sweeper that got there first wins; the item is left to the next sweep), chained
    after the head. The lock is held for a version check, a sha256 per event, a COPY of
    the events and one round trip of updates. None if `skip_locked` and the Group is busy."""
    with transaction.atomic():
        head = _lock(group_id, skip_locked)
        if head is None:
            return None
        current = plugged.projections.versions(group_id, [p.work_item_id for p in prepared])
        kept = [p for p in prepared if current.get(p.work_item_id) == p.version]
        if not kept:
            return []
        command_id = commands.derive_id("sys", f"{group_id}/{head[0]}")
        documents, rows, head = _chained(group_id, head, "system", command_id,
                                         [event for p in kept
                                          for event in zip(p.templates, p.rows)])
        db.copy(EVENTS, EVENT_COLUMNS, rows)
        db.execute_batch([_head_update(group_id, head),
                          plugged.projections.patch_items([p.patch for p in kept])])
    return documents


GROUPS, EVENTS, RECORDS = (Group._meta.db_table, Event._meta.db_table,
                           CommandRecord._meta.db_table)
EVENT_COLUMNS = ["group_id", "sequence", "event_id", "type", "occurred_at", "actor",
                 "command_id", "mission_id", "work_item_id", "revision", "data", "prev_hash",
                 "hash"]
RECORD_COLUMNS = ["group_id", "command_id", "content_hash", "type", "actor", "work_item_id",
                  "accepted", "status", "response", "envelope", "created_at"]


def _lock(group_id: str, skip_locked: bool = False) -> tuple[int, str] | None:
    """Take the Group's row lock for this transaction: every command of one Group is
    decided in turn, which gives gapless sequences and first-acceptance-wins. With
    `skip_locked`, None when another transaction holds it (the sweeper moves on)."""
    rows = db.fetch(*_lock_statement(group_id, skip_locked))
    if not rows and skip_locked:  # Group rows are never deleted: no row means someone holds it
        return None
    return _locked_head(rows)


def _lock_many_statement(group_ids: list) -> tuple:
    """The SELECT that locks the Groups of a batch and reads their heads, (id, sequence,
    hash) each: in id order (rows are locked as the sort returns them), so that two
    batches never wait on each other in a cycle. A Group that does not exist is absent."""
    return (f"SELECT id, head_sequence, head_hash FROM {GROUPS} WHERE id = ANY(%s) "
            f"ORDER BY id FOR NO KEY UPDATE", [group_ids])


def _batch_locks(group_ids: list) -> tuple[list, Callable[[list], dict]]:
    """The statements that lock a batch's Groups, and how to read their results as
    Group id -> head. One statement on PostgreSQL; on Citus one per Group, in the same
    order and round trip, since Citus takes FOR UPDATE only on a query of one shard (a
    batch over Groups on two nodes then commits by two-phase commit)."""
    if distribution.on_citus():
        return ([_lock_statement(group_id) for group_id in group_ids],
                lambda results: {group_id: tuple(rows[0])
                                 for group_id, rows in zip(group_ids, results) if rows})
    return ([_lock_many_statement(group_ids)],
            lambda results: {group_id: (sequence, head_hash)
                             for group_id, sequence, head_hash in results[0]})


def _lock_statement(group_id: str, skip_locked: bool = False) -> tuple:
    """The SELECT of the Group's head that takes its row lock."""
    # NO KEY UPDATE serializes commands as well and lets inserts that merely point at
    # the Group (memberships) proceed.
    lock = " FOR NO KEY UPDATE SKIP LOCKED" if skip_locked else " FOR NO KEY UPDATE"
    return f"SELECT head_sequence, head_hash FROM {GROUPS} WHERE id = %s{lock}", [group_id]


def _locked_head(rows: list) -> tuple[int, str]:
    if not rows:  # membership was checked first, so only a race gets here
        raise ProtocolError("NOT_A_MEMBER", "you are not a member of this Group")
    return tuple(rows[0])


def _lock_groups(group_id: str, others: set) -> dict:
    """Group id -> head for the command's Group and the other Groups it may append to
    (a cross-Group forwarding), locked in id order so that two such commands never wait
    on each other in a cycle. Another Group that does not exist is left out: `decide`
    refuses it, having found no membership there."""
    heads = {}
    for locked in sorted({group_id} | others):
        try:
            heads[locked] = _lock(locked)
        except ProtocolError:
            if locked == group_id:
                raise
    return heads


def _append_elsewhere(group_id: str, heads: dict, drafts: list, command, now) -> list:
    """The writes of a command's events in other Groups' logs (`artifact.received`),
    each chained after that Group's head. They name no Mission or WorkItem there, only
    what they add, so they evolve an empty View. The answer lists the command's own
    Group's events; the others are in their Groups' logs and feeds."""
    writes = []
    for other in sorted({d.group_id for d in drafts} - {None, group_id}):
        _, more = _append(other, heads[other], state.View(),
                          [d for d in drafts if d.group_id == other], command.actor,
                          command.id, now)
        writes += more
    return writes


def _repeat(prior: CommandRecord, fingerprint: str) -> Answer:
    if prior.content_hash != fingerprint:
        error = ProtocolError("IDEMPOTENCY_MISMATCH",
                              f"command id {prior.command_id} was used for a different command")
        return Answer(error.http_status, error.as_json())
    if not prior.accepted:
        return Answer(prior.status, prior.response, repeat=True)
    # An acceptance is remembered by the sequences of its events; the log has them
    # (or, once archived, the archive).
    first, last = prior.response["sequences"]
    return Answer(200, {"commandId": prior.command_id, "duplicate": True,
                        "events": history.events_between(prior.group_id, first, last)},
                  repeat=True)


def _record(group_id, command, fingerprint, answer: Answer, envelope, now) -> tuple:
    response = answer.body
    if answer.status == 200:  # the events themselves are in the log
        events = answer.body["events"]
        response = {"sequences": [events[0]["sequence"], events[-1]["sequence"]]}
    return db.insert(RECORDS, RECORD_COLUMNS, [(
        group_id, command.id, fingerprint, command.type, command.actor, command.work_item_id,
        answer.status == 200, answer.status, db.to_json(response),
        db.to_json(envelope) if envelope is not None else None,
        connection.ops.adapt_datetimefield_value(now))])


def _append(group_id: str, head: tuple, view: state.View, drafts: list, actor: str,
            command_id: str, now: datetime) -> tuple[list, list]:
    """Apply the drafts to `view` in turn (`evolve`, as replay does) and chain them after
    `head`: (their documents, the statements that write them, the new head and what
    `evolve` changed in the projections)."""
    before = view.copy()
    occurred_at, at = format_time(now), connection.ops.adapt_datetimefield_value(now)
    events = []
    for draft in drafts:
        evolve(view, state.Event(draft.type, draft.data, now, draft.mission_id,
                                 draft.work_item_id))
        revision = _revision(view, draft)  # as this event left it
        events.append((_Unsealed({
            "id": None, "groupId": group_id, "sequence": None, "type": draft.type,
            "occurredAt": occurred_at, "actor": actor, "commandId": None,
            "missionId": draft.mission_id, "workItemId": draft.work_item_id,
            "revision": revision, "data": draft.data, "prevHash": None}),
            (draft.type, at, draft.mission_id, draft.work_item_id, revision,
             db.to_json(draft.data))))
    documents, rows, head = _chained(group_id, head, actor, command_id, events)
    writes = [db.insert(EVENTS, EVENT_COLUMNS, rows), _head_update(group_id, head),
              *plugged.projections.changes(group_id, before, view)]
    return documents, writes


class _Unsealed:
    """An event document decided under the lock, its chained members (`id`, `sequence`,
    `commandId`, `prevHash`) still None: `_chained` seals it once its place is known.
    A `chain.Template` (an event prepared before the lock) is sealed the same way."""

    __slots__ = ("document",)

    def __init__(self, document: dict):
        self.document = document

    def seal(self, command_id: str, event_id: str, prev_hash: str, sequence: int) -> dict:
        document = self.document
        document["commandId"], document["id"] = command_id, event_id
        document["prevHash"], document["sequence"] = prev_hash, sequence
        return chain.seal(document)


def _chained(group_id: str, head: tuple, actor: str, command_id: str,
             events: list) -> tuple[list, list, tuple]:
    """The one row builder of every append path (a command alone or in a group-commit
    batch, a forwarding's event in another Group, the system's decisions, the sweeper's
    prepared batches): `events` are (unsealed document, (type, occurred_at, mission_id,
    work_item_id, revision, data as JSON)) in order. Each gets the next sequence after
    `head`, its id (derived from the command id and its place), the hash before it, and
    its own. Returns (the documents, their rows in EVENT_COLUMNS order, the new head);
    the caller writes them in its transaction, and once that commits `_after_commit`
    publishes them and tells the subscribers."""
    documents, rows = [], []
    sequence, prev_hash = head
    for index, (unsealed, (type_, at, mission_id, item_id, revision, data)) in \
            enumerate(events):
        sequence += 1
        event_id = commands.derive_id("evt", command_id, f"{group_id}/{index}")
        document = unsealed.seal(command_id, event_id, prev_hash, sequence)
        rows.append((group_id, sequence, event_id, type_, at, actor, command_id, mission_id,
                     item_id, revision, data, prev_hash, document["hash"]))
        prev_hash = document["hash"]
        documents.append(document)
    _after_commit(group_id, documents)
    return documents, rows, (sequence, prev_hash)


def _head_update(group_id: str, head: tuple) -> tuple:
    """The statement that moves the Group's head to `head` (sequence, hash)."""
    return (f"UPDATE {GROUPS} SET head_sequence = %s, head_hash = %s WHERE id = %s",
            [head[0], head[1], group_id])


def _after_commit(group_id: str, documents: list) -> None:
    """What every append does once its transaction commits, whichever path wrote it (a
    command, a group-commit batch, the system, the sweeper's prepared batch): publish the
    events to the live feeds, then tell whoever subscribed (the review, §13.2)."""
    transaction.on_commit(lambda: publish.events(group_id, documents))
    transaction.on_commit(lambda: _follow_up(group_id, documents))


def _follow_up(group_id: str, documents: list) -> None:
    for subscriber in plugged.committed:
        subscriber(group_id, documents)


def _revision(view: state.View, draft) -> int | None:
    if draft.work_item_id in view.items:
        return view.items[draft.work_item_id].revision
    if draft.mission_id in view.missions:
        return view.missions[draft.mission_id].revision
    return None


def event_document(row: Event) -> dict:
    """The wire form of a stored event (PROTOCOL §3)."""
    return {"id": row.event_id, "groupId": row.group_id, "sequence": row.sequence,
            "type": row.type, "occurredAt": format_time(row.occurred_at), "actor": row.actor,
            "commandId": row.command_id, "missionId": row.mission_id,
            "workItemId": row.work_item_id, "revision": row.revision, "data": row.data,
            "prevHash": row.prev_hash, "hash": row.hash}
