from django.urls import path, register_converter
from drf_spectacular.views import SpectacularAPIView

from apps.ledger.models import Group

from . import artifact_views, blob_views, history_views, membership, reference, review_views, views
from .cursor_views import CursorView


class IdConverter:
    """An opaque id in a path: any text but `/` and U+0000 (which PostgreSQL cannot
    compare), so an impossible id is a JSON 404 rather than a database error."""

    regex = "[^/\\x00]+"

    def to_python(self, value):
        return value

    def to_url(self, value):
        return value


class GroupIdConverter(IdConverter):
    """A Group's id: no longer than the column, so that a longer one is a JSON 404 too (on
    Citus, which casts a distribution column's value to its type to find the shard, a
    longer one would be a database error)."""

    regex = f"[^/\\x00]{{1,{Group._meta.get_field('id').max_length}}}"


class TextConverter(IdConverter):
    """Any text, line breaks and slashes included, so that the view, not the resolver,
    answers a malformed name (a blob's: VALIDATION_ERROR)."""

    regex = "[\\s\\S]+"


register_converter(IdConverter, "id")
register_converter(GroupIdConverter, "group_id")
register_converter(TextConverter, "text")

G = "groups/<group_id:group_id>"

urlpatterns = [
    path("sessions", views.SessionsView.as_view()),
    path("authority", views.AuthorityView.as_view()),
    path("capabilities/introspect", views.CapabilityIntrospectionView.as_view()),
    path("presence", views.PresenceView.as_view()),
    path(f"{G}/commands", views.CommandsView.as_view()),
    path(f"{G}/events", views.EventsView.as_view()),
    path(f"{G}/cursor", CursorView.as_view()),
    path(f"{G}/snapshots/<id:snapshot_id>", history_views.SnapshotView.as_view()),
    path(f"{G}/archive", history_views.ArchiveView.as_view()),
    path(f"{G}/membership", membership.MembershipView.as_view()),
    path(f"{G}/work-items", views.WorkItemListView.as_view()),
    path(f"{G}/work-items/<id:work_item_id>", views.WorkItemView.as_view()),
    path(f"{G}/work-items/<id:work_item_id>/audit", views.WorkItemAuditView.as_view()),
    path(f"{G}/work-items/<id:work_item_id>/review", review_views.WorkItemReviewView.as_view()),
    path(f"{G}/missions", views.MissionListView.as_view()),
    path(f"{G}/missions/<id:mission_id>", views.MissionView.as_view()),
    path(f"{G}/artifacts/<id:hash>", artifact_views.ArtifactView.as_view()),
    path(f"{G}/artifacts/<id:hash>/provenance", artifact_views.ProvenanceView.as_view()),
    path(f"{G}/context-packages/<id:package_id>", artifact_views.ContextPackageView.as_view()),
    path(f"{G}/context-packages/<id:package_id>/events",
         artifact_views.ContextPackageEventsView.as_view()),
    # Any text, slashes included: a bad name (`../x` too) is a VALIDATION_ERROR from the
    # view, and only a validated hex digest reaches storage.
    path("blobs/<text:name>", blob_views.BlobView.as_view()),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", reference.SwaggerView.as_view(), name="api-docs"),
    path("redoc/", reference.RedocView.as_view(), name="api-redoc"),
]
