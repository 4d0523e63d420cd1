"""The Group log page (issue 13): the Group's events, newest first, paged by sequence and
filtered by type, Mission, WorkItem and actor kind, with the hash chain's verification."""

from . import log_page
from .views import _render, member_page


@member_page
def group_log(request, viewer):
    filters = log_page.Filters.from_query(request.GET)
    page = log_page.log_page(viewer, filters, _before(request.GET.get("before")))
    return _render(request, viewer, "dashboard/log.html", page)


def _before(value: str | None) -> int | None:
    """`?before=<sequence>`: the page of events below it; absent or not a number, the newest."""
    if value is None:
        return None
    try:
        return min(max(int(value), 0), 2**62)  # within a bigint
    except ValueError:
        return None
