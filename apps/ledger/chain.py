"""Event documents and the hash chain (PROTOCOL §3). Pure: no Django."""

from mission_weave.protocol.canonical import ZERO_HASH, content_hash

GENESIS_HASH = ZERO_HASH


def seal(document: dict) -> dict:
    """The event document with its `hash`: sha256 of the canonical form without `hash`."""
    body = {key: value for key, value in document.items() if key != "hash"}
    return {**body, "hash": content_hash(body)}


def check_chain(documents, start_hash: str = GENESIS_HASH, start_sequence: int = 1) -> list:
    """Problems found walking `documents` in order: gaps, broken links, wrong hashes."""
    problems = []
    expected_prev, expected_sequence = start_hash, start_sequence
    for document in documents:
        sequence = document["sequence"]
        if sequence != expected_sequence:
            problems.append(f"sequence {sequence} where {expected_sequence} was expected")
        if document["prevHash"] != expected_prev:
            problems.append(f"sequence {sequence}: prevHash does not match the previous hash")
        if seal(document)["hash"] != document["hash"]:
            problems.append(f"sequence {sequence}: hash does not match its content")
        expected_prev, expected_sequence = document["hash"], sequence + 1
    return problems
