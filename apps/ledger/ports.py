"""The apps above the log, as the log sees them.

The ledger is the bottom of the shell: identity, artifacts, work and delivery import it,
never the reverse (tests/test_architecture.py). The one append pipeline still has to ask
who sent a command, load and write the projections, look up facts outside the log, and
tell others what was committed. Each of those needs is a port: a `typing.Protocol` below,
which says what the ledger calls. Each app plugs its implementation in from its
AppConfig.ready() (`plug`), into `plugged`, so that the log names none of them
(docs/architecture.md):

    port         Protocol     plugged in by                what the ledger asks of it
    members      Members      apps.identity.principals     who sent a command, with which roles
    projections  Projections  apps.work.work_store         load the aggregate, write what
                                                           evolve changed, compare with a replay
    facts        Facts        apps.artifacts.facts         facts outside the log, for decisions
    answers      Answers      apps.work.capability_bearer  an answer's capability token bearer
    local_hub    LocalHub     apps.delivery.hub.HUB        this process's WebSocket fan-out
    observer     Observer     apps.operations.observer     metrics and logs of the pipeline and
                                                           the sockets (default: Unobserved)
    committed    [Subscriber] apps.review.tasks.schedule     after each commit: the review,
                              apps.notify.tasks.hint         the notifications and the
                              apps.webhooks.tasks.hint       webhooks (a hint to read the log)

`manage.py check` (apps/ledger/checks.py) refuses to pass while a port is unplugged or
holds something its Protocol does not describe (`unsatisfied`).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from mission_weave.core.commands import Command
    from mission_weave.core.state import View, WorkItem


class Members(Protocol):
    """Who sent a command (apps/identity/principals.py). `principal` is the
    authenticated sender; a membership has at least `roles` and `epoch`."""

    def membership(self, group_id: str, principal: Any, key_id: str | None = None) -> Any:
        """The sender's live membership of the Group (ProtocolError NOT_A_MEMBER if none)."""

    def check_envelope_identity(self, envelope: dict, principal: Any, member: Any,
                                signed: bytes, now: datetime) -> None:
        """The envelope's actor, signature, session and freshness (raises ProtocolError)."""

    def check_membership_epoch(self, member: Any, epoch: Any) -> None:
        """The envelope's membership epoch is the current one (raises ProtocolError)."""

    def cached(self, principal: Any) -> bool:
        """The principal was read from the session cache, not just now."""

    def afresh(self, group_id: str, principal: Any, now: datetime) -> Any:
        """A cached principal read again (ProtocolError if it no longer may ask), or
        None for one that was not cached."""

    def recheck(self, group_id: str, principal: Any, key_id: str | None) -> tuple | None:
        """For a cached principal: the statement to run in the Group's locked read that
        reads its session, membership and key again; None otherwise."""

    def confirm(self, principal: Any, member: Any, rows: list, key_id: Any,
                now: datetime) -> None:
        """`recheck`'s rows agree with what the principal was let in with (raises
        ProtocolError, as without the cache, otherwise)."""


class Projections(Protocol):
    """The projections of the log (apps/work/work_store.py)."""

    def load(self, group_id: str, command: Command) -> View:
        """What `decide` needs of the aggregate for `command`."""

    def load_after(self, group_id: str, command: Command,
                   ahead: list | None) -> tuple[list, View]:
        """`load`, after the statements `ahead` (the Group lock, a cached sender's
        recheck), in one round trip: ([the rows each of `ahead` returned], the view)."""

    def candidates(self, group_id: str, command: Command, view: View | None = None) -> dict:
        """The facts of the agents the command may place work with."""

    def changes(self, group_id: str, before: View, after: View) -> list:
        """The statements that write what `evolve` changed from `before` to `after`."""

    def differences(self, group_id: str, replayed: View) -> list:
        """mw_verify: every way the live tables differ from a replay of the log."""

    def item_patch(self, group_id: str, before: WorkItem, after: WorkItem) -> tuple:
        """The sweeper's prepared path: one changed WorkItem's patch (for patch_items)."""

    def versions(self, group_id: str, item_ids: list) -> dict:
        """{work item id: row version}, read under the Group lock."""

    def patch_items(self, patches: list) -> tuple:
        """The statement that writes `item_patch`es."""


class Facts(Protocol):
    """What a decision needs from outside the log (apps/artifacts/facts.py)."""

    def other_groups(self, command: Command) -> set:
        """The other Groups whose logs the command may append to (locked with its own)."""

    def load(self, group_id: str, command: Command, head_sequence: int) -> dict:
        """The facts `decide` reads for `command` (signer keys, stored blobs, ...)."""


class Answers(Protocol):
    """An accepted answer as the sender gets it (apps/work/capability_bearer.py)."""

    def with_bearer(self, group_id: str, body: dict, principal: Any) -> dict:
        """The answer with its capability token's bearer string, where it issued one."""


class LocalHub(Protocol):
    """Without Redis: this process's WebSocket fan-out (apps/delivery/hub.py)."""

    def events(self, group_id: str, documents: list) -> None:
        """Committed events of the Group, to this process's subscribers."""

    def membership_changed(self, group_id: str, principal: str) -> None:
        """The principal's open connections re-check their membership."""


