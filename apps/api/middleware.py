"""Under /api/ every failure is the PROTOCOL JSON envelope, even the ones Django
answers before a view runs (no route, DEBUG's technical pages, uncaught errors)."""

import logging

from mission_weave.protocol.errors import ProtocolError

from .errors import as_protocol_error, response

log = logging.getLogger(__name__)


class ApiErrorsMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        result = self.get_response(request)
        if (request.path.startswith("/api/") and result.status_code >= 400
                and not result.get("Content-Type", "").startswith("application/json")):
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
        return result

    def process_exception(self, request, exception):
        if not request.path.startswith("/api/"):
            return None
        error = as_protocol_error(exception)
        if error is None:
            log.exception("internal error on %s %s", request.method, request.path)
            error = ProtocolError("INTERNAL_ERROR", "the server failed")
        return response(error)
