"""Distribute the migrated schema over a Citus cluster (docs/operations.md, "Past one
database"): the reference tables, then ledger_group by its id and every table of Group
data by group_id, co-located with it. Idempotent: what Citus has already is left as
it is. On a database without Citus it refuses and changes nothing."""

from django.core.management.base import CommandError
from django.db import connection

from apps.ledger.distribution import GROUPS, layout, unclassified
from apps.ledger.operator import OperatorCommand

# What every session of the database needs once its Group data is on shards:
# - the append-only triggers of the event log run on the shards (Citus calls such
#   triggers unsafe because it cannot check what they read; ours read the same Group's
#   rows, which are on the same node), and a later migration's triggers follow them;
# - SET LOCAL (archiving's mw.archiving, the sweeper's planner settings) reaches the
#   shards of the transaction, not only the coordinator.
DATABASE_SETTINGS = {"citus.enable_unsafe_triggers": "on",
                     "citus.propagate_set_commands": "local"}

# Each shard of these must carry its table's append-only trigger (ledger migrations
# 0002 and 0004).
APPEND_ONLY = ("ledger_event", "ledger_archivedevent")


class Command(OperatorCommand):
    help = ("Distribute the Groups' tables over the Citus cluster this database is the "
            "coordinator of: reference tables, then ledger_group by id and the Group data "
            "by group_id, co-located; the append-only triggers on the shards; the settings "
            "Citus needs. Checks the result in Citus' catalog and prints it. Safe to run "
            "again. Refuses (non-zero exit, nothing changed) without the Citus extension.")

    def run(self, **options):
        with connection.cursor() as cursor:
            database = _refusal_or_database(cursor)
            reference, distributed = layout(cursor)
            done = _citus_tables(cursor)
            created = {"reference": [], "distributed": []}
            for name, value in DATABASE_SETTINGS.items():
                cursor.execute(f'ALTER DATABASE "{database}" SET {name} = {value}')
                cursor.execute(f"SET {name} = {value}")  # this session too
            for table in reference:
                if table not in done:
                    cursor.execute("SELECT create_reference_table(%s)", [table])
                    created["reference"].append(table)
            for table in distributed:
                if table not in done:
                    column, colocated = ("id", "default") if table == GROUPS \
                        else ("group_id", GROUPS)
                    cursor.execute("SELECT create_distributed_table(%s, %s, "
                                   "colocate_with => %s)", [table, column, colocated])
                    created["distributed"].append(table)
            for table in reversed(distributed):
                # Their rows were copied to the shards: the coordinator's copy is dead
                # weight (only once no local table points at it: last, in reverse).
                cursor.execute("SELECT truncate_local_data_after_distributing_table(%s)",
                               [table])
            problems = _check(cursor, reference, distributed)
        result = {"database": database, "workers": _workers(), "created": created,
                  "reference": reference, "distributed": distributed,
                  "settings": DATABASE_SETTINGS, "ok": not problems, "problems": problems}
        if problems:
            self.stdout.write(str(result))
            raise CommandError(f"the distribution is not as it should be: {problems}")
        return result


def _refusal_or_database(cursor) -> str:
    cursor.execute("SELECT current_database(), EXISTS (SELECT 1 FROM pg_extension "
                   "WHERE extname = 'citus')")
    database, citus = cursor.fetchone()
    if not citus:
        raise CommandError(
            f"NOT_CITUS: database {database} has no Citus extension, so there is nothing to "
            f"distribute over; nothing was changed. On a Citus coordinator: CREATE EXTENSION "
            f"citus, citus_set_coordinator_host(...) and citus_add_node(...) for each worker "
            f"first (docs/operations.md, 'Past one database').")
    cursor.execute("SELECT count(*) FROM citus_get_active_worker_nodes()")
    if not cursor.fetchone()[0]:
        raise CommandError(f"NO_WORKERS: database {database} is a Citus coordinator with no "
                           f"worker nodes: add them with citus_add_node(host, port) first; "
                           f"nothing was changed.")
    missing = unclassified(cursor)
    if missing:
        raise CommandError(f"UNCLASSIFIED: {', '.join(missing)} neither have a group_id nor "
                           f"are reference tables (apps/ledger/distribution.py); nothing "
                           f"was changed.")
    return database


def _citus_tables(cursor) -> dict:
    """Table -> (kind, distribution column, co-location id), from Citus' catalog."""
    cursor.execute("SELECT p.logicalrelid::regclass::text, p.partmethod, "
                   "column_to_column_name(p.logicalrelid, p.partkey), p.colocationid "
                   "FROM pg_dist_partition p")
    return {table: (method, column, colocation)
            for table, method, column, colocation in cursor.fetchall()}


def _check(cursor, reference: list, distributed: list) -> list[str]:
    """What in Citus' own catalog differs from the layout; [] when all is as it should be."""
    done, problems = _citus_tables(cursor), []
    cursor.execute("SELECT table_name::text, citus_table_type FROM citus_tables")
    kinds = dict(cursor.fetchall())
    for table in reference:
        if kinds.get(table) != "reference":
            problems.append(f"{table} is {kinds.get(table, 'local')}, not a reference table")
    colocation = done.get(GROUPS, (None, None, None))[2]
    for table in distributed:
        method, column, colocated = done.get(table, (None, None, None))
        expected = "id" if table == GROUPS else "group_id"
        if (method, column, colocated) != ("h", expected, colocation):
            problems.append(f"{table} is not hash-distributed by {expected} co-located with "
                            f"{GROUPS}")
    for table in APPEND_ONLY:
        # Every placement of every shard, from the nodes themselves.
        cursor.execute("SELECT count(*) FILTER (WHERE NOT success OR result <> '1'), count(*) "
                       "FROM run_command_on_placements(%s, $$SELECT count(*) FROM pg_trigger "
                       "WHERE tgrelid = '%%s'::regclass AND tgname LIKE '%%%%append_only%%%%' "
                       "AND NOT tgisinternal$$)", [table])
        missing, placements = cursor.fetchone()
        if missing or not placements:
            problems.append(f"{table}: {missing} of {placements} shard placements lack the "
                            f"append-only trigger")
    return problems


def _workers() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT node_name || ':' || node_port FROM "
                       "citus_get_active_worker_nodes() ORDER BY 1")
        return [row[0] for row in cursor.fetchall()]
