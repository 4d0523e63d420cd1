from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("apps.api.urls")),
    path("", include("apps.dashboard.urls")),
]

handler404 = "apps.api.errors.handler404"
handler500 = "apps.api.errors.handler500"
