"""Crashes on purpose, for the fault tests (`make test-faults`, tests/faults/).

`MW_FAULT_POINT` names one point of the command transaction where this process kills
itself with SIGKILL (no cleanup, no rollback message: as the kernel's OOM killer would),
with probability `MW_FAULT_RATE` each time a command passes it. Unset, `reach` is one
attribute read. Never set in production: settings_production refuses it.

The points, in the order a command passes them (apps/ledger/pipeline.py `_answer`):

- `before_append`: decided and accepted, nothing written yet;
- `after_append`: the events, the head, the projections and the command record built,
  their pipeline not yet sent; since their COMMIT rides in the same round trip
  (db.transaction), there is no moment when they are written but not committed, so
  this point and the next are both reached just before that last pipeline is sent;
- `before_commit`: the last point before COMMIT (acceptances and recorded rejections
  alike): a kill here leaves an open transaction the server rolls back;
- `after_commit`: committed, the answer not sent: the client never learns the outcome,
  and its retry of the same command id must get the first answer (`duplicate: true`).
  The kill runs as an on-commit hook registered at `before_commit`, so it comes after the
  pipeline's own hooks (the publish), as a crash right after COMMIT would.
"""

import os
import random
import signal

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction

POINTS = ("before_append", "after_append", "before_commit", "after_commit")


def reach(point: str) -> None:
    chosen = settings.MW_FAULT_POINT
    if not chosen:
        return
    if chosen not in POINTS:
        raise ImproperlyConfigured(f"MW_FAULT_POINT must be one of {', '.join(POINTS)}, "
                                   f"not {chosen!r}")
    if chosen == "after_commit":
        if point == "before_commit" and random.random() < settings.MW_FAULT_RATE:
            transaction.on_commit(die)
        return
    if chosen == point and random.random() < settings.MW_FAULT_RATE:
        die()


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)
