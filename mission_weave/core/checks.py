"""The registry of named deterministic checks (§13.2, step 2 of the review pipeline).

An acceptance criterion names one with `method: "check:<name>"` or
`"check:<name>:<argument>"`. Only the checks below exist: a client chooses among them and
may pass one argument; no code of its own ever runs. Each check is a pure function of the
facts the shell gathered about the artifacts the criterion's Evidence cites (or, when that
Evidence cites none, every artifact of the submission) and answers pass or fail with a
sentence a person can read.

  non-empty                 at least one artifact, and none is empty
  max-size:<bytes>          no artifact is larger than <bytes>
  media-type:<type>         every artifact's published manifest has this media type
  json                      every artifact's content is JSON
  json-schema[:<deliverable>] every artifact validates against the deliverable's `schema`
                            (the only deliverable with one, when none is named)
  sources-present           every artifact's manifest names sources, and each is stored

Pure: no Django, no I/O.
"""

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from mission_weave.protocol.whole import whole_number

from .json_types import JsonObject

PREFIX = "check:"
NAME = re.compile(r"^[a-z][a-z0-9-]{0,49}$")
PASS, FAIL = "pass", "fail"
NOT_READ = object()  # the shell did not read the content (not needed, absent or too large)


@dataclass(frozen=True)
class ArtifactFacts:
    """What the shell found out about one artifact hash, outside any lock."""

    hash: str
    present: bool  # a blob with this name is stored
    intact: bool | None = None  # its bytes still hash to the name (None: not checked)
    size: int | None = None
    media_type: str | None = None  # from the published manifest, if there is one
    sources: tuple[str, ...] | None = None  # the manifest's source hashes; None without a manifest
    missing_sources: tuple[str, ...] = ()  # of `sources`, those not stored as blobs
    content: object = field(default=NOT_READ, compare=False)  # the parsed JSON, if read
    content_problem: str | None = None  # why the content could not be read as JSON


@dataclass(frozen=True)
class Outcome:
    result: str  # pass | fail
    detail: str


def parse(method: str | None) -> tuple[str, str | None] | None:
    """(name, argument) of a `check:` method; None for any other method (a description
    of how the worker or a reviewer checks it, answered by reviewer Evidence)."""
    if not isinstance(method, str) or not method.startswith(PREFIX):
        return None
    name, _, argument = method[len(PREFIX):].partition(":")
    return name, (argument or None)


def problem(method: str, contract: JsonObject) -> str | None:
    """Why a `check:` method cannot run against this contract (unknown name, missing or
    bad argument), or None. Checked when the contract is authorized or revised."""
    parsed = parse(method)
    if parsed is None:
        return None
    name, argument = parsed
    if not NAME.match(name) or name not in REGISTRY:
        return f"unknown check {name!r}; known checks: {', '.join(sorted(REGISTRY))}"
    return REGISTRY[name].argument_problem(argument, contract)


def run(method: str, artifacts: Sequence[ArtifactFacts], contract: JsonObject) -> Outcome:
    """Run the named check over the artifacts' facts."""
    trouble = problem(method, contract)
    if trouble is not None:
        return Outcome(FAIL, trouble)
    parsed = parse(method)
    assert parsed is not None, "problem() answers for a method that is not a check"
    name, argument = parsed
    return REGISTRY[name].run(argument, artifacts, contract)


def schema_problem(schema: object) -> str | None:
    """Why a deliverable's `schema` is not a usable JSON Schema (2020-12), or None."""
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as error:
        return f"not a valid JSON Schema: {error.message}"
    return None


def validate(schema: JsonObject, document: object) -> str | None:
    """The first violation of `schema` by `document`, as a sentence, or None. Interpreted
    (jsonschema), never compiled to code: the schema comes from a client. Remote `$ref`s
    are not fetched; they fail the validation."""
    try:
        errors = sorted(Draft202012Validator(schema).iter_errors(document),
                        key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    except Exception as error:  # an unresolvable $ref and the like: the check fails
        return f"the schema could not be applied: {error}"
    if not errors:
        return None
    first = errors[0]
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first.absolute_path)
    return f"{path or '(root)'}: {first.message}"


# --- the checks ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Check:
    run: Callable[[str | None, Sequence[ArtifactFacts], JsonObject], Outcome]
    argument_problem: Callable[[str | None, JsonObject], str | None]


def _no_argument(argument: str | None, contract: JsonObject) -> str | None:
    return None if argument is None else "takes no argument"


def _failures(artifacts: Sequence[ArtifactFacts],
              sentence: Callable[[ArtifactFacts], str | None]) -> list[str]:
    return [f"{a.hash}: {text}" for a in artifacts if (text := sentence(a)) is not None]


