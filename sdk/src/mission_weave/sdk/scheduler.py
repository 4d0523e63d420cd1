"""The Worker-owned Scheduler (§11.1): which queued WorkItems start in which free slots.

Pure: plain data in, plain data out; no I/O, no clock (`now` is an argument), no
Mission content (only scheduling metadata, §13.3). The Worker calls `schedule()` every
time a slot frees or its queues change; the queue order is recomputed from the items
as given on every call, so a revised contract's urgency or deadline reorders the queued
items at the very next decision (§11.3).

Policy
------
A *decision* grants one free slot to one WorkItem. It is made in two steps.

1. **Which Group** (weighted fairness, stride scheduling). Each Group has an effective
   weight `w = weight × PRIORITY_CLASS_FACTOR[priorityClass]` (the organization's
   priority class is policy, set by the organization or the MissionOwner, never by a
   Coordinator) and a *pass*; a grant adds `1/w` to the Group's pass. The slot goes to
   the *eligible* Group with the lowest pass (ties: the Group served longest ago, then
   the Group id). A Group *contends* when it is below its quota (its maximum number of
   slots at once) and has a queued item whose risk gate is open; it is *eligible* when
   one of those items also fits the resources the running slots leave free (and is not
   held back by a reservation, below). A Group that was not contending (idle, at quota,
   gated) rejoins at the current virtual time `V` (the lowest pass among the eligible
   Groups at the last decision): it cannot bank credit while it had nothing to run and
   then burst.
   *Resource reservation*: when the fairest contender's next item waits only for
   resources (it fits the declared capacity, not what is free now), it is reserved: no
   other item needing those resource kinds starts until it has started (or left the
   queue), and it goes first when its Group is next chosen. Running work releases the
   resources, so a flood of small items cannot starve a large one; items needing other
   kinds keep running. One reservation at a time, kept in `Fairness`.
2. **Which item of that Group** (deadlines, urgency, impact, aging). Highest score
   first, where `score = URGENCY[urgency] + IMPACT[businessImpact] + deadline boost
   (0..DEADLINE_BOOST_MAX, growing as the deadline nears within DEADLINE_HORIZON) +
   seconds waited / AGING_SECONDS`; ties by enqueue time, then WorkItem id. Urgency
   and impact are bounded, so aging always wins in the end. The best item that fits
   the free resources starts (a reserved item first, above).

Bounds (and their tests in tests/sdk/test_scheduler.py)
-------------------------------------------------------
- **Waiting bound across Groups.** While Group g stays eligible, at most
  `N_g = Σ_{h≠g} (⌊w_h / w_g⌋ + 1)` decisions go to other Groups before g gets a slot
  (`waiting_bound()`). Why: every eligible Group's pass stays within `[V, V + 1/w]`, so
  another Group h can be served before g only while its pass does not exceed g's, at
  most `⌊(1/w_g) / (1/w_h)⌋ + 1` times. With equal weights that is `2(G - 1)`.
- **Shares.** Groups that are all eligible throughout, starting level, receive
  `c_g` of `n` decisions with `-G·w_g/W ≤ c_g - n·w_g/W ≤ 1` (W the sum of the
  weights, G the number of Groups): long-run shares track the weights, and no flood,
  urgency or impact in one Group takes more than its share. Nothing is unbounded
  highest-priority-first: the highest class only gets a larger, finite weight.
- **Resources.** A reserved item fits as soon as the running work that holds its
  resource kinds finishes (no one else may take them), and it then starts within its
  Group's waiting bound.
- **Within a Group.** An item that fits is passed over only by items whose score is
  higher (or by the reserved item); an item enqueued more than
  `max_score_lead() × AGING_SECONDS` seconds after it never is.
- **Slots.** At most `maxConcurrency` slots are declared (`declare_slots`), a slot holds
  at most one assignment, and running assignments never exceed a Group's quota or the
  declared resources.

Isolation (§11.1): every assignment carries its own context id, checkpoint namespace,
tool budget (a private read-only copy), credential (the capability token bound to its
lease, once started) and side-effect key scope (Mission ID, WorkItem ID, Ownership
Epoch: the §16 idempotency key of every operation is derived from it).
`SlotTable` refuses two assignments that share any of them.

The fairness state (`Fairness`) is advisory local memory: losing it resets everyone to
the same pass, which is fair. The queues themselves are rebuilt from the Group logs.
"""

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from fractions import Fraction
from math import floor
from types import MappingProxyType
from typing import Any

