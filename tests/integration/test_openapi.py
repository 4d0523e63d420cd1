"""The OpenAPI document describes the bodies (GET /api/v1/schema/), and the reference
pages (/api/v1/docs/, /api/v1/redoc/) serve it with local assets only.

The schemas are generated from the ones the server validates with (apps/api/openapi.py),
so these tests compare them with that source and with what the server really accepts
and answers, rather than with a copy."""

import re

import pytest
from django.contrib.staticfiles import finders
from django.test import Client
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate

from mission_weave.core import schemas as work
from mission_weave.core.commands import COMMAND_TYPES
from mission_weave.protocol.errors import HTTP_STATUS
from tests.integration.artifact_helpers import digest, manifest, package, signed
from tests.samples import contract
from tests.support import evidence

COMPONENTS = "#/components/schemas/"


@pytest.fixture(scope="module")
def document(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():
        response = Client().get("/api/v1/schema/?format=json")
    assert response.status_code == 200, response.content[:300]
    return response.json()


@pytest.fixture
def s(scenario):
    return scenario


def resolve(document, schema: dict) -> dict:
    while "$ref" in schema:
        assert schema["$ref"].startswith(COMPONENTS), schema
        schema = document["components"]["schemas"][schema["$ref"][len(COMPONENTS):]]
    return schema


def component(document, name: str) -> dict:
    schemas = document["components"]["schemas"]
    assert name in schemas, f"no component {name}"
    return schemas[name]


def validator(document, name: str) -> Draft202012Validator:
    """A JSON Schema 2020-12 validator for one component, its $refs resolved in the document
    (an OpenAPI 3.1 Schema Object is JSON Schema)."""
    return Draft202012Validator({"$ref": COMPONENTS + name, "components": document["components"]},
                                format_checker=Draft202012Validator.FORMAT_CHECKER)


def assert_valid(document, name: str, instance) -> None:
    problems = [f"{list(e.absolute_path)}: {e.message}"
                for e in validator(document, name).iter_errors(instance)]
    assert problems == [], problems


def operations(document):
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            yield path, method, operation


def json_schema(content: dict) -> dict | None:
    return (content or {}).get("application/json", {}).get("schema")


COMMANDS_PATH = "/api/v1/groups/{group_id}/commands"


# --- The document -----------------------------------------------------------------------------

def test_the_schema_endpoint_answers_openapi_3_1(document):
    assert document["openapi"].startswith("3.1")
    assert COMMANDS_PATH in document["paths"]


def test_the_document_is_valid_openapi(document):
    from drf_spectacular.validation import validate_schema

    validate_schema(document)  # drf-spectacular's copy of the OpenAPI 3.1 JSON Schema
    for _name, schema in document["components"]["schemas"].items():
        Draft202012Validator.check_schema(schema)  # each is a JSON Schema 2020-12, too


def test_openapi_spec_validator_accepts_the_document(document):
    validate(document)  # openapi-spec-validator: an independent reading of the spec


def test_no_json_body_or_answer_is_a_bare_object(document):
    for path, method, operation in operations(document):
        bodies = [json_schema(operation.get("requestBody", {}).get("content"))]
        bodies += [json_schema(answer.get("content")) for answer in operation["responses"].values()]
        for schema in filter(None, bodies):
            assert set(schema) == {"$ref"}, (path, method, schema)
            assert resolve(document, schema) != {"type": "object"}, (path, method)


def test_every_error_answer_is_the_envelope_with_codes_of_its_status(document):
    documented = 0
    for path, method, operation in operations(document):
        for status, answer in operation["responses"].items():
            if int(status) < 400:
                continue
            documented += 1
            assert json_schema(answer["content"]) == {"$ref": COMPONENTS + "ErrorEnvelope"}
            codes = re.findall(r"`([A-Z_]+)`", answer["description"])
            assert codes, (path, method, status)
            for code in codes:
                assert code in HTTP_STATUS, code
                # Only a stored blob that no longer matches is answered off its table status.
                assert HTTP_STATUS[code] == int(status) or (code, status) == (
                    "HASH_MISMATCH", "500"), (path, method, status, code)
        if path.startswith("/api/v1/groups/"):
            assert "`NOT_A_MEMBER`" in operation["responses"]["403"]["description"], path
    assert documented > 40


def test_every_error_code_is_in_the_envelope_enum(document):
    envelope = component(document, "ErrorEnvelope")
    assert envelope["required"] == ["error"]
    error = resolve(document, envelope["properties"]["error"])
    assert set(error["required"]) == {"code", "message", "details"}
    codes = resolve(document, error["properties"]["code"])["enum"]
    assert set(codes) == set(HTTP_STATUS)


# --- Commands ---------------------------------------------------------------------------------

def command_body_schema(document) -> dict:
    schema = json_schema(document["paths"][COMMANDS_PATH]["post"]["requestBody"]["content"])
    return resolve(document, schema)


def test_the_command_body_is_a_oneof_discriminated_by_type_over_every_command(document):
    envelope = command_body_schema(document)
    assert envelope != {"type": "object"}
    assert envelope["discriminator"]["propertyName"] == "type"
    mapping = envelope["discriminator"]["mapping"]
    assert set(mapping) == set(COMMAND_TYPES)
    assert sorted(v["$ref"] for v in envelope["oneOf"]) == sorted(mapping.values())
    for command_type, target in mapping.items():
        variant = resolve(document, {"$ref": target})
        assert variant["properties"]["type"] == {"type": "string", "enum": [command_type]}
        assert {"id", "type", "groupId", "actor", "issuedAt", "membershipEpoch",
                "body"} <= set(variant["required"])
        body = resolve(document, variant["properties"]["body"])
        assert body != {"type": "object"}, command_type
        source = work.BODIES[command_type]
        assert body.get("required", []) == source.get("required", []), command_type
        assert set(body.get("properties", {})) == set(source.get("properties", {}))


def test_body_components_are_shared_and_the_contract_is_the_work_contract(document):
    def body(command_type):
        variant = resolve(document, {"$ref": command_body_schema(document)["discriminator"][
            "mapping"][command_type]})
        return variant["properties"]["body"]

    assert body("artifact.publish") == {"$ref": COMPONENTS + "ArtifactManifest"}
    assert body("context.publish") == {"$ref": COMPONENTS + "ContextPackage"}
    for command_type in ("work.propose", "work.authorize", "work.revise_contract"):
        assert resolve(document, body(command_type))["properties"]["contract"] == {
            "$ref": COMPONENTS + "WorkContract"}
    submit = resolve(document, body("work.submit"))
    assert submit["properties"]["evidence"]["items"] == {"$ref": COMPONENTS + "Evidence"}


def test_work_contract_and_evidence_components_carry_their_required_fields(document):
    contract_schema = component(document, "WorkContract")
    assert contract_schema["required"] == work.CONTRACT.explainer.schema["required"]
    assert {"schema", "goal", "deliverables", "acceptanceCriteria", "dependencies",
            "capabilities", "deadline", "urgency", "businessImpact", "budgets", "retry",
            "risk"} <= set(contract_schema["required"])
    assert contract_schema["additionalProperties"] is False
    assert "$defs" not in contract_schema and "$id" not in contract_schema
    assert resolve(document, contract_schema["properties"]["budgets"])["properties"]
    evidence = component(document, "Evidence")
    assert evidence["required"] == work.EVIDENCE["required"]
    assert {"id", "subject", "criteria", "method", "result", "producer", "timestamp",
            "artifacts"} == set(evidence["required"])
    for name in ("ArtifactManifest", "ContextPackage", "Event", "CommandAnswer", "WorkItem",
                 "Mission"):
        assert component(document, name)["required"], name


def test_the_sample_contract_validates_and_a_broken_one_does_not(document):
    assert_valid(document, "WorkContract", contract())
    errors = list(validator(document, "WorkContract").iter_errors(contract(goal="", typo=1)))
    assert len(errors) == 2


def test_a_command_the_server_accepts_validates_against_the_document(document, s):
    envelope = s.c.envelope("work.authorize", {"missionId": s.mission_id,
                                               "contract": contract()})
    response = s.c.post(envelope)
    assert response.status_code == 200, response.json()
    assert_valid(document, "CommandEnvelope", envelope)
    assert_valid(document, "CommandAnswer", response.json())

    item_id = response.json()["events"][0]["workItemId"]
    offer = s.c.envelope("work.offer", {"candidates": [s.w1.name], "mode": "sequential",
                                        "expiresAt": "2030-01-01T00:00:00Z"},
                         workItemId=item_id)
    assert s.c.post(offer).status_code == 200
    assert_valid(document, "CommandEnvelope", offer)


def test_a_body_the_schema_refuses_the_server_refuses_too(document, s):
    envelope = s.c.envelope("work.authorize", {"missionId": s.mission_id})  # no contract
    assert list(validator(document, "CommandEnvelope").iter_errors(envelope))
    response = s.c.post(envelope)
    assert response.status_code == 400
    assert_valid(document, "ErrorEnvelope", response.json())


def test_the_reads_answer_as_the_document_says(document, s):
    item_id, _started = s.running()
    reads = {"WorkItem": f"work-items/{item_id}", "WorkItemList": "work-items",
             "AuditTrail": f"work-items/{item_id}/audit", "Review": f"work-items/{item_id}/review",
             "Mission": f"missions/{s.mission_id}", "MissionList": "missions",
             "EventsPage": "events", "ArchivePage": "archive", "Membership": "membership",
             "Cursor": "cursor"}
    for name, path in reads.items():
        for actor in (s.c, s.owner):
            response = actor.get(path)
            assert response.status_code == 200, (path, response.content[:200])
            assert_valid(document, name, response.json())
    authority = Client().get("/api/v1/authority")
    assert_valid(document, "AuthorityKeys", authority.json())
    outsider = Client().get(f"/api/v1/groups/{s.world.group.id}/work-items/{item_id}")
    assert outsider.status_code == 401
    assert_valid(document, "ErrorEnvelope", outsider.json())


@pytest.mark.usefixtures("blob_root")
def test_the_artifact_commands_and_reads_match_the_document(document, s):
    item_id, _started = s.running()
    data = b"# Q3 summary"
    stored = s.w1.client.put(f"/api/v1/blobs/{digest(data)}", data=data,
                             content_type="application/octet-stream",
                             HTTP_AUTHORIZATION=f"Bearer {s.w1.token}")
    assert stored.status_code == 201
    assert_valid(document, "StoredBlob", stored.json())
    publish = s.w1.envelope("artifact.publish",
                            signed(manifest(s.w1, s.mission_id, item_id, data), s.w1),
                            **s.lease_fields(item_id))
    assert s.w1.post(publish).status_code == 200
    assert_valid(document, "CommandEnvelope", publish)
    assert_valid(document, "ArtifactManifest", publish["body"])
    submit = s.w1.envelope("work.submit", {
        "contractRevision": 1, "artifacts": [digest(data)],
        "evidence": [evidence(["ac1", "ac2"], producer=s.w1.principal,
                              artifacts=[digest(data)])]}, **s.lease_fields(item_id))
    submitted = s.w1.post(submit)
    assert submitted.status_code == 200, submitted.json()
    assert_valid(document, "CommandEnvelope", submit)
    context = s.c.envelope("context.publish", package(s.c, s.mission_id))
    assert s.c.post(context).status_code == 200
    assert_valid(document, "CommandEnvelope", context)
    assert_valid(document, "ContextPackage", context["body"])
    reads = {"Artifact": f"artifacts/{digest(data)}",
             "Provenance": f"artifacts/{digest(data)}/provenance",
             "ContextPackageRecord": "context-packages/pkg-1",
             "ContextPackageEvents": "context-packages/pkg-1/events",
             "Review": f"work-items/{item_id}/review", "WorkItem": f"work-items/{item_id}"}
    for name, path in reads.items():
        response = s.c.get(path)
        assert response.status_code == 200, (path, response.content[:200])
        assert_valid(document, name, response.json())


# --- The reference pages ----------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/api/v1/docs/", "/api/v1/redoc/"])
def test_the_reference_page_uses_local_assets_only(db, path):
    response = Client().get(path)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    html = response.content.decode()
    assert not re.search(r"https?://", html), re.findall(r"https?://[^\"' ]+", html)
    assert "/api/v1/schema/" in html
    assets = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html)
    assert assets
    for asset in assets:
        assert asset.startswith("/static/drf_spectacular_sidecar/"), asset
        assert finders.find(asset[len("/static/"):]), f"{asset} is not a static file"
    if path == "/api/v1/docs/":
        assert '"validatorUrl": null' in html  # no badge fetched from validator.swagger.io