def _verdict(failures: Sequence[str], success: str) -> Outcome:
    return Outcome(FAIL, "; ".join(failures)) if failures else Outcome(PASS, success)


def _absent(artifact: ArtifactFacts) -> str | None:
    return None if artifact.present else "no blob is stored under this hash"


def _non_empty(argument: str | None, artifacts: Sequence[ArtifactFacts],
               contract: JsonObject) -> Outcome:
    if not artifacts:
        return Outcome(FAIL, "no artifact was submitted")
    return _verdict(_failures(artifacts, lambda a: _absent(a) or (
        "is empty" if a.size == 0 else None)), f"{len(artifacts)} artifact(s), none empty")


def _positive_integer(argument: str | None, contract: JsonObject) -> str | None:
    if argument is None or not whole_number(argument, 2**63 - 1):
        return "needs a positive whole number of bytes, e.g. check:max-size:1048576"
    return None


def _max_size(argument: str | None, artifacts: Sequence[ArtifactFacts],
              contract: JsonObject) -> Outcome:
    assert argument is not None, "problem() has checked the argument"
    limit = int(argument)

    def too_large(a: ArtifactFacts) -> str | None:
        if not a.present:
            return _absent(a)
        assert a.size is not None, "the shell sizes every stored blob"
        return f"{a.size} bytes is over {limit}" if a.size > limit else None
    return _verdict(_failures(artifacts, too_large), f"every artifact is at most {limit} bytes")


def _media_type_argument(argument: str | None, contract: JsonObject) -> str | None:
    return None if argument else "needs the media type, e.g. check:media-type:application/json"


def _media_type(argument: str | None, artifacts: Sequence[ArtifactFacts],
                contract: JsonObject) -> Outcome:
    def wrong(a: ArtifactFacts) -> str | None:
        if a.media_type is None:
            return "has no published manifest to give its media type"
        return None if a.media_type == argument else f"is {a.media_type}, not {argument}"
    return _verdict(_failures(artifacts, wrong), f"every artifact is {argument}")


def _unreadable(artifact: ArtifactFacts) -> str | None:
    if artifact.content is NOT_READ:
        return artifact.content_problem or _absent(artifact) or "its content was not read"
    return None


def _json(argument: str | None, artifacts: Sequence[ArtifactFacts],
          contract: JsonObject) -> Outcome:
    return _verdict(_failures(artifacts, _unreadable), "every artifact is JSON")


def _schemas(contract: JsonObject) -> JsonObject:
    return {d["id"]: d["schema"] for d in contract.get("deliverables", []) if "schema" in d}


def _json_schema_argument(argument: str | None, contract: JsonObject) -> str | None:
    schemas = _schemas(contract)
    if argument is None:
        if len(schemas) != 1:
            return ("names no deliverable, and the contract does not have exactly one "
                    "deliverable with a schema: write check:json-schema:<deliverableId>")
        return None
    if argument not in schemas:
        return f"deliverable {argument!r} has no schema in the contract"
    return None


def _json_schema(argument: str | None, artifacts: Sequence[ArtifactFacts],
                 contract: JsonObject) -> Outcome:
    schemas = _schemas(contract)
    deliverable = argument or next(iter(schemas))
    schema = schemas[deliverable]
    broken = schema_problem(schema)
    if broken is not None:
        return Outcome(FAIL, f"deliverable {deliverable}: {broken}")
    if not artifacts:
        return Outcome(FAIL, "no artifact was submitted")
    return _verdict(_failures(artifacts, lambda a: _unreadable(a) or validate(schema, a.content)),
                    f"every artifact validates against the schema of {deliverable}")


def _sources_present(argument: str | None, artifacts: Sequence[ArtifactFacts],
                     contract: JsonObject) -> Outcome:
    def lacking(a: ArtifactFacts) -> str | None:
        if a.sources is None:
            return "has no published manifest to name its sources"
        if not a.sources:
            return "its manifest names no sources"
        if a.missing_sources:
            return f"sources not stored: {', '.join(a.missing_sources)}"
        return None
    return _verdict(_failures(artifacts, lacking), "every artifact's sources are stored")


REGISTRY = {
    "non-empty": Check(_non_empty, _no_argument),
    "max-size": Check(_max_size, _positive_integer),
    "media-type": Check(_media_type, _media_type_argument),
    "json": Check(_json, _no_argument),
    "json-schema": Check(_json_schema, _json_schema_argument),
    "sources-present": Check(_sources_present, _no_argument),
}

# Checks that need the artifacts' content read and parsed as JSON by the shell.
READS_CONTENT = frozenset({"json", "json-schema"})
