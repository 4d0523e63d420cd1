"""Group commit's leader and followers (apps/ledger/group_commit.py), with a commit
function of the test's own: every command gets its own outcome, batches form while one
runs, a batch never exceeds its maximum, and a failed batch fails only its own commands."""

import threading
import time

import pytest

from apps.ledger.group_commit import GroupCommit, Pending


def pending(n: int) -> Pending:
    return Pending("grp_demo", n, f"f{n}", {}, None)


def together(batches: list, seconds: float = 0.02, fail_when=None):
    def commit(batch):
        batches.append([p.command for p in batch])
        time.sleep(seconds)  # a transaction's round trips: others queue meanwhile
        if fail_when is not None and fail_when(batch):
            raise RuntimeError("the database went away")
        for p in batch:
            p.answer = ("answered", p.command)
    return commit


def submit_all(committer: GroupCommit, numbers) -> dict:
    outcomes, barrier = {}, threading.Barrier(len(numbers))

    def run(n):
        barrier.wait()
        try:
            outcomes[n] = committer.submit(pending(n))
        except RuntimeError as error:
            outcomes[n] = error

    threads = [threading.Thread(target=run, args=(n,)) for n in numbers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert not any(t.is_alive() for t in threads), "a command was left waiting"
    return outcomes


def test_each_command_gets_its_own_answer_and_commands_that_arrive_together_share_a_batch():
    batches = []
    committer = GroupCommit(together(batches), max_batch=32, wait_seconds=0)

    outcomes = submit_all(committer, range(16))

    assert outcomes == {n: ("answered", n) for n in range(16)}
    assert sorted(n for batch in batches for n in batch) == list(range(16))  # each once
    assert max(len(batch) for batch in batches) > 1  # they queued while one batch ran


def test_a_batch_takes_at_most_its_maximum():
    batches = []
    committer = GroupCommit(together(batches), max_batch=3, wait_seconds=0.01)

    submit_all(committer, range(12))

    assert all(len(batch) <= 3 for batch in batches)
    assert sorted(n for batch in batches for n in batch) == list(range(12))


def test_a_failed_batch_fails_its_own_commands_only_and_the_next_batch_goes_on():
    batches = []
    committer = GroupCommit(together(batches, fail_when=lambda batch: batch[0].command == 0),
                            max_batch=32, wait_seconds=0)

    first = committer.submit  # the first batch is command 0 alone, and it fails
    with pytest.raises(RuntimeError, match="went away"):
        first(pending(0))
    outcomes = submit_all(committer, range(1, 9))

    assert outcomes == {n: ("answered", n) for n in range(1, 9)}


def test_alone_a_command_is_its_own_batch():
    batches = []
    committer = GroupCommit(together(batches, seconds=0), max_batch=32, wait_seconds=0)

    assert [committer.submit(pending(n)) for n in range(3)] == \
        [("answered", 0), ("answered", 1), ("answered", 2)]
    assert batches == [[0], [1], [2]]
