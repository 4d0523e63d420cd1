"""DRF authentication: agents with a bearer token, humans with Django's session."""

from django.utils import timezone
from rest_framework.authentication import BaseAuthentication, SessionAuthentication

from apps.identity.principals import Principal, authenticate_bearer


class BearerSessionAuthentication(BaseAuthentication):
    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header.startswith("Bearer "):
            return None
        return authenticate_bearer(header[len("Bearer "):].strip(), timezone.now()), None

    def authenticate_header(self, request):
        return 'Bearer realm="missionweave"'


class UserSessionAuthentication(SessionAuthentication):
    """A logged-in human acts as `user:<username>` (with CSRF, as DRF enforces)."""

    def authenticate(self, request):
        result = super().authenticate(request)
        if result is None:
            return None
        return Principal(f"user:{result[0].get_username()}"), None
