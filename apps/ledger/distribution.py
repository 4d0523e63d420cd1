"""Groups distributed by group_id on Citus (docs/operations.md, "Past one database").

Which table is which, read from PostgreSQL's catalog: `ledger_group` is distributed by
its id, every other table with a `group_id` column by group_id, co-located with it (so
all of a Group's rows live on one node); the tables of REFERENCE_TABLES, which hold no
Group's data, are copied to every node. tests/integration/test_distribution_keys.py holds
the schema to the rules this needs; `manage.py mw_distribute` applies it.

`on_citus()` says whether the database has Citus, asked once per process and database:
the few places that differ on Citus (a group-commit batch's locks, the sweeper's claims)
pay nothing per command."""

from functools import cache

from django.db import connection

GROUPS = "ledger_group"  # the tenant table: distributed by its own id

# Replicated to every node as Citus reference tables: no Group's data, read beside any
# Group's. Django's own are here too, so that a foreign key between two of them (and
# the joins of the admin and the auth middleware) stay on one node wherever they run.
REFERENCE_TABLES = {
    "identity_agent": "an Agent belongs to no Group; read by every Group's commands",
    "identity_agentkey": "an Agent's keys, not a Group's",
    "identity_agentsession": "an Agent's sessions, read with the membership on each request",
    "identity_sessionnonce": "an Agent's used nonces, not a Group's",
    "identity_presence": "an Agent's capacity report, the same in every Group",
    "artifacts_blob": "bytes named by their hash, shared by every Group that cites them",
    "artifacts_blobupload": "who uploaded a blob: the blob's, not a Group's",
    "auth_user": "people, each a member of any number of Groups",
    "identity_oidcidentity": "who a person is at the OpenID provider: the user's, not a Group's",
    "auth_group": "Django's permission groups, not MissionWeave Groups",
    "auth_group_permissions": "its group_id is a Django permission group's",
    "auth_user_groups": "its group_id is a Django permission group's",
    "auth_permission": "Django's permissions",
    "auth_user_user_permissions": "Django's permissions",
    "django_content_type": "Django's model registry",
    "django_migrations": "Django's migration record",
    "django_session": "browser sessions, of users, not of a Group",
    "django_admin_log": "operators' admin actions across Groups",
}

TABLES = """
SELECT c.relname, array_agg(a.attname::text)
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
 WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')
 GROUP BY c.relname"""

REFERENCES = """
SELECT t.relname, r.relname
  FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid JOIN pg_class r ON r.oid = c.confrelid
  JOIN pg_namespace n ON n.oid = t.relnamespace
 WHERE n.nspname = current_schema() AND c.contype = 'f' AND t.oid <> r.oid"""


def layout(cursor) -> tuple[list[str], list[str]]:
    """(reference tables, distributed tables) of the current schema, each list in an
    order Citus accepts: a table after the tables its foreign keys point at. Only the
    tables that exist; ledger_group first among the distributed."""
    columns = dict(_rows(cursor, TABLES))
    targets: dict[str, set] = {}
    for table, target in _rows(cursor, REFERENCES):
        targets.setdefault(table, set()).add(target)
    reference = [t for t in columns if t in REFERENCE_TABLES]
    distributed = [t for t in columns if t not in REFERENCE_TABLES
                   and (t == GROUPS or "group_id" in columns[t])]
    return _ordered(reference, targets), _ordered(distributed, targets)


def unclassified(cursor) -> list[str]:
    """The tables of the current schema that are neither: mw_distribute refuses them."""
    reference, distributed = layout(cursor)
    return sorted(set(dict(_rows(cursor, TABLES))) - set(reference) - set(distributed))


def _ordered(tables: list[str], targets: dict) -> list[str]:
    """Depth first: each table after those of `tables` it points at (sorted for a
    stable order; a cycle is left to Citus to refuse)."""
    done: list[str] = []

    def visit(table, seen=()):
        if table in done or table in seen:
            return
        for target in sorted(targets.get(table, ())):
            if target in tables:
                visit(target, (*seen, table))
        done.append(table)

    for table in sorted(tables, key=lambda t: (t != GROUPS, t)):
        visit(table)
    return done


def _rows(cursor, sql: str) -> list:
    cursor.execute(sql)
    return cursor.fetchall()


def on_citus() -> bool:
    """Whether the default database has the Citus extension."""
    return _asked(connection.settings_dict["NAME"],
                  "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')")


def on_coordinator() -> bool:
    """Whether this process talks to the node that holds the cluster's session state:
    always on one PostgreSQL; on Citus only the coordinator (Citus lets any node take
    queries, but an advisory lock taken on a worker is that worker's alone)."""
    return not on_citus() or _asked(connection.settings_dict["NAME"],
                                    "SELECT citus_is_coordinator()")


@cache
def _asked(database: str, question: str) -> bool:
    """The answer to a yes-no query, once per process and database (by its name: the
    test database is another)."""
    with connection.cursor() as cursor:
        cursor.execute(question)
        return cursor.fetchone()[0]
