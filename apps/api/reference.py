"""The API reference pages, drawn from GET /api/v1/schema/ with drf-spectacular-sidecar's
static copies of Swagger UI and ReDoc (SPECTACULAR_SETTINGS: no CDN)."""

from drf_spectacular.views import SpectacularRedocView, SpectacularSwaggerView


class SwaggerView(SpectacularSwaggerView):
    url_name = "schema"


class RedocView(SpectacularRedocView):
    url_name = "schema"
    template_name = "api/redoc.html"  # drf-spectacular's, less its Google Fonts links
