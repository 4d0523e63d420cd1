"""The operators' admin over delivery Cursors, read-only: a principal moves its own by
acknowledging (PROTOCOL §4)."""

from django.contrib import admin

from apps.ledger.admin import ReadOnlyModelAdmin

from .models import Cursor


@admin.register(Cursor)
class CursorAdmin(ReadOnlyModelAdmin):
    list_display = ("principal", "group", "sequence", "updated_at")
    list_filter = ("group",)
    list_select_related = ("group",)
    search_fields = ("=principal",)
    ordering = ("group_id", "principal")
