"""The review pipeline (§13.2) as Celery tasks, one per step, in order:

  check_integrity -> run_checks -> request_evidence -> evaluate

A `work.submitted` starts it (schedule(), after the commit); an `evidence.recorded`
schedules `evaluate` again. Each step gathers what it needs outside any lock, then
appends its event (actor `system`) through pipeline.submit_system, whose decision
(mission_weave/core/commands/review.py) re-checks under the Group lock that the item is still
`submitted` with the submission the task was scheduled for, and that the step is not
recorded yet. So every task is idempotent and safe to retry or run twice; one for an
item accepted, failed, cancelled or submitted again meanwhile appends nothing.

Redis is a hint: a task lost with its broker is found again by `resume` (beat), from
what the WorkItem's review lacks. That is also why schedule() does not send inside the
request: the answer does not wait for the broker (a Celery `delay` is a Redis round trip
and kombu's work, ~3 ms); a thread of the process sends, and an enqueue lost with the
process (killed before it sent) is a lost task like any other.

The review sits above `work` (tests/test_architecture.py): it reads the WorkItems from
work's store, and the artifacts' blobs and manifests (review_facts.py).
"""

import logging
import queue

from celery import current_app, shared_task
from django.db import DatabaseError
from django.utils import timezone

from apps.ledger import pipeline
from apps.ledger.hints import ProcessThread
from apps.work import work_store
from mission_weave.core import evidence_review
from mission_weave.core.commands.review import current_review, review_step

from . import review_facts

log = logging.getLogger(__name__)

# A database hiccup or an unreadable store is retried with backoff; the step is idempotent.
RETRY = {"autoretry_for": (DatabaseError, OSError), "retry_backoff": True,
         "retry_backoff_max": 60, "max_retries": 8, "ignore_result": True}


def schedule(group_id: str, documents: list) -> None:
    """After a commit: start the review of each new submission, and evaluate again when
    reviewer Evidence arrived; nothing for any other event. The sending is handed to
    SENDER's thread, so the request that committed does not wait for the broker. Never
    raises (the command is already committed)."""
    for document in documents:
        if document["type"] == "work.submitted":
            SENDER.send(check_integrity, group_id, document["workItemId"], document["revision"])
        elif document["type"] == evidence_review.EVIDENCE_RECORDED:
            revision = document["data"].get("submissionRevision")
            if revision is not None:
                SENDER.send(evaluate, group_id, document["workItemId"], revision)


def _enqueue(task, *args) -> None:
    try:
        task.delay(*args)
    except Exception:  # a lost task is resumed by beat; the committed command stands
        log.exception("could not schedule %s%r; `resume` will pick it up", task.name, args)


class Sender:
    """One daemon thread per process (ProcessThread) that does schedule()'s `delay`s, in
    order. Eager Celery (tests, the embedded stack without a broker) runs the task at once
    instead, as before: the answer then follows the review. What the thread has not sent
    when the process dies is lost, and found again by `resume`, as a task lost with Redis
    is; at a normal exit it is given ProcessThread.FLUSH_SECONDS to send what it holds."""

    def __init__(self) -> None:
        self._thread = ProcessThread("review-enqueue", self._run)

    def send(self, task, *args) -> None:
        if current_app.conf.task_always_eager:
            _enqueue(task, *args)
            return
        self._thread.put((task, args))

    @staticmethod
    def _run(work: queue.SimpleQueue) -> None:
        while (item := work.get()) is not None:
            task, args = item
            _enqueue(task, *args)  # logs, never raises: the thread lives on

    def flush(self) -> None:
        """Let the thread send what it holds (at exit; tests)."""
        self._thread.flush()


SENDER = Sender()


def _current(group_id: str, item_id: str, submission_revision: int):
    """The WorkItem if its review is still for this submission (read without a lock: the
    decision checks again under it)."""
    item = work_store.load_items(group_id, [item_id]).items.get(item_id)
    return item if current_review(item, submission_revision) is not None else None


