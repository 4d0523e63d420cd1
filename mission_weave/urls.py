from django.contrib import admin
from django.urls import include, path

from apps.operations import views as operations

urlpatterns = [
    # Probes and the Prometheus scrape, outside /api/ (answered ahead of the host check by
    # apps.operations.middleware.OperationsEndpointsMiddleware).
    path("healthz", operations.healthz, name="healthz"),
    path("readyz", operations.readyz, name="readyz"),
    path("metrics", operations.metrics_view, name="metrics"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("apps.api.urls")),
    path("", include("apps.dashboard.urls")),
]

handler404 = "apps.dashboard.views.handler404"
handler500 = "apps.dashboard.views.handler500"
