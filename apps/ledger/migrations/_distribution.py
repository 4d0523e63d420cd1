"""The operations that make Group data distributable by group_id (docs/operations.md,
"Scaling"): Citus enforces a primary key or unique constraint of a distributed table
only if it includes the distribution column, and refuses to distribute a table with
one that does not. Shared by the apps' `*_distribution_keys` migrations; frozen
history like them (a leading underscore: the migration loader skips this module).

Each key is rebuilt without stopping writes: the new unique index is built
CONCURRENTLY (so the migrations using this are `atomic = False`), then swapped in
under the old constraint's name in one catalog change. A failed run leaves at most an
unused index, which the next run drops and builds again."""

from django.db import migrations


def _swap(table: str, constraint: str, kind: str, columns: tuple,
          previous: tuple) -> migrations.RunSQL:
    def statements(cols):
        index = f"{constraint}_swap"
        return [f"DROP INDEX CONCURRENTLY IF EXISTS {index}",
                f"CREATE UNIQUE INDEX CONCURRENTLY {index} ON {table} ({', '.join(cols)})",
                f"ALTER TABLE {table} DROP CONSTRAINT {constraint}, "
                f"ADD CONSTRAINT {constraint} {kind} USING INDEX {index}"]
    return migrations.RunSQL(statements(columns), statements(previous))


def primary_key_with_group(table: str) -> migrations.RunSQL:
    """PRIMARY KEY (id) -> (id, group_id), under the same name. Django's model state
    keeps `id` as the primary key (migrating a model to a CompositePrimaryKey is not
    supported, and the admin refuses such models): the ORM still reads and writes rows
    by id, unique by its sequence, and this index leads with id to serve it."""
    return _swap(table, f"{table}_pkey", "PRIMARY KEY", ("id", "group_id"), ("id",))


def unique_with_group(table: str, constraint: str, column: str) -> migrations.RunSQL:
    """UNIQUE (column) -> (column, group_id), under the same name: the database half
    of a UniqueConstraint whose fields gain the group (the model state's half is an
    AddConstraint beside it, in SeparateDatabaseAndState)."""
    return _swap(table, constraint, "UNIQUE", (column, "group_id"), (column,))
