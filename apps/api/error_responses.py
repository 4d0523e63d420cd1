"""One place that maps failures to HTTP: every error under /api/ is the PROTOCOL
envelope `{"error": {"code", "message", "details"}}`, never an HTML page."""

import logging
import math

from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404, JsonResponse
from rest_framework import exceptions as drf

from mission_weave.protocol.errors import ProtocolError
from mission_weave.runtime import rate_limits

log = logging.getLogger(__name__)


def as_protocol_error(exc) -> ProtocolError | None:
    if isinstance(exc, ProtocolError):
        return exc
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return ProtocolError("PAYLOAD_TOO_LARGE", f"the request body is over {limit} bytes "
                             "(MW_MAX_BODY_BYTES)", {"maxBytes": limit})
    if isinstance(exc, (drf.NotAuthenticated, drf.AuthenticationFailed)):
        return ProtocolError("UNAUTHENTICATED", "send Authorization: Bearer <token> from "
                             "POST /api/v1/sessions, or log in")
    if isinstance(exc, (drf.PermissionDenied, PermissionDenied)):
        return ProtocolError("FORBIDDEN", str(getattr(exc, "detail", "")) or "not allowed")
    if isinstance(exc, (drf.NotFound, Http404)):
        return ProtocolError("NOT_FOUND", "no such resource")
    if isinstance(exc, drf.MethodNotAllowed):
        return ProtocolError("VALIDATION_ERROR", str(exc.detail), http_status=405)
    if isinstance(exc, drf.Throttled):
        retry_after = max(1, math.ceil(exc.wait or 1))
        return ProtocolError("RATE_LIMITED", f"too many requests; retry in {retry_after} s",
                             {"retryAfter": retry_after})
    if isinstance(exc, drf.UnsupportedMediaType):
        return ProtocolError("VALIDATION_ERROR", "send application/json", http_status=415)
    if isinstance(exc, (drf.ParseError, drf.ValidationError)):
        return ProtocolError("VALIDATION_ERROR", str(exc.detail))
    return None


def response(error: ProtocolError) -> JsonResponse:
    return rate_limits.with_retry_after(JsonResponse(error.as_json(), status=error.http_status),
                                   error)


def exception_handler(exc, context):
    """DRF's EXCEPTION_HANDLER."""
    error = as_protocol_error(exc)
    return response(error) if error is not None else None


def handler404(request, exception=None):
    return response(ProtocolError("NOT_FOUND", f"nothing at {request.path}"))


def handler500(request):
    log.error("internal error on %s %s", request.method, request.path)
    return response(ProtocolError("INTERNAL_ERROR", "the server failed; the request changed "
                                  "nothing it did not report"))