from mission_weave.protocol.idempotency import idempotency_key

from . import disclosure

Resources = Mapping[str, float]  # resource kind -> amount (needed, held or the capacity)
GroupOrder = tuple[Fraction, int, str]  # (pass, last served, id): the least goes first

URGENCY = {"low": 0, "normal": 1, "high": 2, "critical": 3}
IMPACT = {"low": 0, "medium": 1, "high": 2, "critical": 3}
PRIORITY_CLASS_FACTOR = {"low": 1, "normal": 2, "high": 4, "critical": 8}
DEADLINE_BOOST_MAX = 3.0
DEADLINE_HORIZON = timedelta(hours=24)
AGING_SECONDS = 300  # one point of score per five minutes waited


@dataclass(frozen=True)
class QueuedItem:
    """A WorkItem the Worker owns and may start: scheduling metadata only."""

    group_id: str
    work_item_id: str
    mission_id: str
    ownership_epoch: int
    enqueued_at: datetime
    urgency: str = "normal"
    business_impact: str = "medium"
    deadline: datetime | None = None
    risk_gate_open: bool = True  # e.g. execution approval granted where required
    resources: dict[str, float] = field(default_factory=dict)  # kind -> amount while running
    tool_budget: dict[str, Any] = field(default_factory=dict)  # the contract's budgets (JSON)
    checkpoint_ref: str | None = None  # the state artifact to resume from, if any
    expected_seconds: int | None = None  # how long a run usually takes, if known


@dataclass(frozen=True)
class GroupPolicy:
    weight: int = 1
    priority_class: str = "normal"
    quota: int | None = None  # the most slots this Group may hold at once

    @property
    def effective_weight(self) -> int:
        return self.weight * PRIORITY_CLASS_FACTOR[self.priority_class]


DEFAULT_POLICY = GroupPolicy()


@dataclass(frozen=True)
class Assignment:
    """One WorkItem in one slot, with everything that slot isolates."""

    slot_id: str
    group_id: str
    mission_id: str
    work_item_id: str
    ownership_epoch: int
    started_at: datetime
    resources: MappingProxyType[str, float]
    tool_budget: MappingProxyType[str, Any]  # a frozen copy of the contract's budgets
    checkpoint_ref: str | None = None
    expected_seconds: int | None = None
    lease_id: str | None = None
    credential: str | None = None  # the capability token id bound to the lease

    @property
    def context_id(self) -> str:
        """The Mission context this slot may see: one Group, one Mission, one item."""
        return f"{self.group_id}/{self.mission_id}/{self.work_item_id}"

    @property
    def checkpoint_namespace(self) -> str:
        return f"{self.context_id}@{self.ownership_epoch}"

    @property
    def key_scope(self) -> tuple[str, str, int]:
        return (self.mission_id, self.work_item_id, self.ownership_epoch)

    def side_effect_key(self, operation_id: str) -> str:
        """The §16 idempotency key of an external operation made from this slot."""
        return idempotency_key(self.mission_id, self.work_item_id, self.ownership_epoch,
                               operation_id)

    def with_lease(self, lease_id: str, credential: str | None) -> "Assignment":
        return replace(self, lease_id=lease_id, credential=credential)


class IsolationError(ValueError):
    """Two slots would share a context, checkpoint, credential or side-effect keys."""


def _isolated_facets(assignment: Assignment) -> dict[str, object]:
    return {"work item": (assignment.group_id, assignment.work_item_id),
            "context": assignment.context_id,
            "checkpoint": assignment.checkpoint_namespace,
            "side-effect keys": assignment.key_scope,
            "credential": assignment.credential,
            "lease": assignment.lease_id}


