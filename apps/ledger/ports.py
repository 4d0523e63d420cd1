"""The apps above the log, as the log sees them.

The ledger is the bottom of the shell: identity, artifacts, work and delivery import it,
never the reverse (tests/test_architecture.py). The one append pipeline still has to ask
who sent a command, load and write the projections, look up facts outside the log, and
tell others what was committed. Each app plugs its part in here from its
AppConfig.ready(), so that the log names none of them (docs/architecture.md):

    members      apps.identity.principals     who sent a command, and with which roles
    projections  apps.work.work_store              load the aggregate, write what evolve changed,
                                              and compare the live tables with a replay
    facts        apps.artifacts.facts         what a decision needs from outside the log
    answers      apps.work.capability_bearer  an answer's capability token bearer string
    local_hub    apps.delivery.hub.HUB        this process's WebSocket fan-out (no Redis)
    observer     apps.operations.observer     metrics and logs of what the pipeline and the
                                              WebSocket connections do (default: nothing)
    committed    [callable(group_id, events)] after each commit: the review's next step
"""


class Observer:
    """What the pipeline (and the delivery consumer) report as they work; this one
    ignores it all. Each call must be cheap and must never raise."""

    def command(self, group_id: str, envelope, principal, started: float, outcome) -> None:
        """A command was answered: `outcome` is the pipeline's Answer, or the exception
        it raised; `started` the time.perf_counter() when `submit` began."""

    def appended(self, seconds: float) -> None:
        """An accepted command's events were written: seconds from `decide` to the end of
        the write batch."""

    def lock_waited(self, seconds: float) -> None:
        """The round trip of the statement that took the Group lock (and the first read)."""

    def batched(self, size: int) -> None:
        """Group commit: a transaction decided `size` commands together."""

    def connection_opened(self, connection) -> None:
        """A WebSocket connection was accepted (apps/delivery/consumer.py)."""

    def connection_closed(self, connection) -> None:
        """A WebSocket connection ended (called for refused handshakes too)."""


members = projections = facts = answers = local_hub = None
observer: Observer = Observer()
committed: list = []

_PARTS = ("members", "projections", "facts", "answers", "local_hub", "observer")


def plug(**parts) -> None:
    """Plug in the named parts (once each, at start-up)."""
    for name, part in parts.items():
        if name not in _PARTS:
            raise TypeError(f"the ledger has no port {name!r} (it has {', '.join(_PARTS)})")
        globals()[name] = part


def subscribe(callback) -> None:
    """`callback(group_id, events)` after every commit that appended events."""
    if callback not in committed:
        committed.append(callback)
