"""The operators' admin over the record: the event log, its archive, snapshots and
command records, all read-only. The log changes only through the append pipeline;
here it is looked at, never edited.

ReadOnlyModelAdmin and the helpers below serve the admins of the apps above too."""

import json

from django.contrib import admin
from django.core.paginator import Paginator
from django.db import connection, models
from django.utils.functional import cached_property
from django.utils.html import format_html

from mission_weave.core.commands import COMMAND_TYPES
from mission_weave.core.evolve import MUTATORS

from .models import ArchivedEvent, CommandRecord, Event, Snapshot


class EstimatedCountPaginator(Paginator):
    """Counts an unfiltered big table from the planner's estimate: an exact COUNT(*) of
    millions of events would take seconds on every changelist page."""

    EXACT_BELOW = 100_000

    @cached_property
    def count(self):
        query = self.object_list.query
        if query.where:
            return super().count
        with connection.cursor() as cursor:
            cursor.execute("SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
                           [query.model._meta.db_table])
            estimate = cursor.fetchone()[0]
        return estimate if estimate >= self.EXACT_BELOW else super().count


def pretty_json(name: str):
    """A read-only display of JSON column `name`, indented (the admin's own puts it on
    one line)."""
    @admin.display(description=name.replace("_", " "))
    def show(obj):
        text = json.dumps(getattr(obj, name), indent=2, sort_keys=True, ensure_ascii=False)
        return format_html("<pre>{}</pre>", text)
    return show


def known_values_filter(field: str, values):
    """A list filter offering `values`. The admin's default for a text column asks the
    table for its DISTINCT values: a full scan of a big table on every page."""
    def lookups(self, request, model_admin):
        return [(value, value) for value in values]

    def queryset(self, request, queryset):
        return queryset.filter(**{field: self.value()}) if self.value() else queryset

    return type(f"{field.title()}Filter", (admin.SimpleListFilter,),
                {"title": field.replace("_", " "), "parameter_name": field,
                 "lookups": lookups, "queryset": queryset})


class ReadOnlyModelAdmin(admin.ModelAdmin):
    """The log and what is derived from it: viewable by staff, never added, changed or
    deleted, by superusers neither (so no bulk delete action either)."""

    show_full_result_count = False  # one COUNT per page, not two
    list_per_page = 50

    def __init__(self, model, admin_site):
        super().__init__(model, admin_site)
        for field in self._json_fields():
            setattr(self, f"{field.name}_pretty", pretty_json(field.name))

    def _json_fields(self):
        return [field for field in self.model._meta.concrete_fields
                if isinstance(field, models.JSONField)]

    def get_queryset(self, request):
        # No changelist shows a JSON column, and a page of documents can be megabytes.
        return super().get_queryset(request).defer(*(f.name for f in self._json_fields()))

    def get_fields(self, request, obj=None):
        """`fields` if given, else every column with the JSON ones indented."""
        if self.fields:
            return self.fields
        return [f"{field.name}_pretty" if isinstance(field, models.JSONField) else field.name
                for field in self.model._meta.concrete_fields]

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Event)
class EventAdmin(ReadOnlyModelAdmin):
    list_display = ("sequence", "group", "type", "actor", "mission_id", "work_item_id",
                    "occurred_at")
    list_filter = (known_values_filter("type", sorted(MUTATORS)), "group")
    list_select_related = ("group",)
    search_fields = ("=event_id", "=command_id", "=mission_id", "=work_item_id", "=actor")
    search_help_text = "An exact event, command, Mission or WorkItem id, or actor."
    # group_id, not group: the admin then sees (group, sequence) as a total order and
    # walks the unique index instead of adding -pk and sorting.
    ordering = ("group_id", "sequence")
    paginator = EstimatedCountPaginator


@admin.register(ArchivedEvent)
class ArchivedEventAdmin(EventAdmin):
    pass


@admin.register(Snapshot)
class SnapshotAdmin(ReadOnlyModelAdmin):
    list_display = ("id", "group", "sequence", "created_at")
    list_filter = ("group",)
    list_select_related = ("group",)
    search_fields = ("=id",)
    ordering = ("group_id", "sequence")


@admin.register(CommandRecord)
class CommandRecordAdmin(ReadOnlyModelAdmin):
    list_display = ("command_id", "group", "type", "actor", "work_item_id", "accepted",
                    "status", "created_at")
    list_filter = ("accepted", known_values_filter("type", sorted(COMMAND_TYPES)), "group")
    list_select_related = ("group",)
    search_fields = ("=command_id", "=work_item_id", "=actor")
    search_help_text = "An exact command or WorkItem id, or actor."
    ordering = ("-id",)  # newest first, along the primary key's index
    paginator = EstimatedCountPaginator
