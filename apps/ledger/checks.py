"""`manage.py check` (and every start-up that runs the checks): each of the ledger's ports
is plugged in, with an implementation its Protocol describes (ports.unsatisfied). An
unplugged port would otherwise fail on the first command that needs it."""

from django.core import checks

from . import ports

UNPLUGGED, UNSATISFIED = "ledger.E001", "ledger.E002"


def ports_plugged(app_configs=None, parts: ports.Plugged | None = None, **kwargs) -> list:
    """An Error per port left unplugged or holding what its Protocol does not describe.
    `parts`: the ports to look at (default: those the apps plugged in)."""
    errors = []
    for problem in ports.unsatisfied(parts or ports.plugged):
        protocol = ports.PORTS.get(problem.port, ports.Subscriber)
        errors.append(checks.Error(
            problem.message, obj=f"apps.ledger.ports.{problem.port}",
            hint=None if problem.unplugged else
            f"apps.ledger.ports.{protocol.__name__} says what the ledger calls",
            id=UNPLUGGED if problem.unplugged else UNSATISFIED))
    return errors
