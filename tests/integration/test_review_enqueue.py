"""The review's tasks are sent to the broker off the request (issue 27): a committed
submission hands its first step to the process's sender thread (apps/review/tasks.py
SENDER), so the answer does not wait for Redis. An enqueue that never left the process
(it died first) is a lost task like one lost with Redis: beat's `resume` finds it from
what the WorkItem's review lacks, however many reviews wait for a person meanwhile."""

import threading

import pytest

from apps.ledger.models import Event
from apps.ledger.verify import verify_group
from apps.review import tasks
from mission_weave.celery import app as celery_app
from tests.faults.procs import wait_until
from tests.integration.artifact_helpers import submitted_json
from tests.support import Scenario, evidence

PIPELINE = ["work.submitted", "review.integrity_checked", "review.checks_completed",
            "review.evidence_requested", "review.evaluated"]

pytestmark = pytest.mark.usefixtures("blob_root")


def review_types(s: Scenario, item_id: str) -> list:
    return list(Event.objects.filter(group_id=s.world.group.id, work_item_id=item_id)
                .order_by("sequence").values_list("type", flat=True))


def review(s: Scenario, item_id: str) -> dict:
    return s.item(item_id)["review"]


@pytest.fixture
def lost(monkeypatch):
    """The process dies before its sender thread sends: what schedule() hands over is
    kept here and never reaches the broker."""
    handed = []
    monkeypatch.setattr(tasks.SENDER, "send", lambda task, *args: handed.append(
        (task.name, *args)))
    return handed


def test_the_answer_does_not_wait_for_the_broker_and_only_a_submission_sends(
        transactional_db, broker, monkeypatch):
    # A broker that does not answer until the test lets it: the submit's answer comes
    # anyway. Of all the scenario's commits only `work.submitted` sends anything.
    opened, sent = threading.Event(), []

    def slow_broker(task, *args):
        assert opened.wait(30), "the broker was never let go"
        sent.append((task.name, *args))

    monkeypatch.setattr(tasks, "_enqueue", slow_broker)
    s = Scenario()
    item_id, _ = submitted_json(s, {"title": "Q3", "words": 10})  # answered: not waiting
    assert sent == []

    opened.set()
    wait_until(lambda: sent, 10, "the sender thread's delay")
    revision = review(s, item_id)["submissionRevision"]
    assert sent == [("apps.review.tasks.check_integrity", s.world.group.id, item_id, revision)]


def test_a_review_whose_enqueue_was_lost_is_picked_up_by_resume(transactional_db, broker,
                                                                lost):
    s = Scenario()
    item_id, _ = submitted_json(s, {"title": "Q3", "words": 10})
    assert lost == [("apps.review.tasks.check_integrity", s.world.group.id, item_id,
                     review(s, item_id)["submissionRevision"])]
    assert review_types(s, item_id)[-1] == "work.submitted"  # nothing ran

    celery_app.conf.task_always_eager = True  # the worker beat's resume reaches
    assert tasks.resume.apply().get() == 1
    assert review_types(s, item_id)[-5:] == PIPELINE

    # Reviewer Evidence whose evaluation was lost the same way: evaluated by resume.
    celery_app.conf.task_always_eager = False
    reviewer = s.world.agent("rev-" + s.world.group.slug, roles=("reviewer",))
    reviewer.ok("evidence.record", {"evidence": [evidence(
        ["ac1"], producer=reviewer.principal, result="pass")]}, workItemId=item_id)
    assert lost[-1][0] == "apps.review.tasks.evaluate"
    seen = review(s, item_id)["evaluation"]["criteria"]
    assert not any(c["reviewerEvidence"] for c in seen)

    celery_app.conf.task_always_eager = True
    assert tasks.resume.apply().get() == 1
    criteria = review(s, item_id)["evaluation"]["criteria"]
    assert any(c["reviewerEvidence"] for c in criteria)
    assert tasks.resume.apply().get() == 0  # up to date: nothing more
    assert verify_group(s.world.group.id) == []


def test_reviews_waiting_for_a_person_do_not_hide_a_lost_one(
        db, eager, django_capture_on_commit_callbacks):
    # Reviewed submissions waiting for a Coordinator are the least recently updated; the
    # lost one is the newest. resume(limit=1) must still find it.
    s = Scenario()
    with django_capture_on_commit_callbacks(execute=True):
        waiting = [submitted_json(s, {"title": f"Q{n}", "words": 10})[0] for n in (1, 2)]
    assert all(review_types(s, w)[-1] == "review.evaluated" for w in waiting)
    item_id, _ = submitted_json(s, {"title": "Q3", "words": 10})  # no commit: no task

    assert tasks.resume.apply(kwargs={"limit": 1}).get() == 1
    assert review_types(s, item_id)[-5:] == PIPELINE


def test_the_sender_thread_outlives_a_failing_broker(broker, caplog):
    sent, done = [], threading.Event()

    class Task:
        name = "apps.review.tasks.example"

        @staticmethod
        def delay(*args):
            if args == (1,):
                raise ConnectionError("broker down")
            sent.append(args)
            done.set()

    tasks.SENDER.send(Task, 1)
    tasks.SENDER.send(Task, 2)

    assert done.wait(10)
    assert sent == [(2,)]
    assert "`resume` will pick it up" in caplog.text
