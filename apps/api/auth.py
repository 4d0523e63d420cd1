"""DRF authentication: agents with a bearer token, humans with Django's session. Once the
principal is known its rate limit is counted (mission_weave/runtime/rate_limits.py), before the view
reads the body: a refused request changes nothing."""

from django.utils import timezone
from rest_framework.authentication import BaseAuthentication, SessionAuthentication

from apps.identity.principals import Principal, authenticate_bearer
from mission_weave.runtime import rate_limits


class BearerSessionAuthentication(BaseAuthentication):
    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header.startswith("Bearer "):
            return None
        # A request about one Group reads the membership there with the token (one query)
        group_id = (getattr(request, "parser_context", None) or {}).get("kwargs", {}).get(
            "group_id")
        # A command may be authenticated from the session cache: the pipeline checks the
        # session and membership again in the Group's locked read (issue 27). Nothing
        # else, which would not check them again, is.
        command = request.method == "POST" and request.path_info.endswith("/commands")
        principal = authenticate_bearer(header[len("Bearer "):].strip(), timezone.now(),
                                        group_id if isinstance(group_id, str) else None,
                                        cached=command)
        return counted(request, principal), None

    def authenticate_header(self, request):
        return 'Bearer realm="missionweave"'


class UserSessionAuthentication(SessionAuthentication):
    """A logged-in human acts as `user:<username>` (with CSRF, as DRF enforces)."""

    def authenticate(self, request):
        result = super().authenticate(request)
        if result is None:
            return None
        return counted(request, user_principal(result[0])), None


def user_principal(user) -> Principal:
    """The principal of a logged-in human (here and on the dashboard)."""
    return Principal(f"user:{user.get_username()}")


def counted(request, principal: Principal) -> Principal:
    """The principal, once its request is counted against its limit (RATE_LIMITED)."""
    kind = rate_limits.kind_of(request.method, request.path_info)
    if kind in ("commands", "reads"):
        rate_limits.check(kind, principal=principal.id)
    return principal
