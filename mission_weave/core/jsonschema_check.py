"""JSON Schema checks that fail with a PROTOCOL error naming the offending path.

fastjsonschema (compiled to Python) decides on the hot path; only a document that
fails is walked again with jsonschema, whose errors say precisely where and why.
"""

from collections.abc import Iterable
from typing import TypeAlias

import fastjsonschema
from jsonschema import Draft202012Validator, FormatChecker, ValidationError

from mission_weave.protocol.errors import ProtocolError
from mission_weave.protocol.timefmt import parse_time

from .json_types import JsonObject

FORMATS = FormatChecker(formats=())


def _is_datetime(value: object) -> bool:
    return not isinstance(value, str) or bool(parse_time(value))


# Registered by a call rather than as a decorator: jsonschema's `checks` is untyped.
FORMATS.checks("date-time", raises=ValueError)(_is_datetime)


def _fast_datetime(value: object) -> bool:
    try:
        return _is_datetime(value)
    except ValueError:
        return False


# What a refused document gets: jsonschema's precise errors or, should it find none,
# fastjsonschema's (which has no types). Both say `message`.
Violation: TypeAlias = ValidationError | fastjsonschema.JsonSchemaValueException


class Schema:
    """A schema compiled twice: fast to accept, thorough to explain a refusal."""

    def __init__(self, schema: JsonObject):
        Draft202012Validator.check_schema(schema)
        self.explainer = Draft202012Validator(schema, format_checker=FORMATS)
        body = {key: value for key, value in schema.items() if key not in ("$id", "$schema")}
        self.accepts = fastjsonschema.compile(
            {"$schema": "http://json-schema.org/draft-07/schema#", **body},
            formats={"date-time": _fast_datetime}, use_default=False)

    def errors(self, document: object) -> list[Violation]:
        try:
            self.accepts(document)
            return []
        except fastjsonschema.JsonSchemaValueException as fast_error:
            errors = sorted(self.explainer.iter_errors(document),
                            key=lambda e: (len(e.path), list(map(str, e.path))))
            return errors or [fast_error]


def compile_schema(schema: JsonObject) -> Schema:
    return Schema(schema)


def json_path(path: Iterable[str | int]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(root)"


def check(schema: Schema, document: object, code: str, what: str, prefix: str = "") -> None:
    """Raise `code` for the first (shallowest-path-first) violation in `document`."""
    errors = schema.errors(document)
    if errors:
        raise _refusal(errors[0], code, what, prefix)


def violations(schema: Schema, document: object, code: str, what: str,
               prefix: str = "") -> list[ProtocolError]:
    """Every violation in `document`, shallowest path first, each as the ProtocolError
    `check` raises for the first (a form shows them all at once)."""
    return [_refusal(error, code, what, prefix) for error in schema.errors(document)]


def _refusal(error: Violation, code: str, what: str, prefix: str) -> ProtocolError:
    path = json_path(list(getattr(error, "absolute_path", [])))
    if prefix:
        path = prefix if path == "(root)" else (prefix + path if path.startswith("[")
                                                else f"{prefix}.{path}")
    return ProtocolError(code, f"{what}: {path}: {_plain(error)}", {"path": path})


def _plain(error: Violation) -> str:
    validator = getattr(error, "validator", None)
    message: str = error.message
    if validator == "additionalProperties":
        return message.replace("Additional properties are not allowed", "unknown member(s)")
    if validator == "required":
        return message.replace("is a required property", "is required")
    return message
