"""The operators' admin over blobs and the artifact projections, read-only: blob rows
are written by verified uploads, the rest by the append pipeline."""

from django.contrib import admin

from apps.ledger.admin import ReadOnlyModelAdmin, known_values_filter

from .models import Artifact, ArtifactEdge, Blob, BlobUpload, ContextPackage


@admin.register(Blob)
class BlobAdmin(ReadOnlyModelAdmin):
    list_display = ("hash", "size", "created_at", "corrupted_at")
    list_filter = ("corrupted_at",)
    search_fields = ("=hash",)
    ordering = ("-created_at",)


@admin.register(BlobUpload)
class BlobUploadAdmin(ReadOnlyModelAdmin):
    list_display = ("blob", "principal", "uploaded_at")
    search_fields = ("=blob__hash", "=principal")
    ordering = ("-id",)  # newest first, along the primary key


@admin.register(Artifact)
class ArtifactAdmin(ReadOnlyModelAdmin):
    list_display = ("hash", "group", "origin", "mission_id", "work_item_id", "producer",
                    "recorded_at")
    list_filter = (known_values_filter("origin", ("published", "received")), "group")
    list_select_related = ("group",)
    search_fields = ("=hash", "=mission_id", "=work_item_id", "=producer")
    ordering = ("group_id", "hash")


@admin.register(ArtifactEdge)
class ArtifactEdgeAdmin(ReadOnlyModelAdmin):
    list_display = ("source", "derived", "group")
    list_select_related = ("group",)
    search_fields = ("=source", "=derived")
    ordering = ("group_id", "derived", "source")


@admin.register(ContextPackage)
class ContextPackageAdmin(ReadOnlyModelAdmin):
    list_display = ("package_id", "version", "group", "mission_id", "work_item_id",
                    "published_at")
    list_filter = ("group",)
    list_select_related = ("group",)
    search_fields = ("=package_id", "=mission_id", "=work_item_id")
    ordering = ("group_id", "package_id", "version")