@dataclass(frozen=True)
class SlotTable:
    """The declared slots and what runs in each. Immutable: every change returns a new
    table, and a table in which two slots share an isolated facet cannot be built."""

    slots: tuple[tuple[str, Assignment | None], ...]  # ((slot_id, its assignment), ...)

    def __post_init__(self) -> None:
        seen: dict[tuple[str, object], str] = {}
        for slot_id, assignment in self.slots:
            if assignment is None:
                continue
            if assignment.slot_id != slot_id:
                raise IsolationError(f"assignment for {assignment.slot_id} placed in {slot_id}")
            for facet, value in _isolated_facets(assignment).items():
                if value is None:
                    continue
                if (facet, value) in seen:
                    raise IsolationError(f"slots {seen[facet, value]} and {slot_id} would share "
                                         f"a {facet}")
                seen[facet, value] = slot_id
        if len({slot_id for slot_id, _ in self.slots}) != len(self.slots):
            raise IsolationError("slot ids repeat")

    @property
    def free(self) -> tuple[str, ...]:
        return tuple(slot_id for slot_id, assignment in self.slots if assignment is None)

    @property
    def running(self) -> tuple[Assignment, ...]:
        return tuple(assignment for _, assignment in self.slots if assignment is not None)

    def assign(self, assignment: Assignment) -> "SlotTable":
        if assignment.slot_id not in self.free:
            raise IsolationError(f"slot {assignment.slot_id} is not free")
        return SlotTable(tuple((slot_id, assignment if slot_id == assignment.slot_id else held)
                               for slot_id, held in self.slots))

    def update(self, assignment: Assignment) -> "SlotTable":
        """Replace the slot's assignment (e.g. bind its lease and credential)."""
        return SlotTable(tuple((slot_id, assignment if slot_id == assignment.slot_id else held)
                               for slot_id, held in self.slots))

    def release(self, slot_id: str) -> "SlotTable":
        """The slot's work checkpointed, blocked, submitted or failed: free it."""
        return SlotTable(tuple((sid, None if sid == slot_id else held)
                               for sid, held in self.slots))


def declare_slots(count: int, max_concurrency: int) -> SlotTable:
    """`count` empty isolated slots; never more than the Agent Card's maxConcurrency."""
    if not 0 <= count <= max_concurrency:
        raise ValueError(f"{count} slots declared; the Agent Card allows 0..{max_concurrency}")
    return SlotTable(tuple((f"slot-{index}", None) for index in range(count)))


@dataclass(frozen=True)
class Fairness:
    """Stride-scheduling memory across decisions (advisory; see the module docstring)."""

    passes: MappingProxyType[str, Fraction] = field(
        default_factory=lambda: MappingProxyType({}))
    virtual_time: Fraction = Fraction(0)
    last_served: MappingProxyType[str, int] = field(
        default_factory=lambda: MappingProxyType({}))
    decisions: int = 0
    reservation: tuple[str, str] | None = None  # (groupId, workItemId) held resources wait for


@dataclass(frozen=True)
class Decision:
    slots: SlotTable
    started: tuple[Assignment, ...]  # the new Assignments, in decision order
    fairness: Fairness


# --- within a Group -------------------------------------------------------------------------

def score(item: QueuedItem, now: datetime) -> float:
    boost = 0.0
    if item.deadline is not None:
        left = (item.deadline - now) / DEADLINE_HORIZON
        boost = DEADLINE_BOOST_MAX * min(1.0, max(0.0, 1.0 - left))
    waited = max(0.0, (now - item.enqueued_at).total_seconds())
    return (URGENCY[item.urgency] + IMPACT[item.business_impact] + boost
            + waited / AGING_SECONDS)


def max_score_lead() -> float:
    """The most score an item can hold over another from urgency, impact and deadline."""
    return max(URGENCY.values()) + max(IMPACT.values()) + DEADLINE_BOOST_MAX


def group_order(items: Iterable[QueuedItem], now: datetime) -> list[QueuedItem]:
    """A Group's queued items in the order it would start them, recomputed from `items`."""
    return sorted(items, key=lambda i: (-score(i, now), i.enqueued_at, i.work_item_id))


# --- across Groups --------------------------------------------------------------------------

def waiting_bound(group_id: str, policies: Mapping[str, GroupPolicy],
                  group_ids: Iterable[str]) -> int:
    """N_g: the most decisions that go to other Groups while `group_id` stays eligible."""
    weight = _policy(policies, group_id).effective_weight
    return sum(floor(_policy(policies, other).effective_weight / weight) + 1
               for other in set(group_ids) if other != group_id)


