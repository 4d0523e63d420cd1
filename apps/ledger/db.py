"""A thin layer over Django's connection for the command hot path.

The ORM costs ~0.5 ms of Python per query to compile; a command needs a handful,
so the pipeline speaks SQL here instead, in statements a reader can check against
the models. Writes are batched: on PostgreSQL they go to the server in one round
trip in psycopg's pipeline mode, as server-side bound (and so preparable) statements.
"""

import json
from contextlib import ExitStack
from datetime import UTC, datetime

from django.db import connection


def fetch(sql: str, params=()) -> list:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def fetch_all(statements: list) -> list:
    """[rows, ...] of [(sql, params), ...] run in order, in one round trip (pipeline
    mode). Each statement starts when the one before it has finished, so a read after a
    lock sees what was committed before the lock was granted."""
    if len(statements) < 2:
        return [fetch(sql, params) for sql, params in statements]
    with ExitStack() as stack:
        cursors = [stack.enter_context(connection.cursor()) for _ in statements]
        with connection.wrap_database_errors:
            with connection.connection.pipeline():
                for cursor, (sql, params) in zip(cursors, statements):
                    cursor.cursor.execute(sql, params)
            return [cursor.cursor.fetchall() for cursor in cursors]


class Many(tuple):
    """A statement run once per row: (sql for one row, [row, ...]). psycopg caches the
    parse of short queries only, so a multi-row statement of thousands of placeholders
    (a sweep's batch) is parsed afresh each time; one prepared single-row statement,
    pipelined row by row, is not. (Arrays through `unnest` measured no faster.)"""


MANY_ROWS = 64  # above this many rows, insert/upsert write row by row (see Many)


def execute_batch(statements: list) -> None:
    """Run [(sql, params), ...] in order, in one round trip (pipeline mode)."""
    if not statements:
        return
    with connection.cursor() as cursor:
        with connection.wrap_database_errors, connection.connection.pipeline():
            for statement in statements:
                run = cursor.cursor.executemany if isinstance(statement, Many) \
                    else cursor.cursor.execute
                run(*statement)


def execute_as_one(statements: list) -> None:
    """Run [(sql, params), ...], INSERTs and UPDATEs none of which writes a row another
    writes, as one statement: all but the last as data-modifying WITH queries. A
    statement costs both sides of the wire (psycopg's bind and result handling,
    PostgreSQL's executor start and end) about as much as a small row's write; a
    command's writes are four or five.
    They share one snapshot and none reads what another writes, so nothing is seen
    differently; a constraint violation in any fails the statement, as it failed the
    batch. A row-by-row statement (Many) cannot be folded: those go as execute_batch."""
    if len(statements) < 2 or any(isinstance(s, Many) for s in statements):
        return execute_batch(statements)
    *first, (last_sql, last_params) = statements
    sql = "WITH " + ", ".join(f"w{i} AS ({text} RETURNING 1)"
                             for i, (text, _params) in enumerate(first)) + " " + last_sql
    execute_batch([(sql, [p for _text, params in first for p in params] + list(last_params))])


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
    with connection.cursor() as cursor, connection.wrap_database_errors:
        with cursor.cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as stream:
            for row in rows:
                stream.write_row(row)
