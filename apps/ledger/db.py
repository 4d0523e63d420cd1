"""A thin layer over Django's connection for the command hot path.

The ORM costs ~0.5 ms of Python per query to compile; a command needs a handful,
so the pipeline speaks SQL here instead, in statements a reader can check against
the models. Writes are batched: on PostgreSQL they go to the server in one round
trip in psycopg's pipeline mode, as server-side bound (and so preparable) statements.
"""

import json

from django.db import connection


def is_postgres() -> bool:
    return connection.vendor == "postgresql"


def fetch(sql: str, params=()) -> list:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def execute_batch(statements: list) -> None:
    """Run [(sql, params), ...] in order: one round trip on PostgreSQL (pipeline mode)."""
    if not statements:
        return
    with connection.cursor() as cursor:
        if is_postgres():
            with connection.wrap_database_errors, connection.connection.pipeline():
                for sql, params in statements:
                    cursor.cursor.execute(sql, params)
        else:
            for sql, params in statements:
                cursor.execute(sql, params)


def to_json(value) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def from_json(value):
    """JSON columns come back as text from both backends (Django's jsonb loader)."""
    return json.loads(value) if isinstance(value, (str, bytes)) else value


def upsert(table: str, key: tuple, columns: list, rows: list) -> tuple:
    """INSERT ... ON CONFLICT (key) DO UPDATE for `rows` (tuples in `columns` order)."""
    placeholders = "(" + ", ".join(["%s"] * len(columns)) + ")"
    updates = ", ".join(f"{c} = excluded.{c}" for c in columns if c not in key)
    sql = (f"INSERT INTO {table} ({', '.join(columns)}) VALUES "
           + ", ".join([placeholders] * len(rows))
           + f" ON CONFLICT ({', '.join(key)}) DO UPDATE SET {updates}")
    return sql, [value for row in rows for value in row]


def insert(table: str, columns: list, rows: list) -> tuple:
    placeholders = "(" + ", ".join(["%s"] * len(columns)) + ")"
    sql = (f"INSERT INTO {table} ({', '.join(columns)}) VALUES "
           + ", ".join([placeholders] * len(rows)))
    return sql, [value for row in rows for value in row]
