"""Short questions to PostgreSQL that must never hang a probe or a scrape: a connection
from the process's pool within `timeout` seconds (Django's own wait is
MW_DB_POOL_TIMEOUT), each statement cut off after as long.

They run outside Django's connection handling, on a connection of their own, so they see
only what is committed."""

from contextlib import contextmanager

from django.db import connections

from apps.ledger.models import Group

TIMEOUT = 0.5  # seconds


@contextmanager
def cursor(timeout: float = TIMEOUT):
    pool = connections["default"].pool
    pool.open()  # a no-op once open (Django opens it on first use too)
    with pool.connection(timeout=timeout) as connection, connection.transaction():
        with connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL statement_timeout = {int(timeout * 1000)}")
            yield cursor


def ping() -> None:
    with cursor() as c:
        c.execute("SELECT 1")


def group_heads(group_ids) -> dict:
    """Group id -> head sequence."""
    with cursor() as c:
        c.execute(f"SELECT id, head_sequence FROM {Group._meta.db_table} WHERE id = ANY(%s)",
                  [list(group_ids)])
        return dict(c.fetchall())
