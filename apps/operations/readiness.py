"""GET /readyz: can this process serve? PostgreSQL answers, Redis answers (when there
is one: REDIS_URL, or the primary REDIS_SENTINELS name), and every migration is applied.
Each check answers "ok" or why not, within well under a second even when a service is
down."""

from django.db import connections
from django.db.migrations.executor import MigrationExecutor

from mission_weave.runtime import redis_connections

from . import fastdb
from .collectors import redis_client

MAX_REASON = 300  # characters of an error's text in the answer

# Once every migration was found applied, this process stops looking: a release applies
# its migrations before its processes start (docs/operations.md, Processes).
_migrated = False


def checks() -> dict:
    """{part: "ok" or the reason it is not}."""
    results = {"postgres": _reason(fastdb.ping)}
    if redis_connections.configured():
        results["redis"] = _reason(lambda: redis_client().ping())
    results["migrations"] = (migrations() if results["postgres"] == "ok"
                             else "not checked: PostgreSQL is unavailable")
    return results


def migrations() -> str:
    global _migrated
    if _migrated:
        return "ok"
    try:
        executor = MigrationExecutor(connections["default"])
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except Exception as error:
        return _describe(error)
    if plan:
        names = [f"{migration.app_label}.{migration.name}" for migration, _ in plan]
        return f"{len(names)} not applied: {', '.join(names)}"[:MAX_REASON]
    _migrated = True
    return "ok"


def _reason(check) -> str:
    try:
        check()
    except Exception as error:
        return _describe(error)
    return "ok"


def _describe(error: Exception) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return f"{type(error).__name__}: {text}"[:MAX_REASON]
