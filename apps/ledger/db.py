"""A thin layer over Django's connection for the command hot path.

The ORM costs ~0.5 ms of Python per query to compile; a command needs a handful,
so the pipeline speaks SQL here instead, in statements a reader can check against
the models. Writes are batched: on PostgreSQL they go to the server in one round
trip in psycopg's pipeline mode, as server-side bound (and so preparable) statements.
"""

import json
import threading
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime

from django.db import connection
from django.db import transaction as django_transaction


class _Riding(threading.local):
    """This thread's `transaction()`: in one, BEGIN still to send, COMMIT sent."""

    active = begin = committed = False


_riding = _Riding()


@contextmanager
def transaction():
    """Django's `transaction.atomic`, whose BEGIN goes in the round trip of the first
    statements and whose COMMIT may go in the round trip of the last ones
    (`execute_batch(..., commit=True)`): a command's transaction costs two round trips,
    not four (issue 27).

    psycopg, left to itself, sends BEGIN in a round trip of its own, even in pipeline
    mode (it waits for the answer). So inside the block psycopg is in autocommit (it
    sends no BEGIN), and the first statement sent through this module carries an
    explicit BEGIN; a statement sent otherwise (the ORM) sends it first, alone (the
    execute wrapper). Django keeps its bookkeeping: the atomic block, on_commit
    callbacks, rollback on an error (psycopg's rollback asks the server's transaction
    status, not autocommit). Once COMMIT was sent the connection is idle: Django's own
    commit sends nothing and runs the on_commit callbacks, so nothing may raise in the
    block after it. Inside a caller's transaction it is a plain `atomic`."""
    if connection.in_atomic_block or not connection.get_autocommit():
        with django_transaction.atomic():
            yield
        return
    with django_transaction.atomic():
        connection.connection.autocommit = True  # idle, nothing sent yet: no round trip
        _riding.active = _riding.begin = True
        try:
            with connection.execute_wrapper(_begin_first):
                yield
        finally:
            _riding.active = _riding.begin = _riding.committed = False


def _begin_first(execute, sql, params, many, context):
    """A statement sent other than through this module in `transaction()`."""
    if _control():
        with connection.wrap_database_errors:
            connection.connection.execute("BEGIN")
    return execute(sql, params, many, context)


def _control(commit: bool = False) -> list:
    """The transaction control statements to send with the next ones: BEGIN if the
    `transaction()` sent none yet; COMMIT if asked for, in a `transaction()` and not
    in a savepoint of it."""
    if _riding.committed:
        raise RuntimeError("a statement after the transaction's COMMIT")
    control = ["BEGIN"] if _riding.begin else []
    _riding.begin = False
    if commit and _riding.active and len(connection.atomic_blocks) == 1:
        control.append("COMMIT")
    return control


def fetch(sql: str, params=()) -> list:
    return fetch_all([(sql, params)])[0]


def fetch_all(statements: list) -> list:
    """[rows, ...] of [(sql, params), ...] run in order, in one round trip (pipeline
    mode). Each statement starts when the one before it has finished, so a read after a
    lock sees what was committed before the lock was granted."""
    if not statements:
        return []
    begin = _control()
    if len(statements) == 1 and not begin:
        with connection.cursor() as cursor:
            cursor.execute(*statements[0])
            return [cursor.fetchall()]
    with ExitStack() as stack:
        cursors = [stack.enter_context(connection.cursor()) for _ in statements]
        with connection.wrap_database_errors:
            with connection.connection.pipeline():
                for control in begin:  # on the first cursor: its own statement follows
                    cursors[0].cursor.execute(control)
                for cursor, (sql, params) in zip(cursors, statements):
                    cursor.cursor.execute(sql, params)
            return [cursor.cursor.fetchall() for cursor in cursors]


class Many(tuple):
    """A statement run once per row: (sql for one row, [row, ...]). psycopg caches the
    parse of short queries only, so a multi-row statement of thousands of placeholders
    (a sweep's batch) is parsed afresh each time; one prepared single-row statement,
    pipelined row by row, is not. (Arrays through `unnest` measured no faster.)"""


