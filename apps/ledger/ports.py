"""The apps above the log, as the log sees them.

The ledger is the bottom of the shell: identity, artifacts, work and delivery import it,
never the reverse (tests/test_architecture.py). The one append pipeline still has to ask
who sent a command, load and write the projections, look up facts outside the log, and
tell others what was committed. Each app plugs its part in here from its
AppConfig.ready(), so that the log names none of them (docs/architecture.md):

    members      apps.identity.principals     who sent a command, and with which roles
    projections  apps.work.store              load the aggregate, write what evolve changed,
                                              and compare the live tables with a replay
    facts        apps.artifacts.facts         what a decision needs from outside the log
    answers      apps.work.capability_bearer  an answer's capability token bearer string
    local_hub    apps.delivery.hub.HUB        this process's WebSocket fan-out (no Redis)
    committed    [callable(group_id, events)] after each commit: the review's next step
"""

members = projections = facts = answers = local_hub = None
committed: list = []

_PARTS = ("members", "projections", "facts", "answers", "local_hub")


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
