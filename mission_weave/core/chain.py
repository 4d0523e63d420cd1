"""Event documents and the hash chain (PROTOCOL §3). Pure: no Django."""

from collections.abc import Iterable

from mission_weave.protocol.canonical import (
    ZERO_HASH,
    canonical,
    canonical_of_parsed,
    content_hash,
    sha256_hex,
)

from .json_types import JsonObject

GENESIS_HASH = ZERO_HASH


def seal(document: JsonObject) -> JsonObject:
    """The event document with its `hash`: sha256 of the canonical form without `hash`."""
    body = {key: value for key, value in document.items() if key != "hash"}
    return {**body, "hash": content_hash(body)}


def check_chain(documents: Iterable[JsonObject], start_hash: str = GENESIS_HASH,
                start_sequence: int = 1) -> list[str]:
    """Problems found walking `documents` in order: gaps, broken links, wrong hashes."""
    problems: list[str] = []
    expected_prev, expected_sequence = start_hash, start_sequence
    for document in documents:
        body = {key: value for key, value in document.items() if key != "hash"}
        problems += link_problems(body, document["hash"], expected_prev, expected_sequence)
        expected_prev, expected_sequence = document["hash"], document["sequence"] + 1
    return problems


def link_problems(body: JsonObject, hash_: str, expected_prev: str,
                  expected_sequence: int, parsed: bool = False) -> list[str]:
    """check_chain's problems with one event, given as its document without `hash`
    (`body`) and that hash: for a reader that builds the body itself (mw_verify).
    `parsed`: the body holds only what a JSON parser gives (canonical_of_parsed)."""
    problems: list[str] = []
    sequence = body["sequence"]
    if sequence != expected_sequence:
        problems.append(f"sequence {sequence} where {expected_sequence} was expected")
    if body["prevHash"] != expected_prev:
        problems.append(f"sequence {sequence}: prevHash does not match the previous hash")
    written = canonical_of_parsed(body) if parsed else canonical(body)
    if sha256_hex(written) != hash_:
        problems.append(f"sequence {sequence}: hash does not match its content")
    return problems


# What the chain gives an event only when it is appended under the Group lock, and the
# marks that stand for them in a template (as `canonical` writes them).
_CHAINED = ("commandId", "id", "prevHash", "sequence")
_MARK = "\x00mw-chain\x00"
_MARKS = {name: f"{_MARK}{name}" for name in _CHAINED}
_WRITTEN = [canonical(mark).decode() for mark in _MARKS.values()]


class Template:
    """An event document sealed in two steps: its canonical form is written once,
    before the Group lock, with marks where the chained members go (`commandId`, `id`,
    `prevHash`, `sequence`); under the lock `seal` fills them in and hashes, which costs
    a string join and one sha256 instead of a canonical serialization. The marks are
    found in what `canonical` itself wrote, so the bytes hashed are its bytes."""

    def __init__(self, document: JsonObject):
        text = canonical({**document, **_MARKS}).decode()
        self.pieces: list[str] = []
        rest = text
        for mark in _WRITTEN:  # RFC 8785 orders members by name: the marks come in order
            if text.count(mark) != 1:
                raise ValueError(f"cannot template an event whose content holds {mark!r}")
            before, _, rest = rest.partition(mark)
            self.pieces.append(before)
        self.pieces.append(rest)
        self.document = document

    def seal(self, command_id: str, event_id: str, prev_hash: str, sequence: int) -> JsonObject:
        """The complete document with its `hash`, equal to `seal` of the same members.
        Ids and hashes are ASCII without escapes (prefix_hex, sha256:hex)."""
        p = self.pieces
        text = (f'{p[0]}"{command_id}"{p[1]}"{event_id}"{p[2]}"{prev_hash}"{p[3]}'
                f'{sequence}{p[4]}')
        return {**self.document, "commandId": command_id, "id": event_id,
                "prevHash": prev_hash, "sequence": sequence,
                "hash": sha256_hex(text.encode())}