MANY_ROWS = 64  # above this many rows, insert/upsert write row by row (see Many)


def execute_batch(statements: list, commit: bool = False) -> None:
    """Run [(sql, params), ...] in order, in one round trip (pipeline mode). With
    `commit`, in a `transaction()`: they are its last, and its COMMIT goes with them."""
    if not statements:
        return
    control = _control(commit)
    with connection.cursor() as cursor:
        with connection.wrap_database_errors, connection.connection.pipeline():
            if control[:1] == ["BEGIN"]:
                cursor.cursor.execute("BEGIN")
            for statement in statements:
                run = cursor.cursor.executemany if isinstance(statement, Many) \
                    else cursor.cursor.execute
                run(*statement)
            if control[-1:] == ["COMMIT"]:
                cursor.cursor.execute("COMMIT")
    _riding.committed = control[-1:] == ["COMMIT"]


def execute_as_one(statements: list, commit: bool = False) -> None:
    """Run [(sql, params), ...], INSERTs and UPDATEs none of which writes a row another
    writes, as one statement: all but the last as data-modifying WITH queries. A
    statement costs both sides of the wire (psycopg's bind and result handling,
    PostgreSQL's executor start and end) about as much as a small row's write; a
    command's writes are four or five.
    They share one snapshot and none reads what another writes, so nothing is seen
    differently; a constraint violation in any fails the statement, as it failed the
    batch. A row-by-row statement (Many) cannot be folded: those go as execute_batch.
    `commit` as execute_batch's."""
    if len(statements) < 2 or any(isinstance(s, Many) for s in statements):
        return execute_batch(statements, commit)
    *first, (last_sql, last_params) = statements
    sql = "WITH " + ", ".join(f"w{i} AS ({text} RETURNING 1)"
                             for i, (text, _params) in enumerate(first)) + " " + last_sql
    execute_batch([(sql, [p for _text, params in first for p in params] + list(last_params))],
                  commit)


def aware(moment):
    """A datetime read raw: aware as it comes, or naive UTC / ISO text (from JSON)."""
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    if isinstance(moment, datetime) and moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment


def to_json(value) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def from_json(value):
    """JSON columns come back as text (Django's jsonb loader), or parsed already."""
    return json.loads(value) if isinstance(value, (str, bytes)) else value


def upsert(table: str, key: tuple, columns: list, rows: list) -> tuple:
    """INSERT ... ON CONFLICT (key) DO UPDATE for `rows` (tuples in `columns` order)."""
    updates = ", ".join(f"{c} = excluded.{c}" for c in columns if c not in key)
    return insert(table, columns, rows,
                  f" ON CONFLICT ({', '.join(key)}) DO UPDATE SET {updates}")


def insert(table: str, columns: list, rows: list, suffix: str = "") -> tuple:
    """INSERT of `rows` (tuples in `columns` order), then `suffix`: one statement, or
    above MANY_ROWS rows one statement per row (Many)."""
    placeholders = "(" + ", ".join(["%s"] * len(columns)) + ")"
    head = f"INSERT INTO {table} ({', '.join(columns)}) VALUES "
    if len(rows) > MANY_ROWS:
        return Many((head + placeholders + suffix, list(rows)))
    sql = head + ", ".join([placeholders] * len(rows)) + suffix
    return sql, [value for row in rows for value in row]


def copy(table: str, columns: list, rows: list) -> None:
    """Insert many rows now with COPY (a fraction of the per-row cost of INSERT, on
    both sides of the wire)."""
    if not rows:
        return
    if _control():  # BEGIN, alone: COPY does not go in a pipeline
        with connection.wrap_database_errors:
            connection.connection.execute("BEGIN")
    with connection.cursor() as cursor, connection.wrap_database_errors:
        with cursor.cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as stream:
            for row in rows:
                stream.write_row(row)
