"""The operators' admin over the work projections, read-only: they are written only by
the append pipeline and rebuilt from the log by mw_verify."""

from django.contrib import admin

from apps.ledger.admin import ReadOnlyModelAdmin, known_values_filter
from mission_weave.core import lifecycle, state

from .models import Mission, Proposal, WorkItem

MISSION_STATES = (state.MISSION_ACTIVE, state.MISSION_APPROVED, state.MISSION_FAILED,
                  state.MISSION_CANCELLED)
# `none` and `proposal` name no WorkItem row (proposals have a table of their own).
WORK_ITEM_STATES = tuple(s for s in lifecycle.STATES
                         if s not in (lifecycle.NONE, lifecycle.PROPOSAL))


@admin.register(Mission)
class MissionAdmin(ReadOnlyModelAdmin):
    list_display = ("mission_id", "group", "state", "title", "revision", "updated_at")
    list_filter = (known_values_filter("state", MISSION_STATES), "group")
    list_select_related = ("group",)
    search_fields = ("=mission_id", "=parent_work_item_id")
    ordering = ("group_id", "mission_id")


@admin.register(WorkItem)
class WorkItemAdmin(ReadOnlyModelAdmin):
    list_display = ("work_item_id", "group", "mission_id", "state", "owner", "revision",
                    "updated_at")
    list_filter = (known_values_filter("state", WORK_ITEM_STATES), "group")
    list_select_related = ("group",)
    search_fields = ("=work_item_id", "=mission_id", "=owner")
    ordering = ("group_id", "work_item_id")


@admin.register(Proposal)
class ProposalAdmin(ReadOnlyModelAdmin):
    list_display = ("proposal_id", "group", "mission_id", "status")
    list_filter = ("status", "group")
    list_select_related = ("group",)
    search_fields = ("=proposal_id", "=mission_id")
    ordering = ("group_id", "proposal_id")
