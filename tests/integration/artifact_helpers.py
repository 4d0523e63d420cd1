"""Helpers for the §13 tests: upload bytes, build and sign manifests and Context
Packages, publish them through the HTTP API as the Scenario's agents, submit an item
with a JSON artifact for review."""

import hashlib
import json
import uuid

from apps.ledger.verify import verify_group
from mission_weave.protocol.canonical import sign
from mission_weave.protocol.timefmt import format_time
from tests.support import evidence, now

# The review contract's parts: a JSON summary with a schema; ac1 needs a reviewer, ac2 is
# a size check.
SCHEMA = {"type": "object", "required": ["title", "words"],
          "properties": {"title": {"type": "string"},
                         "words": {"type": "integer", "maximum": 500}}}
REVIEWED = {
    "deliverables": [{"id": "summary", "description": "The summary as JSON",
                      "mediaType": "application/json", "schema": SCHEMA}],
    "acceptanceCriteria": [
        {"id": "ac1", "description": "Covers every section of the report"},
        {"id": "ac2", "description": "At most 1 KiB", "method": "check:max-size:1024"}]}


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def upload(actor, data: bytes) -> str:
    name = digest(data)
    response = actor.client.put(f"/api/v1/blobs/{name}", data=data,
                                content_type="application/octet-stream",
                                HTTP_AUTHORIZATION=f"Bearer {actor.token}")
    assert response.status_code in (200, 201), response.content[:300]
    return name


def manifest(producer, mission_id: str, item_id: str | None, data: bytes, sources=(),
             **overrides) -> dict:
    """An unsigned manifest of `data` produced by the agent `producer` (an Actor)."""
    document = {
        "hash": digest(data), "mediaType": "text/markdown", "schema": None, "size": len(data),
        "producer": producer.name, "agentCardVersion": "1", "missionId": mission_id,
        "groupId": producer.world.group.id, "workItemId": item_id, "sources": list(sources),
        "versions": {"tool": "pandoc 3.1", "model": None, "capability": "summarize@1"},
        "createdAt": format_time(now()), "classification": "internal",
        "uri": f"https://files.example/{uuid.uuid4().hex}"}
    document.update(overrides)
    return document


def signed(document: dict, signer) -> dict:
    return sign(document, signer.key, signer.key_id)


def publish(scenario, item_id: str, data: bytes, sources=(), worker=None, upload_it=True,
            **overrides):
    """The lease holder of `item_id` uploads `data` and publishes its signed manifest;
    returns the response."""
    worker = worker or scenario.w1
    if upload_it:
        upload(worker, data)
    document = signed(manifest(worker, scenario.mission_id, item_id, data, sources, **overrides),
                      worker)
    return worker.send("artifact.publish", document, **scenario.lease_fields(item_id))


def published(scenario, item_id: str, data: bytes, sources=(), worker=None,
              **overrides) -> str:
    """publish(), which must succeed; the artifact's hash."""
    response = publish(scenario, item_id, data, sources, worker, **overrides)
    assert response.status_code == 200, response.json()
    return digest(data)


def submitted_json(scenario, document: dict, result: str = "pass") -> tuple[str, str]:
    """An item of the REVIEWED contract run by w1 and submitted with `document` as its one
    (JSON) artifact, and w1's Evidence saying `result` for ac1 and ac2: (item id, hash)."""
    item_id, _ = scenario.running(scenario.w1, **REVIEWED)
    name = published(scenario, item_id, json.dumps(document).encode(),
                     mediaType="application/json")
    scenario.w1.ok("work.submit", {"contractRevision": 1, "artifacts": [name], "evidence": [
        evidence(["ac1", "ac2"], artifacts=[name], result=result)]},
        **scenario.lease_fields(item_id))
    return item_id, name


def package(generator, mission_id: str, package_id: str = "pkg-1", version: int = 1,
            previous: int | None = None, artifacts=(), events=(1, 1), **overrides) -> dict:
    """A signed Context Package by the agent `generator`."""
    document = {
        "id": package_id, "version": version, "scope": {"missionId": mission_id},
        "sourceEvents": {"from": events[0], "to": events[1]}, "artifacts": list(artifacts),
        "decisions": ["use the Q3 figures"], "constraints": ["under 500 words"],
        "unresolvedQuestions": ["include Q2?"], "generator": generator.name,
        "createdAt": format_time(now())}
    if previous is not None:
        document["previousVersion"] = previous
    document.update(overrides)
    return signed(document, generator)


def assert_verified(*groups) -> None:
    for group in groups:
        assert verify_group(group.id) == []
