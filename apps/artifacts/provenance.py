"""The provenance graph of a Group's artifacts (§13.1): what an artifact was derived
from, transitively (ancestors), and what was derived from it (descendants). Two
recursive queries over the Group's edges; nothing of another Group is ever read."""

from apps.ledger import db
from mission_weave.protocol.errors import ProtocolError

from .artifact_store import ARTIFACTS, EDGES

# Each step follows the edges of this Group only; UNION drops repeats, so a diamond
# is walked once (the graph is acyclic: a source must exist before what cites it).
_WALK = (f"WITH RECURSIVE walk(hash) AS ("
         f"SELECT {{near}} FROM {EDGES} WHERE group_id = %s AND {{far}} = %s "
         f"UNION SELECT e.{{near}} FROM {EDGES} e JOIN walk w ON e.{{far}} = w.hash "
         f"WHERE e.group_id = %s) "
         f"SELECT a.doc FROM walk JOIN {ARTIFACTS} a ON a.group_id = %s AND a.hash = walk.hash "
         f"ORDER BY a.hash")


def record(group_id: str, name: str) -> dict:
    rows = db.fetch(f"SELECT doc FROM {ARTIFACTS} WHERE group_id = %s AND hash = %s",
                    [group_id, name])
    if not rows:
        raise ProtocolError("NOT_FOUND", f"no artifact {name} in this Group")
    return db.from_json(rows[0][0])


def _walk(group_id: str, name: str, near: str, far: str) -> list:
    sql = _WALK.format(near=near, far=far)
    return [db.from_json(doc) for (doc,) in db.fetch(sql, [group_id, name, group_id, group_id])]


def graph(group_id: str, name: str) -> dict:
    """{artifact, ancestors, descendants, edges: [{from, to}]}: `from` is the source,
    `to` what was derived from it; edges among the artifacts listed."""
    artifact = record(group_id, name)
    ancestors = _walk(group_id, name, "source", "derived")
    descendants = _walk(group_id, name, "derived", "source")
    nodes = sorted({name} | {r["hash"] for r in ancestors + descendants})
    marks = ", ".join(["%s"] * len(nodes))
    edges = db.fetch(f"SELECT source, derived FROM {EDGES} WHERE group_id = %s AND "
                     f"source IN ({marks}) AND derived IN ({marks}) ORDER BY derived, source",
                     [group_id, *nodes, *nodes])
    return {"artifact": artifact_document(artifact),
            "ancestors": [summary(r) for r in ancestors],
            "descendants": [summary(r) for r in descendants],
            "edges": [{"from": source, "to": derived} for source, derived in edges]}


def artifact_document(record: dict) -> dict:
    """The wire form of an artifact: its signed manifest and how it came to this Group."""
    return {"hash": record["hash"], "origin": record["origin"], "manifest": record["manifest"],
            "publishedBy": record["by"], "recordedAt": record["at"],
            "receivedFrom": record["receivedFrom"], "forwardedTo": record["forwardedTo"],
            "forwardingApprovals": record.get("forwardingApprovals", [])}


def summary(record: dict) -> dict:
    manifest = record["manifest"]
    return {"hash": record["hash"], "origin": record["origin"],
            "mediaType": manifest["mediaType"], "producer": manifest["producer"],
            "missionId": manifest["missionId"], "workItemId": manifest["workItemId"],
            "createdAt": manifest["createdAt"], "classification": manifest["classification"],
            "sources": manifest["sources"]}
