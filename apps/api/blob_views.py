"""PUT/GET /api/v1/blobs/sha256:<hex> (PROTOCOL §5). Thin: validate the name, stream the
bytes through apps/artifacts/blobs.py, answer."""

import asyncio

from django.http import JsonResponse, StreamingHttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.views import APIView

from apps.artifacts import blobs
from mission_weave.protocol.errors import ProtocolError
from mission_weave.protocol.whole import whole_number

from .openapi import AUTH, errors, ref
from .views import BIGINT_MAX, principal_of


class BlobView(APIView):
    @extend_schema(request={"application/octet-stream": OpenApiTypes.BINARY},
                   responses={201: ref("StoredBlob"), 200: ref("StoredBlob"),
                              **errors("VALIDATION_ERROR", *AUTH, "PAYLOAD_TOO_LARGE",
                                       "HASH_MISMATCH")},
                   summary="Upload a blob (PROTOCOL §5)",
                   description="The raw bytes, named by their SHA-256. Streamed and hashed as "
                               "they are written; `HASH_MISMATCH` (422) keeps nothing; over "
                               "MW_BLOB_MAX_BYTES `PAYLOAD_TOO_LARGE` (413). Answers "
                               "`{hash, size}`: 201 when stored, 200 when it was already there and "
                               "the sender could read it (else 201, as for new bytes).")
    def put(self, request, name):
        principal = principal_of(request)
        digest = blobs.parse_name(name)
        blobs.check_declared_size(_content_length(request))
        stored = blobs.put(digest, _body_chunks(request._request), principal.id, timezone.now())
        return JsonResponse(stored.as_json(), status=201 if stored.created else 200)

    @extend_schema(responses={(200, "application/octet-stream"): OpenApiTypes.BINARY,
                              **errors("VALIDATION_ERROR", *AUTH, "NOT_A_MEMBER", "NOT_FOUND",
                                       ("HASH_MISMATCH", 500))},
                   summary="Download a blob (PROTOCOL §5)",
                   description="The bytes, after verifying them against the name. Readable by "
                               "the principal that uploaded it and by members of a Group that "
                               "published an artifact for it; anyone else gets NOT_A_MEMBER "
                               "whether or not the blob exists. A stored copy that no longer "
                               "matches is never served: HASH_MISMATCH with HTTP 500.")
    def get(self, request, name):
        principal = principal_of(request)
        digest = blobs.parse_name(name)
        verified = blobs.open_verified(digest, principal.id, timezone.now())
        response = ThreadedStreamingResponse(verified.chunks,
                                             content_type="application/octet-stream")
        response._resource_closers.append(verified.close)
        response["Content-Length"] = str(verified.size)
        response["ETag"] = f'"{verified.name}"'
        response["Cache-Control"] = "private, max-age=31536000, immutable"
        return response


def _content_length(request) -> int | None:
    text = request.META.get("CONTENT_LENGTH") or ""
    if not text:
        return None
    value = whole_number(text, BIGINT_MAX)
    if value is None:
        raise ProtocolError("VALIDATION_ERROR", "Content-Length must be a whole number")
    return value


def _body_chunks(request):
    # request.read never goes through request.body, so DATA_UPLOAD_MAX_MEMORY_SIZE (which
    # only bounds bodies read whole) does not apply; the blob limit is checked per chunk.
    while chunk := request.read(blobs.CHUNK):
        yield chunk


class ThreadedStreamingResponse(StreamingHttpResponse):
    """Under ASGI, Django would turn a synchronous iterator into a list before sending
    it (the whole blob in memory); this reads one chunk at a time on a thread instead."""

    async def __aiter__(self):
        loop = asyncio.get_running_loop()
        iterator = iter(self.streaming_content)
        while (part := await loop.run_in_executor(None, next, iterator, None)) is not None:
            yield part
