"""Under /api/ every failure is the PROTOCOL JSON envelope, even the ones Django
answers before a view runs (no route, DEBUG's technical pages, uncaught errors)."""

import logging

from asgiref.sync import iscoroutinefunction, markcoroutinefunction

from mission_weave.protocol.errors import ProtocolError

from .error_responses import as_protocol_error, response

log = logging.getLogger(__name__)


class ApiErrorsMiddleware:
    # Both modes, so that under ASGI Django need not hop threads around it.
    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request):
        if self.is_async:
            return self._acall(request)
        return self._as_json(request, self.get_response(request))

    async def _acall(self, request):
        return self._as_json(request, await self.get_response(request))

    def _as_json(self, request, result):
        if (not request.path.startswith("/api/") or result.status_code < 400
                or result.get("Content-Type", "").startswith("application/json")):
            return result
        if result.status_code == 404:
            return response(ProtocolError("NOT_FOUND", f"nothing at {request.path}"))
        if result.status_code == 405:
            return response(ProtocolError("VALIDATION_ERROR",
                                          f"{request.method} is not allowed here",
                                          http_status=405))
        if result.status_code == 413:
            return response(ProtocolError("PAYLOAD_TOO_LARGE", "the request is too large"))
        if result.status_code < 500:
            return response(ProtocolError("VALIDATION_ERROR", "the request was refused",
                                          http_status=result.status_code))
        return response(ProtocolError("INTERNAL_ERROR", "the server failed"))

    def process_exception(self, request, exception):
        if not request.path.startswith("/api/"):
            return None
        error = as_protocol_error(exception)
        if error is None:
            log.error("internal error on %s %s", request.method, request.path, exc_info=exception)
            error = ProtocolError("INTERNAL_ERROR", "the server failed")
        return response(error)
