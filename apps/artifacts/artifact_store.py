"""The §13 projections' repository, beside apps/work/work_store.py (which calls it): load
the artifacts and Context Package versions a command cites into the View, write what
`evolve` changed, and tell mw_verify where the live rows differ from the replay.
The only code that writes Artifact, ArtifactEdge and ContextPackage rows."""

from django.db import connection

from apps.ledger import db
from mission_weave.core.manifests import Refs
from mission_weave.protocol.timefmt import parse_time

from . import models

ARTIFACTS = models.Artifact._meta.db_table
EDGES = models.ArtifactEdge._meta.db_table
PACKAGES = models.ContextPackage._meta.db_table

ARTIFACT_COLUMNS = ["group_id", "hash", "origin", "mission_id", "work_item_id", "producer", "doc",
                    "recorded_at"]
EDGE_COLUMNS = ["group_id", "source", "derived"]
PACKAGE_COLUMNS = ["group_id", "package_id", "version", "mission_id", "work_item_id", "doc",
                   "published_at"]


def _in(column: str, values) -> tuple[str, list]:
    values = sorted(values)
    return f"{column} IN ({', '.join(['%s'] * len(values))})", values


def load_into(view, group_id: str, refs: Refs) -> None:
    """The cited artifacts, and the latest version of each cited package id."""
    if refs.artifacts:
        where, params = _in("hash", refs.artifacts)
        rows = db.fetch(f"SELECT doc FROM {ARTIFACTS} WHERE group_id = %s AND {where}",
                        [group_id, *params])
        _add_artifacts(view, rows)
    if refs.packages:
        where, params = _in("p.package_id", refs.packages)
        rows = db.fetch(f"SELECT p.doc FROM {PACKAGES} p WHERE p.group_id = %s AND {where} "
                        f"AND p.version = (SELECT max(q.version) FROM {PACKAGES} q "
                        "WHERE q.group_id = p.group_id AND q.package_id = p.package_id)",
                        [group_id, *params])
        _add_packages(view, rows)


def load_all_into(view, group_id: str) -> None:
    """Every artifact and package version of the Group, for mw_verify."""
    _add_artifacts(view, db.fetch(f"SELECT doc FROM {ARTIFACTS} WHERE group_id = %s", [group_id]))
    _add_packages(view, db.fetch(f"SELECT doc FROM {PACKAGES} WHERE group_id = %s", [group_id]))


def _add_artifacts(view, rows) -> None:
    for (doc,) in rows:
        doc = db.from_json(doc)
        view.artifacts[doc["hash"]] = doc


def _add_packages(view, rows) -> None:
    for (doc,) in rows:
        doc = db.from_json(doc)
        view.packages[(doc["id"], doc["version"])] = doc


def _time(text: str):
    return connection.ops.adapt_datetimefield_value(parse_time(text))


def changes(group_id: str, before, after) -> list:
    """Upserts of the changed artifact records; the edges of new artifacts; new package
    versions (immutable once written)."""
    statements = []
    artifacts = [r for key, r in after.artifacts.items() if before.artifacts.get(key) is not r]
    if artifacts:
        statements.append(db.upsert(ARTIFACTS, ("group_id", "hash"), ARTIFACT_COLUMNS,
                                    [artifact_values(group_id, r) for r in artifacts]))
        edges = [(group_id, source, r["hash"]) for r in artifacts
                 if r["hash"] not in before.artifacts for source in r["manifest"]["sources"]]
        if edges:
            statements.append(db.insert(EDGES, EDGE_COLUMNS, edges))
    versions = [r for key, r in after.packages.items() if before.packages.get(key) is not r]
    if versions:
        statements.append(db.insert(PACKAGES, PACKAGE_COLUMNS,
                                    [package_values(group_id, r) for r in versions]))
    return statements


def artifact_values(group_id: str, record: dict) -> tuple:
    manifest = record["manifest"]
    return (group_id, record["hash"], record["origin"], manifest["missionId"],
            manifest["workItemId"], manifest["producer"], db.to_json(record),
            _time(record["at"]))


def package_values(group_id: str, record: dict) -> tuple:
    scope = record["package"]["scope"]
    return (group_id, record["id"], record["version"], scope["missionId"],
            scope.get("workItemId"), db.to_json(record), _time(record["at"]))


def verify(group_id: str, replayed, live) -> list:
    """The differences between the replayed and the live §13 projections, as sentences."""
    problems = []
    for kind, name in (("artifacts", "artifact"), ("packages", "context package")):
        expected, actual = getattr(replayed, kind), getattr(live, kind)
        for key in sorted(set(expected) | set(actual), key=str):
            if key not in actual:
                problems.append(f"{name} {key} is in the log but not in the live table")
            elif key not in expected:
                problems.append(f"{name} {key} is in the live table but not in the log")
            elif expected[key] != actual[key]:
                problems.append(f"{name} {key} differs from its replay")
    edges = {(source, r["hash"]) for r in replayed.artifacts.values()
             for source in r["manifest"]["sources"]}
    stored = {tuple(edge) for edge in db.fetch(
        f"SELECT source, derived FROM {EDGES} WHERE group_id = %s", [group_id])}
    for source, derived in sorted(edges ^ stored):
        where = "the log" if (source, derived) in edges else "the live table"
        problems.append(f"provenance edge {source} -> {derived} is only in {where}")
    for row in models.Artifact.objects.filter(group_id=group_id):
        record = replayed.artifacts.get(row.hash)
        if record is not None and row.origin != record["origin"]:
            problems.append(f"artifact {row.hash}: column origin differs from its replay")
    return problems
