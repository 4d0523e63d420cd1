from django.urls import path
from drf_spectacular.views import SpectacularAPIView

from . import views

G = "groups/<str:group_id>"

urlpatterns = [
    path("sessions", views.SessionsView.as_view()),
    path("authority", views.AuthorityView.as_view()),
    path(f"{G}/commands", views.CommandsView.as_view()),
    path(f"{G}/events", views.EventsView.as_view()),
    path(f"{G}/work-items", views.WorkItemListView.as_view()),
    path(f"{G}/work-items/<str:work_item_id>", views.WorkItemView.as_view()),
    path(f"{G}/work-items/<str:work_item_id>/audit", views.WorkItemAuditView.as_view()),
    path(f"{G}/missions", views.MissionListView.as_view()),
    path(f"{G}/missions/<str:mission_id>", views.MissionView.as_view()),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
]