def _append(group_id: str, item_id: str, submission_revision: int, event_type: str,
            outcome=None) -> list | None:
    return pipeline.submit_system(
        group_id, review_step(item_id, submission_revision, event_type, outcome),
        timezone.now(), lambda g: work_store.load_items_and_missions(g, [item_id]))


@shared_task(name="apps.review.tasks.check_integrity", **RETRY)
def check_integrity(group_id: str, item_id: str, submission_revision: int) -> None:
    """Step 1: every cited artifact stored and intact; required output schemas."""
    item = _current(group_id, item_id, submission_revision)
    if item is None:
        return
    if item.review["integrity"] is None:
        facts = review_facts.gather(group_id, evidence_review.artifact_hashes(item.submission),
                                    evidence_review.content_needed(item.contract, item.submission),
                                    verify=True, now=timezone.now())
        _append(group_id, item_id, submission_revision, evidence_review.INTEGRITY_CHECKED,
                lambda it: evidence_review.integrity(it.contract, it.submission, facts))
    _enqueue(run_checks, group_id, item_id, submission_revision)


@shared_task(name="apps.review.tasks.run_checks", **RETRY)
def run_checks(group_id: str, item_id: str, submission_revision: int) -> None:
    """Step 2: the contract's named deterministic checks."""
    item = _current(group_id, item_id, submission_revision)
    if item is None:
        return
    if item.review["checks"] is None:
        needed = {h for c in item.contract["acceptanceCriteria"] if evidence_review.check_method(c)
                  for h in evidence_review.criterion_artifacts(item.submission, c["id"])}
        facts = review_facts.gather(group_id, sorted(needed),
                                    evidence_review.content_needed(item.contract, item.submission),
                                    verify=False, now=timezone.now())
        _append(group_id, item_id, submission_revision, evidence_review.CHECKS_COMPLETED,
                lambda it: evidence_review.run_checks(it.contract, it.submission, facts))
    _enqueue(request_evidence, group_id, item_id, submission_revision)


@shared_task(name="apps.review.tasks.request_evidence", **RETRY)
def request_evidence(group_id: str, item_id: str, submission_revision: int) -> None:
    """Step 3: name the criteria that await reviewer Evidence."""
    if _current(group_id, item_id, submission_revision) is None:
        return
    _append(group_id, item_id, submission_revision, evidence_review.EVIDENCE_REQUESTED,
            lambda it: evidence_review.evidence_request(it.contract))
    _enqueue(evaluate, group_id, item_id, submission_revision)


@shared_task(name="apps.review.tasks.evaluate", **RETRY)
def evaluate(group_id: str, item_id: str, submission_revision: int) -> None:
    """Step 4: the combined evaluation, appended when it differs from the latest one."""
    if _current(group_id, item_id, submission_revision) is None:
        return
    _append(group_id, item_id, submission_revision, evidence_review.EVALUATED)


STEP_TASKS = {evidence_review.INTEGRITY_CHECKED: check_integrity,
              evidence_review.CHECKS_COMPLETED: run_checks,
              evidence_review.EVIDENCE_REQUESTED: request_evidence,
              evidence_review.EVALUATED: evaluate}


@shared_task(name="apps.review.tasks.resume", ignore_result=True)
def resume(limit: int = 500) -> int:
    """Beat: schedule the missing step of every submitted WorkItem whose review is behind
    (its task lost with the broker or with the process that was to send it, or never
    run), at most `limit` of them, the least recently updated first. Returns how many were
    scheduled. A step still in the broker is scheduled twice: the steps are idempotent."""
    scheduled = 0
    for group_id, item_id, current in work_store.submitted_reviews():
        step = evidence_review.next_step(current) if current else None
        if step is not None:
            _enqueue(STEP_TASKS[step], group_id, item_id, current["submissionRevision"])
            scheduled += 1
            if scheduled >= limit:
                break
    return scheduled
