"""db.transaction (issue 27): BEGIN goes with the first statements and COMMIT with the
last writes, while Django's atomic block keeps its meaning: whatever was sent before an
error is rolled back, on_commit callbacks run once it committed, and a statement that
does not go through apps/ledger/db.py (the ORM) is inside the transaction too."""

import pytest
from django.db import connection, transaction

from apps.ledger import db
from apps.ledger.models import Group
from tests.support import World

pytestmark = pytest.mark.django_db(transaction=True)


def _head(group_id: str) -> int:
    return Group.objects.get(id=group_id).head_sequence


def _bump(group_id: str) -> tuple:
    return ("UPDATE ledger_group SET head_sequence = head_sequence + 1 WHERE id = %s",
            [group_id])


def test_an_error_after_the_first_round_trip_rolls_everything_back():
    group = World().group
    with pytest.raises(RuntimeError), db.transaction():
        sql, params = _bump(group.id)
        assert db.fetch_all([("SELECT 1", []), (sql + " RETURNING head_sequence", params)]) \
            == [[(1,)], [(1,)]]
        db.execute_batch([_bump(group.id)])
        raise RuntimeError("a decision failed")
    assert _head(group.id) == 0
    assert connection.get_autocommit() and not connection.in_atomic_block


def test_a_failed_last_batch_rolls_back_and_runs_no_callback():
    group, called = World().group, []
    with pytest.raises(Exception, match="duplicate"), db.transaction():
        transaction.on_commit(lambda: called.append(True))
        db.execute_batch([_bump(group.id)])
        db.execute_as_one([_bump(group.id), ("INSERT INTO ledger_group SELECT * FROM "
                                             "ledger_group WHERE id = %s", [group.id])],
                          commit=True)
    assert _head(group.id) == 0 and called == []


def test_the_commit_that_rode_with_the_writes_runs_the_callbacks():
    group, called = World().group, []
    with db.transaction():
        transaction.on_commit(lambda: called.append(_head(group.id)))
        db.execute_as_one([_bump(group.id)], commit=True)
        assert connection.connection.info.transaction_status == 0  # idle: committed
    assert called == [1]


def test_an_orm_statement_first_is_inside_the_transaction():
    group = World().group
    with pytest.raises(RuntimeError), db.transaction():
        Group.objects.filter(id=group.id).update(head_sequence=7)
        db.execute_batch([_bump(group.id)])
        raise RuntimeError("undo")
    assert _head(group.id) == 0


def test_inside_a_callers_transaction_it_neither_begins_nor_commits():
    group = World().group
    with pytest.raises(RuntimeError), transaction.atomic():
        with db.transaction():
            db.execute_as_one([_bump(group.id)], commit=True)
        assert _head(group.id) == 1
        raise RuntimeError("the caller's transaction is undone, this write with it")
    assert _head(group.id) == 0
