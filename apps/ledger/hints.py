"""After-commit hints: "this Group's log moved, look at it soon", off the request's thread.

The notifications and the webhooks read the log from cursors of their own (the log is
their outbox), so a commit only has to hint that a Group moved. `GroupHints` is one daemon
thread per process: `put(group_id)` queues the Group and returns at once (no query, no
broker); the thread takes every Group queued meanwhile as one round, keeps those
`watched()` says matter (re-read at most every `watched_seconds`, so a Group nobody can
be told about costs nothing more), and calls `send(group_id)` for each, once per round
however many commits it saw. After a round that sent something it pauses `pause_seconds`,
so a busy Group makes one task per pause rather than one per commit.

A hint is only a hint: one lost with its process, or with Redis, leaves a cursor behind
its Group's head, and the app's beat catch-up finds it. At a normal exit the thread gets
ProcessThread.FLUSH_SECONDS to send what it holds."""

import atexit
import logging
import os
import queue
import threading
import time
from collections.abc import Callable

from django.db import close_old_connections, connection

log = logging.getLogger(__name__)


class ProcessThread:
    """A queue that a daemon thread of this process drains with `run(queue)`, started on
    the first `put`, and again in a forked child (daphne's workers, the fault tests' fork
    server), which has the parent's queue but not its thread. `run` returns when it takes
    None: at a normal exit `flush` gives it FLUSH_SECONDS to send what it holds. What it
    holds when the process dies is lost; its users say how that is found again."""

    FLUSH_SECONDS = 2.0

    def __init__(self, name: str, run: Callable[[queue.SimpleQueue], None]) -> None:
        self.name, self._run = name, run
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        atexit.register(self.flush)

    def put(self, item) -> None:
        if self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():
                    self._queue = queue.SimpleQueue()
                    self._thread = threading.Thread(target=self._run, args=(self._queue,),
                                                    name=self.name, daemon=True)
                    self._thread.start()
                    self._pid = os.getpid()
        self._queue.put(item)

    def flush(self) -> None:
        if self._thread is not None and self._pid == os.getpid():
            self._queue.put(None)
            self._thread.join(self.FLUSH_SECONDS)
            self._pid = None  # a put after this starts a thread again


class GroupHints:
    """The hints of one app (the module's docstring says how a round goes)."""

    def __init__(self, name: str, send: Callable[[str], None],
                 watched: Callable[[], frozenset], watched_seconds: float = 5.0,
                 pause_seconds: float = 0.05) -> None:
        self.name, self._send, self._watched_now = name, send, watched
        self.watched_seconds, self.pause_seconds = watched_seconds, pause_seconds
        self._thread = ProcessThread(name, self._run)
        self._watched: frozenset = frozenset()
        self._read_at = 0.0

    def put(self, group_id: str) -> None:
        self._thread.put(group_id)

    def forget(self) -> None:
        """Re-read which Groups are watched before the next round."""
        self._read_at = 0.0

    def flush(self) -> None:
        self._thread.flush()

    def _run(self, work: queue.SimpleQueue) -> None:
        while (first := work.get()) is not None:
            groups, stop = {first}, False
            while True:  # the hints that queued meanwhile go in the same round
                try:
                    more = work.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                    break
                groups.add(more)
            sent = False
            try:
                for group_id in sorted(groups & self._watched_groups()):
                    self._send(group_id)
                    sent = True
            except Exception:  # the database or the broker away: the catch-up will do it
                log.exception("%s for %s lost; the catch-up will find them", self.name,
                              sorted(groups))
            finally:
                # This thread's connection goes back to the pool between rounds.
                close_old_connections()
                connection.close()
            if stop:
                return
            if sent:
                time.sleep(self.pause_seconds)

    def _watched_groups(self) -> frozenset:
        if time.monotonic() - self._read_at > self.watched_seconds:
            self._watched = self._watched_now()
            self._read_at = time.monotonic()
        return self._watched
