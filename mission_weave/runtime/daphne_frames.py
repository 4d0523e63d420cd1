"""WebSocket frames through daphne without a log line formatted for each.

Daphne speaks WebSocket with autobahn, whose `sendData` formats the arguments of a debug
line (`hltype`, `hlval`: terminal colours through click) for every frame it writes,
whether debug logging is on or not. At 20,000 deliveries a second that is a tenth of
the fan-out's CPU. Here those two helpers give their argument back as it is: the debug
line, when someone turns it on, reads the same without colours.

Installed in a daphne process only (anywhere else this does nothing)."""

import sys

from mission_weave.runtime import patches

# What the patch was written for (mission_weave/runtime/patches.py): the names hltype and
# hlval imported into autobahn.websocket.protocol, which sendData calls for every frame.
WRITTEN_FOR = {"autobahn": ">=26.11,<27"}


def install() -> None:
    protocol = sys.modules.get("autobahn.websocket.protocol")  # loaded by daphne's server
    if protocol is None or "daphne.server" not in sys.modules \
            or getattr(protocol, "_mw_plain_logs", False):
        return
    for package, written_for in WRITTEN_FOR.items():
        patches.require(__name__, package, written_for)
    # setattr: names set on a module object that mypy only knows as a ModuleType.
    setattr(protocol, "hltype", _plain)
    setattr(protocol, "hlval", _plain)
    setattr(protocol, "_mw_plain_logs", True)


def _plain(value, *args, **kwargs):
    return value
