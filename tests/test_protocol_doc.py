"""docs/protocol.md stays true to the code: every command type, event type, error code
and REST route the server knows is documented, each error code with the HTTP status
sdk/src/mission_weave/protocol/errors.py gives it, and every example marked `<!-- check: ... -->`
passes the server's own validation. Pure imports, no database."""

import json
import re
from pathlib import Path

import pytest

from apps.ledger.envelope import check_envelope
from mission_weave.core import commands
from mission_weave.core.evolve import MUTATORS
from mission_weave.core.jsonschema_check import check, compile_schema
from mission_weave.core.schemas import EVIDENCE, check_body, check_contract
from mission_weave.protocol.canonical import (
    content_hash,
    private_key_from_b64url,
    public_key_b64url,
    public_key_from_b64url,
    verify,
    without,
)
from mission_weave.protocol.errors import HTTP_STATUS

DOC_PATH = Path(__file__).resolve().parent.parent / "docs" / "protocol.md"
DOC = DOC_PATH.read_text()

# The worked signature example's test key: the 32-byte seed 0, 1, ..., 31.
TEST_SEED = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8"


def headings() -> list:
    return [line for line in DOC.splitlines() if line.startswith("#")]


def test_every_command_type_has_a_section_of_its_own():
    documented = "\n".join(h for h in headings() if h.startswith("####"))
    missing = [t for t in commands.COMMAND_TYPES if f"`{t}`" not in documented]
    assert not missing, f"docs/protocol.md has no `#### ` section for {missing}"


def test_every_event_type_is_named():
    # `work.offered` alone, or with its data: `work.offered {offers, mode, ...}`
    missing = [t for t in MUTATORS if not re.search(f"`{re.escape(t)}[`\\s]", DOC)]
    assert not missing, f"docs/protocol.md does not name the event types {missing}"


ERROR_ROW = re.compile(r"^\|\s*(\d{3})\s*\|\s*`([A-Z_]+)`\s*\|", re.M)


def test_every_error_code_is_in_the_errors_table_with_its_http_status():
    rows = {}
    for status, code in ERROR_ROW.findall(DOC):
        rows.setdefault(code, set()).add(int(status))
    missing = sorted(set(HTTP_STATUS) - set(rows))
    assert not missing, f"docs/protocol.md has no `| <status> | `CODE` |` row for {missing}"
    wrong = {code: (statuses, HTTP_STATUS[code]) for code, statuses in rows.items()
             if code in HTTP_STATUS and statuses != {HTTP_STATUS[code]}}
    assert not wrong, f"rows whose HTTP status differs from errors.py (doc, code): {wrong}"
    unknown = sorted(set(rows) - set(HTTP_STATUS))
    assert not unknown, f"the errors table lists codes the server does not have: {unknown}"


def _route_pattern(route: str) -> re.Pattern:
    """A Django route as the doc writes it: `<id:hash>` and `<text:name>` as
    `sha256:<hex>`, any other `<...>` as `{...}`."""
    parts = re.split(r"(<[^>]+>)", route)
    regex = ""
    for part in parts:
        if part.startswith("<"):
            regex += r"(?:\{[^}/]+\}|sha256:<hex>)"
        else:
            regex += re.escape(part)
    return re.compile(re.escape("/api/v1/") + regex + r"(?![\w/-])")


def test_every_rest_route_is_documented():
    from apps.api.urls import urlpatterns

    missing = [str(p.pattern) for p in urlpatterns
               if not _route_pattern(str(p.pattern)).search(DOC)]
    assert not missing, f"docs/protocol.md does not document the routes {missing}"


def test_the_websocket_route_and_frames_are_documented():
    from mission_weave.routing import websocket_urlpatterns

    for pattern in websocket_urlpatterns:
        assert f"/{pattern.pattern}" in DOC
    for op in ("SUBSCRIBE", "EVENT", "ACK", "COMMAND", "RESULT", "ERROR"):
        assert f'"op":"{op}"' in DOC, op


def test_the_differences_section_comes_last():
    sections = [h for h in headings() if h.startswith("## ")]
    assert sections[-1] == "## Where this server differs from PROTOCOL.md"


# --- the examples marked `<!-- check: KIND -->` -----------------------------------------------

MARKED = re.compile(r"<!-- check: ([^>]+?) -->\n```json\n(.*?)\n```", re.S)
JSON_BLOCK = re.compile(r"```json\n(.*?)\n```", re.S)
EVIDENCE_CHECK = compile_schema(EVIDENCE)
CONTRACT_BODIES = ("work.propose", "work.authorize", "work.revise_contract")


def _agent_card(document):
    from apps.identity.registry import AGENT_CARD

    check(AGENT_CARD, document, "VALIDATION_ERROR", "Agent Card")


def _envelope(document):
    check_envelope(document, document["groupId"])
    check_body(document["type"], document["body"])
    public_key = public_key_b64url(private_key_from_b64url(TEST_SEED))
    assert verify(document, public_key_from_b64url(public_key)), \
        "the envelope example's signature is not the test key's"


def _session(document):
    from apps.identity.sessions import OPEN_SESSION

    check(OPEN_SESSION, document, "VALIDATION_ERROR", "session request")
    public_key = public_key_from_b64url(public_key_b64url(private_key_from_b64url(TEST_SEED)))
    assert verify(document, public_key), "the session example's signature is not the test key's"


def _event(document):
    assert document["hash"] == content_hash(without(document, "hash")), \
        "the event example's hash is not the sha256 of its canonical form"


def _body(command_type: str):
    def run(document):
        check_body(command_type, document)
        if command_type in CONTRACT_BODIES:
            check_contract(document["contract"])
    return run


def checker(kind: str):
    if kind.startswith("body "):
        command_type = kind[len("body "):]
        assert command_type in commands.COMMAND_TYPES, f"no command type {command_type}"
        return _body(command_type)
    return {"envelope": _envelope, "session": _session, "event": _event,
            "evidence": lambda d: check(EVIDENCE_CHECK, d, "VALIDATION_ERROR", "Evidence"),
            "contract": check_contract, "agent-card": _agent_card}[kind]


EXAMPLES = MARKED.findall(DOC)


def test_the_important_examples_are_checked():
    kinds = {kind for kind, _ in EXAMPLES}
    for kind in ("envelope", "session", "event", "evidence", "agent-card",
                 "body mission.create", "body work.authorize", "body work.submit",
                 "body artifact.publish", "body context.publish"):
        assert kind in kinds, f"docs/protocol.md lost its checked example: {kind}"


@pytest.mark.parametrize("kind, text", EXAMPLES, ids=[kind for kind, _ in EXAMPLES])
def test_a_checked_example_passes_the_servers_validation(kind, text):
    checker(kind)(json.loads(text))


def test_every_json_block_is_json():
    for text in JSON_BLOCK.findall(DOC):
        json.loads(text)
