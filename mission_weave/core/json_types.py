"""Names for the JSON the core reads and writes.

Command bodies, event data, contracts, Evidence and the §13 records are JSON objects whose
shape their JSON Schema (schemas.py) or their mutator (evolve.py, records.py) fixes, not
the type system: `JsonObject` is that boundary, written once, so that a signature says
"a JSON object" instead of a bare `dict[str, Any]`."""

from typing import Any, TypeAlias

JsonObject: TypeAlias = dict[str, Any]
"""A JSON object as parsed (or about to be serialized): string keys, any JSON values."""
