"""OpenAPI descriptions of our two authentication schemes (drf-spectacular)."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class BearerScheme(OpenApiAuthenticationExtension):
    target_class = "apps.api.auth.BearerSessionAuthentication"
    name = "agentBearer"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer",
                "description": "The token from POST /api/v1/sessions (PROTOCOL §1)."}


class UserSessionScheme(OpenApiAuthenticationExtension):
    target_class = "apps.api.auth.UserSessionAuthentication"
    name = "humanSession"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "cookie", "name": "sessionid",
                "description": "A logged-in human (Django session + CSRF)."}
