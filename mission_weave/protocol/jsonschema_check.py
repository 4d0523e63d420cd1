"""JSON Schema checks that fail with a PROTOCOL error naming the offending path."""

from jsonschema import Draft202012Validator, FormatChecker

from .errors import ProtocolError
from .timefmt import parse_time

FORMATS = FormatChecker(formats=())


@FORMATS.checks("date-time", raises=ValueError)
def _is_datetime(value) -> bool:
    return not isinstance(value, str) or bool(parse_time(value))


def compile_schema(schema: dict) -> Draft202012Validator:
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, format_checker=FORMATS)


def json_path(path) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(root)"


def check(schema: Draft202012Validator, document, code: str, what: str, prefix: str = ""):
    """Raise `code` for the first (deepest-path-first) schema violation in `document`."""
    errors = sorted(schema.iter_errors(document), key=lambda e: (len(e.path), list(map(str, e.path))))
    if not errors:
        return
    error = errors[0]
    path = json_path(list(error.absolute_path))
    if prefix:
        path = prefix if path == "(root)" else f"{prefix}.{path}" if not path.startswith("[") else prefix + path
    raise ProtocolError(code, f"{what}: {path}: {_plain(error)}", {"path": path})


def _plain(error) -> str:
    if error.validator == "additionalProperties":
        return error.message.replace("Additional properties are not allowed", "unknown member(s)")
    if error.validator == "required":
        return error.message.replace("is a required property", "is required")
    return error.message
