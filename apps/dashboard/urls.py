from django.contrib.auth import views as auth_views
from django.urls import path

from apps.api.urls import IdConverter  # noqa: F401 - registers the `id` path converter

from . import views

app_name = "dashboard"

G = "g/<id:group_id>"

urlpatterns = [
    path("", views.groups, name="groups"),
    path("login/", auth_views.LoginView.as_view(template_name="dashboard/login.html",
                                                next_page="dashboard:groups"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(next_page="dashboard:login"), name="logout"),
    path(f"{G}/", views.group, name="group"),
    path(f"{G}/missions/<id:mission_id>/", views.mission, name="mission"),
    path(f"{G}/missions/<id:mission_id>/approve", views.approve_mission, name="approve_mission"),
    path(f"{G}/work-items/<id:item_id>/", views.work_item, name="work_item"),
    path(f"{G}/work-items/<id:item_id>/accept", views.accept_result, name="accept_result"),
    path(f"{G}/work-items/<id:item_id>/fail", views.fail, name="fail"),
    path(f"{G}/work-items/<id:item_id>/grant-execution", views.grant_execution,
         name="grant_execution"),
    path(f"{G}/artifacts/<id:name>/", views.artifact, name="artifact"),
]
