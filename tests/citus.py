"""The suite on a Citus cluster (`make test-citus`): MW_CITUS_URL names a database on the
cluster's coordinator that has the extension and its workers (docs/operations.md, "Past
one database"), and the suite's DATABASE_URL is that coordinator.

pytest-django creates and migrates the test database (test_<name>, one per xdist worker)
on the coordinator alone; `prepare` then gives it the same shape as the cluster's: the
database and the extension on each worker, the coordinator and the workers registered
(Citus keeps its nodes per database), and `mw_distribute`. `forget` drops the workers'
copies at the end (pytest-django drops the coordinator's)."""

import os

import psycopg
from django.core.management import call_command
from django.db import connection

from apps.ledger import distribution

URL = os.environ.get("MW_CITUS_URL", "")

NODES = ("SELECT nodename, nodeport, groupid = 0 FROM pg_dist_node "
         "WHERE isactive AND noderole = 'primary' ORDER BY groupid")


def nodes() -> tuple[tuple[str, int], list[tuple[str, int]]]:
    """(coordinator, [worker, ...]) of the cluster MW_CITUS_URL belongs to."""
    with psycopg.connect(URL, autocommit=True) as cluster:
        rows = cluster.execute(NODES).fetchall()
    coordinators = [(host, port) for host, port, coordinator in rows if coordinator]
    workers = [(host, port) for host, port, coordinator in rows if not coordinator]
    assert coordinators and workers, f"{URL}: no coordinator or no workers in pg_dist_node"
    return coordinators[0], workers


def prepare() -> None:
    """Make the (migrated, empty) test database a distributed one."""
    name = connection.settings_dict["NAME"]
    coordinator, workers = nodes()
    for host, port in workers:
        with _admin(host, port) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{name}"')
        with _admin(host, port, name) as database:
            database.execute("CREATE EXTENSION citus")
    with connection.cursor() as cursor:
        cursor.execute("CREATE EXTENSION IF NOT EXISTS citus")
        cursor.execute("SELECT citus_set_coordinator_host(%s, %s)", coordinator)
        for worker in workers:
            cursor.execute("SELECT citus_add_node(%s, %s)", worker)
    distribution._asked.cache_clear()  # the answers of before, if any, were "no Citus"
    call_command("mw_distribute", stdout=open(os.devnull, "w"))  # noqa: SIM115
    connection.close_pool()  # new sessions read the database's new settings (mw_distribute)


def forget() -> None:
    name = connection.settings_dict["NAME"]
    for host, port in nodes()[1]:
        with _admin(host, port) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _admin(host: str, port: int, database: str = "postgres") -> psycopg.Connection:
    user = psycopg.conninfo.conninfo_to_dict(URL).get("user")
    return psycopg.connect(host=host, port=port, dbname=database, user=user, autocommit=True)
