"""What crosses between a WorkItem and A2A parts.

Out: the Work Contract as one message, its brief (goal, deliverables, acceptance
criteria) as a text part, the whole contract as a data part, and each input (an artifact
a dependency published) as a file part with its media type.

Back: each part of the agent's artifacts becomes the bytes of one MissionWeave artifact,
with the part's media type: text as UTF-8 (`text/plain` when it names none), data as
canonical JSON (`application/json`), a file's bytes, or those its URL points to
(`application/octet-stream`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from a2a.helpers import get_message_text
from a2a.types import Artifact, Message, Part
from google.protobuf import struct_pb2
from google.protobuf.json_format import MessageToDict, ParseDict

from mission_weave.protocol import canonical
from mission_weave.protocol.json_types import JsonObject


@dataclass(frozen=True)
class Input:
    """An artifact a dependency published, as the contract's input."""

    hash: str
    media_type: str
    data: bytes
    work_item_id: str


@dataclass(frozen=True)
class Output:
    """The bytes of one artifact part, to publish."""

    data: bytes
    media_type: str


def brief(contract: JsonObject) -> str:
    """The contract as a person (or a model) reads it."""
    lines = [f"Goal: {contract['goal']}", "", "Deliverables:"]
    for deliverable in contract.get("deliverables", []):
        media = f" ({deliverable['mediaType']})" if deliverable.get("mediaType") else ""
        lines.append(f"- {deliverable['id']}: {deliverable['description']}{media}")
    lines += ["", "Acceptance criteria:"]
    lines += [f"- {c['id']}: {c['description']}" for c in contract.get("acceptanceCriteria", [])]
    if contract.get("deadline"):
        lines += ["", f"Deadline: {contract['deadline']}"]
    return "\n".join(lines)


def contract_parts(contract: JsonObject, inputs: Iterable[Input]) -> list[Part]:
    parts = [Part(text=brief(contract), media_type="text/plain"),
             Part(data=ParseDict(contract, struct_pb2.Value()), media_type="application/json")]
    for given in inputs:
        part = Part(raw=given.data, media_type=given.media_type, filename=given.hash)
        part.metadata.update({"missionweave": {"hash": given.hash,
                                               "workItemId": given.work_item_id}})
        parts.append(part)
    return parts


def text_of(message: Message) -> str:
    return get_message_text(message).strip()


async def outputs(artifacts: Iterable[Artifact],
                  download: Callable[[str], Awaitable[bytes]]) -> list[Output]:
    return [Output(*await _bytes_of(part, download))
            for artifact in artifacts for part in artifact.parts]


async def _bytes_of(part: Part,
                    download: Callable[[str], Awaitable[bytes]]) -> tuple[bytes, str]:
    kind = part.WhichOneof("content")
    if kind == "text":
        return part.text.encode(), part.media_type or "text/plain"
    if kind == "data":
        return canonical.canonical(MessageToDict(part.data)), part.media_type or "application/json"
    if kind == "raw":
        return part.raw, part.media_type or "application/octet-stream"
    if kind == "url":
        return await download(part.url), part.media_type or "application/octet-stream"
    raise ValueError(f"an artifact part with no content ({kind})")