def share(group_id: str, policies: Mapping[str, GroupPolicy],
          group_ids: Iterable[str]) -> Fraction:
    """The long-run fraction of decisions `group_id` gets among `group_ids` (all eligible)."""
    weights = {g: _policy(policies, g).effective_weight for g in set(group_ids) | {group_id}}
    return Fraction(weights[group_id], sum(weights.values()))


def _policy(policies: Mapping[str, GroupPolicy], group_id: str) -> GroupPolicy:
    return policies.get(group_id, DEFAULT_POLICY)


def _fits(needs: Resources, free: Resources) -> bool:
    return all(amount <= free.get(kind, 0) for kind, amount in needs.items())


def _reserve(current: tuple[str, str] | None, waiting: Mapping[str, Sequence[QueuedItem]],
             contenders: Mapping[str, list[QueuedItem]], free: Resources,
             capacity: Resources, now: datetime, order: Callable[[str], GroupOrder]
             ) -> tuple[tuple[str, str] | None, QueuedItem | None]:
    """(reservation, the reserved item or None). A reservation lasts while its item is
    queued with its gate open; a new one is made when the fairest contender's next item
    waits only for resources (it fits the declared capacity, not what is free now)."""
    if current is not None:
        group, item_id = current
        item = next((i for i in waiting.get(group, ())
                     if i.work_item_id == item_id and i.risk_gate_open), None)
        if item is not None:
            return current, item
    head = min(contenders, key=order)
    top = group_order(contenders[head], now)[0]
    if not _fits(top.resources, free) and _fits(top.resources, capacity):
        return (head, top.work_item_id), top
    return None, None


def _startable(contenders: Mapping[str, list[QueuedItem]], free: Resources,
               reserved: QueuedItem | None) -> dict[str, list[QueuedItem]]:
    """{group: items it may start now}: they fit, and none takes a kind the reserved
    item waits for (only the reserved item itself may)."""
    kinds = _kinds(reserved) if reserved is not None else set()
    options: dict[str, list[QueuedItem]] = {}
    for group, items in contenders.items():
        fitting = [i for i in items if _fits(i.resources, free)
                   and (i is reserved or not _kinds(i) & kinds)]
        if fitting:
            options[group] = fitting
    return options


def _free_resources(capacity: Resources, running: Iterable[Assignment]) -> dict[str, float]:
    free = dict(capacity)
    for assignment in running:
        for kind, amount in assignment.resources.items():
            free[kind] = free.get(kind, 0) - amount
    return free


def _kinds(item: QueuedItem) -> set[str]:
    return {kind for kind, amount in item.resources.items() if amount > 0}


def _order_key(passes: Mapping[str, Fraction], last_served: Mapping[str, int]
               ) -> Callable[[str], GroupOrder]:
    return lambda g: (passes[g], last_served.get(g, -1), g)


