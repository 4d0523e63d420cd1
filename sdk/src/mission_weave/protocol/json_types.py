"""Names for JSON as the protocol carries it.

A command's body, an event, a key file or a server's answer is a JSON object whose
members are whatever the document holds: its shape is checked where it is read (the
server's validators, the SDK's folds), not promised by the type system. `JsonObject` is
that boundary, written once, so a signature says "a JSON object" instead of a bare
`dict[str, Any]` that could mean anything."""

from typing import Any, TypeAlias

JsonObject: TypeAlias = dict[str, Any]
"""A JSON object as parsed (or about to be serialized): string keys, any JSON values."""
