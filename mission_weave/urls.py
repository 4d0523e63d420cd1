from django.contrib import admin
from django.http import HttpResponsePermanentRedirect
from django.templatetags.static import static
from django.urls import include, path

from apps.operations import views as operations


def favicon(request):
    """Browsers ask for /favicon.ico by themselves on every page that names no icon (the
    API's, the admin's): the dashboard's icon, wherever the static files are served from."""
    return HttpResponsePermanentRedirect(static("dashboard/favicon.ico"))


urlpatterns = [
    # Probes and the Prometheus scrape, outside /api/ (answered ahead of the host check by
    # apps.operations.middleware.OperationsEndpointsMiddleware).
    path("healthz", operations.healthz, name="healthz"),
    path("readyz", operations.readyz, name="readyz"),
    path("metrics", operations.metrics_view, name="metrics"),
    path("favicon.ico", favicon, name="favicon"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("apps.api.urls")),
    # Sign-in with OpenID Connect: /oidc/authenticate/ and /oidc/callback/ (a 404 while
    # OIDC_RP_CLIENT_ID is unset; apps/dashboard/sign_in.py).
    path("oidc/", include("mozilla_django_oidc.urls")),
    path("", include("apps.dashboard.urls")),
]

handler404 = "apps.dashboard.views.handler404"
handler500 = "apps.dashboard.views.handler500"
