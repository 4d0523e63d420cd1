"""A verified WorkItem's deliverables as A2A artifacts.

Each artifact of the accepted submission is read with its signed manifest
(`GET /groups/{g}/artifacts/{hash}`, PROTOCOL §5). Small text content travels inline: a
text part, or a data part for JSON; anything else (binary, or larger than INLINE_BYTES)
is a reference, a url part naming the blob on the Group Authority, readable by the
Group's members with their token (`GET /api/v1/blobs/{hash}`).
"""

import json

from a2a.helpers import new_artifact, new_data_part, new_text_part, new_url_part
from a2a.types.a2a_pb2 import Artifact, Part

from mission_weave.protocol.json_types import JsonObject
from mission_weave.sdk.client import Client

INLINE_BYTES = 64 * 1024
TEXT_TYPES = ("application/xml", "application/yaml", "application/x-yaml")


def is_json(media_type: str) -> bool:
    return media_type == "application/json" or media_type.endswith("+json")


def is_text(media_type: str) -> bool:
    return media_type.startswith("text/") or media_type in TEXT_TYPES \
        or media_type.endswith("+xml")


async def deliverables(client: Client, group_id: str, work_item_id: str,
                       hashes: tuple[str, ...]) -> list[Artifact]:
    """The artifacts of a verified submission, each with its manifest's media type."""
    artifacts = []
    for name in hashes:
        document = await client.get(f"/api/v1/groups/{group_id}/artifacts/{name}")
        manifest: JsonObject = document.get("manifest") or {}
        media_type = str(manifest.get("mediaType") or "application/octet-stream")
        part = await _part(client, name, media_type, int(manifest.get("size") or 0))
        artifacts.append(new_artifact(
            [part], name=f"{work_item_id}: {media_type}", artifact_id=name,
            description=f"A deliverable of WorkItem {work_item_id} ({name}, {media_type}, "
                        f"{manifest.get('size', '?')} bytes)"))
    return artifacts


async def _part(client: Client, name: str, media_type: str, size: int) -> Part:
    inline = (is_text(media_type) or is_json(media_type)) and size <= INLINE_BYTES
    if inline:
        content = await client.get_blob(name)
        assert isinstance(content, bytes)  # no `into`: the bytes themselves
        try:
            text = content.decode()
            return new_data_part(json.loads(text), media_type) if is_json(media_type) \
                else new_text_part(text, media_type)
        except (UnicodeDecodeError, ValueError):
            pass  # not what its manifest says it is: a reference, like any other content
    return new_url_part(f"{client.base_url}/api/v1/blobs/{name}", media_type,
                        filename=name.replace(":", "-"))
