"""Template filters of the dashboard."""

import json

from django import template

register = template.Library()


@register.filter
def as_json(value) -> str:
    """A value as the JSON it is on the wire (not Python's repr): strings quoted with ",
    true/false/null."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
