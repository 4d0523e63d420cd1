"""Template filters of the dashboard."""

import json
from datetime import datetime

from django import template
from django.utils.html import format_html

from mission_weave.protocol.timefmt import UTC, format_time, parse_time

register = template.Library()


@register.filter
def when(value):
    """A moment as people read it, to the second and in UTC, which it says:
    `<time datetime="2026-11-29T08:00:00.123456Z">2026-11-29 08:00:00 UTC</time>`, the
    exact value (as the wire has it) in the element's `datetime`. Takes an aware datetime or
    an RFC 3339 string (what the reads and event data hold); anything else is shown as it is,
    nothing as nothing."""
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        try:
            moment = parse_time(value)
        except ValueError:
            return value
    elif isinstance(value, datetime) and value.tzinfo is not None:
        moment = value.astimezone(UTC)
    else:
        return value
    shown = moment.replace(microsecond=0, tzinfo=None).isoformat(sep=" ")
    return format_html('<time datetime="{}">{} UTC</time>', format_time(moment), shown)


@register.filter
def as_json(value) -> str:
    """A value as the JSON it is on the wire (not Python's repr): strings quoted with ",
    true/false/null."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


@register.simple_tag
def work_graph(graph: dict, group_id: str):
    """The work graph's markup (apps/dashboard/mission_markup.py), for _graph.html."""
    from ..mission_markup import render_graph  # the module imports `when` from here

    return render_graph(graph, group_id)
