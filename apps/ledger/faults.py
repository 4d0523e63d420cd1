"""Crashes on purpose, for the fault tests (`make test-faults`, tests/faults/).

`MW_FAULT_POINT` names one point of the command transaction where this process kills
itself with SIGKILL (no cleanup, no rollback message: as the kernel's OOM killer would),
with probability `MW_FAULT_RATE` each time a command passes it. Unset, `reach` is one
attribute read. Never set in production: settings_production refuses it.
"""

import os
import random
import signal

from django.conf import settings

# Where a command transaction may be cut, in the order it passes them.
POINTS = ("before_append", "after_append", "before_commit")


def reach(point: str) -> None:
    if settings.MW_FAULT_POINT == point and random.random() < settings.MW_FAULT_RATE:
        os.kill(os.getpid(), signal.SIGKILL)
