"""Group commit: the commands that arrive together in one process are decided and
appended in one transaction, with one commit (one fsync) for all of them.

Leader and followers, no thread of its own: the first request thread to find no batch
under way leads; it takes what is queued (at most MW_GROUP_COMMIT_MAX, after waiting
MW_GROUP_COMMIT_WAIT_MS for more if that is set: before any lock is taken, so a batch
never holds a Group lock while it waits for input), runs `commit(batch)` and gives each
queued command its answer; commands that arrived meanwhile form the next batch, led by
the next thread. Each command still gets its own decision, answer and record.

Plain threading over an injected `commit`: the pipeline decides what a batch does.
"""

import threading
import time
from collections import deque
from dataclasses import dataclass, field


@dataclass(eq=False)
class Pending:
    """One command waiting for its batch: what `commit` needs, and its outcome."""

    group_id: str
    command: object
    fingerprint: str
    envelope: dict
    now: object
    principal: object = None
    member: object = None
    recheck: tuple | None = None  # a cached sender's statement for the locked read
    answer: object = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)
    lead: bool = False  # handed the leadership by the thread before

    def outcome(self):
        if self.error is not None:
            raise self.error
        return self.answer


class GroupCommit:
    def __init__(self, commit, max_batch: int, wait_seconds: float):
        self.commit, self.max_batch, self.wait_seconds = commit, max_batch, wait_seconds
        self._lock = threading.Lock()
        self._queue: deque = deque()
        self._leading = False

    def submit(self, pending: Pending):
        with self._lock:
            self._queue.append(pending)
            follow, self._leading = self._leading, True
        if follow:
            pending.done.wait()
            if not pending.lead:
                return pending.outcome()
            pending.done.clear()  # led by us from here: it is done when its batch is
        while not pending.done.is_set():
            self._run_one_batch()
        self._hand_on()
        return pending.outcome()

    def _run_one_batch(self) -> None:
        if self.wait_seconds:
            time.sleep(self.wait_seconds)
        with self._lock:
            batch = [self._queue.popleft() for _ in range(min(self.max_batch,
                                                              len(self._queue)))]
        try:
            self.commit(batch)
        except BaseException as error:  # each command hears why, none is left waiting
            for pending in batch:
                if pending.answer is None and pending.error is None:
                    pending.error = error
        for pending in batch:
            pending.done.set()

    def _hand_on(self) -> None:
        """Our command is answered: the next queued thread leads, or no one does."""
        with self._lock:
            if not self._queue:
                self._leading = False
                return
            successor = self._queue[0]
        successor.lead = True
        successor.done.set()
