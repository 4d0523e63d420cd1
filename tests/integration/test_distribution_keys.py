"""Group data can be distributed by group_id without a redesign (docs/operations.md,
"Scaling"): read from PostgreSQL's catalog of the migrated test database, every table
holds to Citus' rules for a distributed table or is declared a reference table.

- ledger_group is distributed by its id; every other table with a group_id column by
  group_id, of the same type (co-location) and never NULL;
- every primary key, unique constraint and unique index of a distributed table
  includes its distribution column (Citus can enforce it only then, on each shard);
- a foreign key between distributed tables maps the one's distribution column to the
  other's (so both rows live on the same shard); none goes from a reference table to
  a distributed one;
- any other table is in REFERENCE_TABLES (apps/ledger/distribution.py), with the reason
  it holds no Group's data.

A new table or constraint that breaks a rule fails here, named."""

import pytest
from django.db import connection

from apps.ledger.distribution import GROUPS, REFERENCE_TABLES

pytestmark = pytest.mark.django_db

TABLES = """
SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
 WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')"""

# Primary keys, unique constraints, exclusion constraints and unique indexes alike:
# their key columns (not INCLUDE columns, which are not part of the uniqueness).
UNIQUE_KEYS = """
SELECT t.relname, x.relname,
       array(SELECT pg_get_indexdef(i.indexrelid, k, true)
               FROM generate_series(1, i.indnkeyatts) k ORDER BY k)
  FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid JOIN pg_class x ON x.oid = i.indexrelid
  JOIN pg_namespace n ON n.oid = t.relnamespace
 WHERE n.nspname = current_schema() AND (i.indisunique OR i.indisexclusion)"""

FOREIGN_KEYS = """
SELECT t.relname, c.conname, r.relname,
       array(SELECT a.attname FROM unnest(c.conkey) WITH ORDINALITY k(attnum, n)
               JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
              ORDER BY k.n),
       array(SELECT a.attname FROM unnest(c.confkey) WITH ORDINALITY k(attnum, n)
               JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.attnum
              ORDER BY k.n)
  FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid JOIN pg_class r ON r.oid = c.confrelid
  JOIN pg_namespace n ON n.oid = t.relnamespace
 WHERE n.nspname = current_schema() AND c.contype = 'f'"""


def problems(reference_tables: dict = REFERENCE_TABLES) -> list[tuple]:
    """[(table, constraint or None, what is wrong)] in the current database."""
    with connection.cursor() as cursor:
        columns = {}
        for table, column, type_, not_null in _rows(cursor, TABLES):
            columns.setdefault(table, {})[column] = (type_, not_null)
        keys, foreign_keys = _rows(cursor, UNIQUE_KEYS), _rows(cursor, FOREIGN_KEYS)
    distributed = {table: "id" if table == GROUPS else "group_id" for table in columns
                   if table not in reference_tables
                   and (table == GROUPS or "group_id" in columns[table])}
    found = [(name, None, f"{name}: REFERENCE_TABLES names it, but there is no such table")
             for name in sorted(set(reference_tables) - set(columns))]
    for table in sorted(set(columns) - set(distributed) - set(reference_tables)):
        found.append((table, None, f"{table}: has no group_id column and is not in "
                      f"REFERENCE_TABLES: give it its Group, or declare it a reference "
                      f"table with the reason it holds no Group's data"))
    group_type = columns[GROUPS]["id"][0]
    for table in sorted(set(distributed) - {GROUPS}):
        type_, not_null = columns[table]["group_id"]
        if type_ != group_type:
            found.append((table, "group_id", f"{table}: group_id is {type_}, ledger_group.id "
                          f"{group_type}: co-located tables need the same type"))
        if not not_null:
            found.append((table, "group_id", f"{table}: group_id may be NULL: a distribution "
                          f"column may not"))
    for table, name, key in keys:
        column = distributed.get(table)
        if column is not None and column not in key:
            found.append((table, name, f"{table}: {name} ({', '.join(key)}) does not include "
                          f"{column}: a distributed table's keys must, or no shard can "
                          f"enforce them"))
    for table, name, target, key, target_key in foreign_keys:
        if table in distributed and target in distributed:
            if (distributed[table], distributed[target]) not in zip(key, target_key):
                found.append((table, name, f"{table}: {name} ({', '.join(key)}) -> {target} "
                              f"({', '.join(target_key)}) does not map {distributed[table]} "
                              f"to {target}.{distributed[target]}: its rows could live on "
                              f"another shard"))
        elif table in reference_tables and target in distributed:
            found.append((table, name, f"{table}: {name} references {target}, a distributed "
                          f"table: a reference table may not"))
    return found


def _rows(cursor, sql: str) -> list:
    cursor.execute(sql)
    return cursor.fetchall()


def test_every_table_of_group_data_is_keyed_by_its_group():
    found = {(table, name): message for table, name, message in problems()}
    broken = [message for _, message in sorted(found.items())]
    assert not broken, "\n".join(broken)


def test_a_table_that_breaks_a_rule_is_named_with_its_constraint():
    with connection.cursor() as cursor:
        # A Group table keyed by id alone, unique by a column alone, pointing at a Group
        # by another column; a table nobody classified; a reference table pointing at a
        # Group; a group_id of another type that may be NULL; and one that keeps every
        # rule, with a foreign key to a WorkItem through the WorkItem's (id, group_id).
        cursor.execute("""
            CREATE TABLE probe_item (id bigserial PRIMARY KEY,
                group_id varchar(100) NOT NULL REFERENCES ledger_group (id),
                code text UNIQUE, owner_group varchar(100) REFERENCES ledger_group (id));
            CREATE TABLE probe_loose (id bigserial PRIMARY KEY, note text);
            CREATE TABLE probe_shared (id bigserial PRIMARY KEY, name text UNIQUE,
                group_id varchar(100) REFERENCES ledger_group (id));
            CREATE TABLE probe_typed (group_id integer, k integer, UNIQUE (group_id, k));
            CREATE TABLE probe_good (id bigserial, group_id varchar(100) NOT NULL
                REFERENCES ledger_group (id), item bigint, PRIMARY KEY (id, group_id),
                FOREIGN KEY (item, group_id) REFERENCES work_workitem (id, group_id));
            CREATE UNIQUE INDEX probe_good_item ON probe_good (item) WHERE item > 0;
        """)
    found = problems({**REFERENCE_TABLES, "probe_shared": "a probe"})

    named = sorted((table, name) for table, name, _ in found if table.startswith("probe_"))
    assert named == [
        ("probe_good", "probe_good_item"),
        ("probe_item", "probe_item_code_key"),
        ("probe_item", "probe_item_owner_group_fkey"),
        ("probe_item", "probe_item_pkey"),
        ("probe_loose", None),
        ("probe_shared", "probe_shared_group_id_fkey"),
        ("probe_typed", "group_id"),
        ("probe_typed", "group_id"),
    ]
    messages = "\n".join(message for _, _, message in found)
    assert "probe_item: probe_item_pkey (id) does not include group_id" in messages
    assert "probe_item_owner_group_fkey (owner_group) -> ledger_group (id) does not map " \
           "group_id to ledger_group.id" in messages
    assert "probe_typed: group_id is integer, ledger_group.id character varying(100)" \
        in messages
    assert "probe_typed: group_id may be NULL" in messages
    assert "probe_shared: probe_shared_group_id_fkey references ledger_group" in messages
