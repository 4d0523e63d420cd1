""""Waiting on me" moved to the pure core, mission_weave/core/waiting.py (issue 28), so that
the notifications (apps/notify) send mail for exactly what the home page lists. The names
stay importable from here for the dashboard's modules."""

from mission_weave.core.waiting import ANCHORS, DONE, Waiting, waiting

__all__ = ["ANCHORS", "DONE", "Waiting", "waiting"]
