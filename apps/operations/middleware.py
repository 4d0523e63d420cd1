"""The request id and the one log line of each HTTP request; the operations endpoints
answered before the rest of the middleware."""

import logging
import re
import time
import uuid

from django.conf import settings
from django.urls import Resolver404, resolve
from django.utils.functional import SimpleLazyObject, empty

from apps.identity.principals import Principal

from . import views
from .logs import REQUEST_ID, printable

log = logging.getLogger("mw.http")

# An incoming X-Request-ID (from a proxy, or a client retrying) is kept when it is short
# and plain; anything else is replaced by one of ours.
SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:@+=/-]{1,128}")
MAX_PATH = 1000  # characters of a path a log line repeats
ENDPOINTS = {views.healthz, views.readyz, views.metrics_view}


class RequestLogMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        incoming = request.headers.get("X-Request-ID", "")
        request_id = incoming if SANE_REQUEST_ID.fullmatch(incoming) else uuid.uuid4().hex
        request.request_id = request_id
        token = REQUEST_ID.set(request_id)
        try:
            response = self.get_response(request)
            response["X-Request-ID"] = request_id
            if settings.MW_REQUEST_LOG:
                self._log(request, response, (time.perf_counter() - started) * 1000)
            return response
        finally:
            REQUEST_ID.reset(token)

    @staticmethod
    def _log(request, response, milliseconds: float) -> None:
        match = getattr(request, "resolver_match", None)
        group_id = match.kwargs.get("group_id") if match is not None else None
        path = request.path[:MAX_PATH]  # never the query string
        log.info("%s %s %s %.1fms", request.method, printable(path), response.status_code,
                 milliseconds,
                 extra={"requestId": request.request_id, "method": request.method,
                        "path": path, "status": response.status_code,
                        "durationMs": round(milliseconds, 2),
                        "principal": principal_of(request),
                        "groupId": group_id[:200] if isinstance(group_id, str) else None})


def principal_of(request) -> str | None:
    """Who the request was served as, if the view authenticated it: the API's Principal,
    or the dashboard's signed-in human. A session never looked at is not read now."""
    user = request.__dict__.get("user")
    if isinstance(user, SimpleLazyObject):
        if user._wrapped is empty:
            return None
        user = user._wrapped
    if isinstance(user, Principal):
        return user.id
    if getattr(user, "is_authenticated", False):
        return f"user:{user.get_username()}"
    return None


class OperationsEndpointsMiddleware:
    """/healthz, /readyz and /metrics (routed in mission_weave/urls.py) are served here,
    before SecurityMiddleware and CommonMiddleware: a probe or a scraper calls the pod's
    address (not in ALLOWED_HOSTS) over plain HTTP (which SECURE_SSL_REDIRECT redirects)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path_info in ("/healthz", "/readyz", "/metrics"):
            try:
                match = resolve(request.path_info)
            except Resolver404:
                match = None
            if match is not None and match.func in ENDPOINTS:
                return match.func(request, *match.args, **match.kwargs)
        return self.get_response(request)