def schedule(slots: SlotTable, queues: Mapping[str, Sequence[QueuedItem]],
             policies: Mapping[str, GroupPolicy], resources: Resources, now: datetime,
             fairness: Fairness = Fairness(), limit: int | None = None) -> Decision:
    """Fill the free slots from the per-Group `queues` ({groupId: [QueuedItem]}).

    `policies` ({groupId: GroupPolicy}, default weight 1, class normal, no quota),
    `resources` ({kind: capacity}) the runtime's total; running assignments hold theirs.
    Items already running (same Group and WorkItem) are skipped. `limit` caps the number
    of decisions (e.g. one at a time while each work.start is confirmed)."""
    running_keys = {(a.group_id, a.work_item_id) for a in slots.running}
    waiting = {group: [i for i in items if (group, i.work_item_id) not in running_keys]
               for group, items in queues.items()}
    passes, last_served = dict(fairness.passes), dict(fairness.last_served)
    virtual_time, decisions = fairness.virtual_time, fairness.decisions
    reservation = fairness.reservation
    started: list[Assignment] = []
    for slot_id in slots.free[:limit]:
        running = slots.running
        free = _free_resources(resources, running)
        held: dict[str, int] = {}
        for assignment in running:
            held[assignment.group_id] = held.get(assignment.group_id, 0) + 1
        # Contenders: gate-open work, below quota. Resources decide among them below.
        contenders: dict[str, list[QueuedItem]] = {}
        for group, items in waiting.items():
            quota = _policy(policies, group).quota
            gated_open = [i for i in items if i.risk_gate_open]
            if gated_open and (quota is None or held.get(group, 0) < quota):
                contenders[group] = gated_open
        if not contenders:
            break
        for group in contenders:  # rejoin at the virtual time: no banked credit
            passes[group] = max(passes.get(group, virtual_time), virtual_time)
        order = _order_key(passes, last_served)
        reservation, reserved = _reserve(reservation, waiting, contenders, free, resources,
                                         now, order)
        options = _startable(contenders, free, reserved)
        if not options:
            break
        group = min(options, key=order)
        virtual_time = max(virtual_time, passes[group])
        if reserved is not None and reserved in options[group]:
            item, reservation = reserved, None  # its wait is over: it goes first
        else:
            item = group_order(options[group], now)[0]
        assignment = Assignment(
            slot_id=slot_id, group_id=group, mission_id=item.mission_id,
            work_item_id=item.work_item_id, ownership_epoch=item.ownership_epoch, started_at=now,
            resources=MappingProxyType(dict(item.resources)),
            tool_budget=_frozen_copy(dict(item.tool_budget)),
            checkpoint_ref=item.checkpoint_ref, expected_seconds=item.expected_seconds)
        slots = slots.assign(assignment)
        started.append(assignment)
        waiting[group] = [i for i in waiting[group] if i.work_item_id != item.work_item_id]
        passes[group] += Fraction(1, _policy(policies, group).effective_weight)
        last_served[group] = decisions
        decisions += 1
    return Decision(slots, tuple(started), Fairness(MappingProxyType(passes), virtual_time,
                                                    MappingProxyType(last_served), decisions,
                                                    reservation))


def _frozen_copy(value: Any) -> Any:  # a JSON value, copied read-only
    """A deep copy no other slot can reach or change."""
    if isinstance(value, dict):
        return MappingProxyType({k: _frozen_copy(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(_frozen_copy(v) for v in value)
    return value


def available_slots(slots: SlotTable) -> int:
    """What Presence reports as current capacity."""
    return len(slots.free)


def outlook(group_id: str, work_item_id: str, slots: SlotTable,
            queues: Mapping[str, Sequence[QueuedItem]], policies: Mapping[str, GroupPolicy],
            now: datetime, durations: Iterable[float] = (),
            accepting: bool = True) -> disclosure.Outlook:
    """The §11.2 facts about one item, reduced to what its own Group may know: its place
    in its Group's order, its Group's share (a number), the slots' free times and this
    Group's run durations. Other Groups enter only through those numbers."""
    slot_free_at = tuple(
        now if assignment is None else max(now, assignment.started_at + timedelta(
            seconds=assignment.expected_seconds or disclosure.DEFAULT_RUN_SECONDS))
        for _, assignment in slots.slots)
    running = next((a for a in slots.running
                    if (a.group_id, a.work_item_id) == (group_id, work_item_id)), None)
    if running is not None:
        return disclosure.Outlook(now=now, position=0, group_share=Fraction(1),
                                  slot_free_at=slot_free_at, durations=tuple(durations),
                                  started_at=running.started_at, accepting=accepting)
    running_keys = {(a.group_id, a.work_item_id) for a in slots.running}
    own = [i for i in queues.get(group_id, ())
           if (group_id, i.work_item_id) not in running_keys
           and (i.risk_gate_open or i.work_item_id == work_item_id)]
    order = [i.work_item_id for i in group_order(own, now)]
    if work_item_id not in order:
        raise KeyError(f"{work_item_id} is not queued in {group_id}")
    competing = [g for g, items in queues.items()
                 if any((g, i.work_item_id) not in running_keys for i in items)]
    return disclosure.Outlook(now=now, position=order.index(work_item_id),
                              group_share=share(group_id, policies, competing),
                              slot_free_at=slot_free_at, durations=tuple(durations),
                              accepting=accepting)