class Observer(Protocol):
    """What the pipeline (and the delivery consumer) report as they work
    (apps/operations/observer.py). Each call must be cheap and must never raise.
    Subclassing it gives an observer that ignores what it does not override."""

    def command(self, group_id: str, envelope: Any, principal: Any, started: float,
                outcome: Any) -> None:
        """A command was answered: `outcome` is the pipeline's Answer, or the exception
        it raised; `started` the time.perf_counter() when `submit` began."""

    def appended(self, seconds: float) -> None:
        """An accepted command's events were written: seconds from `decide` to the end of
        the write batch."""

    def lock_waited(self, seconds: float) -> None:
        """The round trip of the statement that took the Group lock (and the first read)."""

    def batched(self, size: int) -> None:
        """Group commit: a transaction decided `size` commands together."""

    def connection_opened(self, connection: Any) -> None:
        """A WebSocket connection was accepted (apps/delivery/consumer.py)."""

    def connection_closed(self, connection: Any) -> None:
        """A WebSocket connection ended (called for refused handshakes too)."""


class Unobserved(Observer):
    """The observer until one is plugged in: it ignores everything."""


class Subscriber(Protocol):
    """Told, after each commit that appended events, what it appended (in order).
    Never raises: the commit stands."""

    def __call__(self, group_id: str, documents: list) -> None: ...


class Unplugged:
    """What a port holds until an app plugs its implementation in: any use of it says
    which port is missing (`manage.py check` says so before anything runs)."""

    def __init__(self, port: str):
        self.port = port

    def __getattr__(self, name: str):
        raise RuntimeError(f"the ledger's port {self.port!r} is not plugged in (asked for "
                           f".{name}): is the app that plugs it in INSTALLED_APPS?")

    def __repr__(self) -> str:
        return f"<unplugged port {self.port}>"


@dataclass
class Plugged:
    """The implementation plugged into each port, and the subscribers to commits."""

    members: Members = field(default_factory=partial(Unplugged, "members"))
    projections: Projections = field(default_factory=partial(Unplugged, "projections"))
    facts: Facts = field(default_factory=partial(Unplugged, "facts"))
    answers: Answers = field(default_factory=partial(Unplugged, "answers"))
    local_hub: LocalHub = field(default_factory=partial(Unplugged, "local_hub"))
    observer: Observer = field(default_factory=Unobserved)
    committed: list[Subscriber] = field(default_factory=list)


PORTS: dict[str, type] = {"members": Members, "projections": Projections, "facts": Facts,
                          "answers": Answers, "local_hub": LocalHub, "observer": Observer}

plugged = Plugged()


def plug(**parts) -> None:
    """Plug in the named parts (once each, at start-up): plug(members=principals)."""
    for name, part in parts.items():
        if name not in PORTS:
            raise TypeError(f"the ledger has no port {name!r} (it has {', '.join(PORTS)})")
        setattr(plugged, name, part)


def subscribe(callback: Subscriber) -> None:
    """`callback(group_id, events)` after every commit that appended events."""
    if callback not in plugged.committed:
        plugged.committed.append(callback)


def unsubscribe(callback: Subscriber) -> None:
    if callback in plugged.committed:
        plugged.committed.remove(callback)


def is_plugged(port: str) -> bool:
    return not isinstance(getattr(plugged, port), Unplugged)


@dataclass(frozen=True)
class Problem:
    port: str  # the port's name, or "committed" for a subscriber
    message: str
    unplugged: bool = False  # nothing plugged in, rather than the wrong thing


def unsatisfied(parts: Plugged) -> list[Problem]:
    """What is wrong with each port of `parts`: left unplugged, or holding something its
    Protocol does not describe (a method missing, not callable, or not taking the
    arguments the ledger passes); and with each subscriber likewise."""
    found = []
    for name, protocol in PORTS.items():
        part = getattr(parts, name)
        if isinstance(part, Unplugged) or part is None:
            found.append(Problem(name, f"the port {name!r} is not plugged in: the app that "
                                       f"implements {protocol.__name__} must call "
                                       f"ports.plug({name}=...) from its AppConfig.ready()",
                                 unplugged=True))
            continue
        found += [Problem(name, f"the port {name!r} holds {_named(part)}, which {problem}")
                  for problem in _mismatches(part, protocol)]
    for subscriber in parts.committed:
        found += [Problem("committed", f"the subscriber {_named(subscriber)} {problem}")
                  for problem in _mismatches(subscriber, Subscriber)]
    return found


def _named(part) -> str:
    name = getattr(part, "__qualname__", None) or type(part).__qualname__
    module = getattr(part, "__module__", None) or type(part).__module__
    return part.__name__ if inspect.ismodule(part) else f"{module}.{name}"


def _methods(protocol: type) -> dict:
    """The methods a Protocol declares (its own and its bases'), by name."""
    found = {}
    for klass in reversed(protocol.__mro__):
        if klass is object or klass is Protocol or not getattr(klass, "_is_protocol", False):
            continue
        found.update({name: value for name, value in vars(klass).items()
                      if inspect.isfunction(value) and (name == "__call__"
                                                        or not name.startswith("_"))})
    return found


def _mismatches(part, protocol: type) -> list[str]:
    problems = []
    for name, declared in _methods(protocol).items():
        method = part if name == "__call__" else getattr(part, name, None)
        if method is None:
            problems.append(f"has no {name}() ({protocol.__name__} asks for one)")
        elif not callable(method):
            problems.append(f"has a {name} that cannot be called")
        else:
            problems += _takes(method, declared, name, protocol)
    return problems


def _takes(method, declared, name: str, protocol: type) -> list[str]:
    """[] if `method` accepts the arguments `declared` (the Protocol's) names, each
    passed by position as the ledger passes them."""
    wanted = [p for p in list(inspect.signature(declared).parameters.values())[1:]
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    try:
        signature = inspect.signature(method)
    except (TypeError, ValueError):  # a builtin without a signature: take it on trust
        return []
    try:
        signature.bind(*wanted)
    except TypeError as error:
        said = ", ".join(p.name for p in wanted)
        return [f"cannot take {name}({said}) as {protocol.__name__} calls it: {error}"]
    return []

