"""Answers the schemathesis run found outside the OpenAPI document, pinned one by one.

- 429 RATE_LIMITED: every request under /api/v1/ counts against a rate limit
  (mission_weave/runtime/rate_limits.py), so every operation documents it, with its
  Retry-After header (apps/api/openapi.py `postprocess`).
- A blob name with a line break: the URL resolver's `<path:name>` stopped at it, so the
  request never reached the view that refuses a bad name, and the answer was a 404 that
  PUT does not document; blobs are routed with a converter that takes any text now
  (apps/api/urls.py)."""

import uuid

import pytest
import schemathesis
from django.test import Client
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.support import World, assert_error

CHECKS = [status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture
def app():
    from mission_weave.asgi import application

    return application


def test_every_operation_documents_its_rate_limit(db):
    document = Client().get("/api/v1/schema/?format=json").json()

    missing = [f"{method.upper()} {path}" for path, operations in document["paths"].items()
               for method, operation in operations.items()
               if "429" not in operation["responses"]]

    assert missing == []


@pytest.mark.django_db(transaction=True)
def test_a_rate_limited_answer_is_the_one_the_document_describes(app, settings):
    world = World()
    agent = world.agent(f"limited-{uuid.uuid4().hex[:8]}")  # counts kept in Redis stay its own
    settings.MW_RATE_READS_PER_PRINCIPAL = "1/hour"
    schema = schemathesis.openapi.from_asgi("/api/v1/schema/?format=json", app)
    case = schema["/api/v1/groups/{group_id}/events"]["GET"].Case(
        path_parameters={"group_id": world.group.id},
        headers={"Authorization": f"Bearer {agent.token}"})

    first, limited = case.call(), case.call()

    assert (first.status_code, limited.status_code) == (200, 429), limited.text
    assert limited.json()["error"]["code"] == "RATE_LIMITED"
    assert int(limited.headers["retry-after"][0]) >= 1
    case.validate_response(limited, checks=CHECKS)  # raises FailureGroup if undocumented


def test_a_blob_name_with_a_line_break_is_refused_as_a_bad_name(db):
    agent = World().agent("uploader")

    response = Client().put("/api/v1/blobs/sha256:%0Aabc", b"x",
                            content_type="application/octet-stream",
                            HTTP_AUTHORIZATION=f"Bearer {agent.token}")

    assert_error(response, 400, "VALIDATION_ERROR")
