"""The Mission page's per-WorkItem markup, built in Python (issue 27): the work graph, the
WorkItems table, the per-WorkItem budgets, the edge form's options and the list of what
ending the Mission ends. At 2,000 WorkItems these are some 200,000 template variables and
10,000 `{% url %}` tags, seconds of a page in Django's template engine; here each row is
one string. Every value goes through conditional_escape, as the template's autoescape
did, and the markup is the one the templates wrote (tests/integration/test_dashboard*.py
read it). The graph's markup depends only on the graph's input, so it is cached under a
digest of that input: any change of a WorkItem, an edge, a state or a child Mission is a
new key (see graph_markup)."""

import hashlib
import json
from collections.abc import Callable, Iterable
from html import escape as _escape
from urllib.parse import quote

from django.conf import settings
from django.core.cache import cache
from django.urls import reverse
from django.urls.resolvers import RFC3986_SUBDELIMS
from django.utils.formats import localize
from django.utils.html import conditional_escape
from django.utils.safestring import SafeString, mark_safe

from .templatetags.dashboard import when

GRAPH_CACHE_SECONDS = 24 * 3600  # a key is never stale (a digest), only unused
GRAPH_KEY = "mw:dashboard:graph:"
_SENTINEL = "mw0sentinel0id"
AMBIGUITY = ' <span class="warn">ambiguity open</span>'
OVER = ' class="over"'


def e(value) -> str:
    """A value as `{{ value }}` prints it with autoescape on. A plain str (not SafeString,
    which conditional_escape keeps as it is) and an int (which localize() prints as str()
    without a thousand separator) take a shorter path to the same text: Django's escape()
    is html.escape(str(text)), here without its lazy-string wrapper, some 65,000 calls on a
    2,000-WorkItem page (issue 27)."""
    kind = type(value)
    if kind is str:
        return _escape(value)
    if kind is int and not settings.USE_THOUSAND_SEPARATOR:
        return str(value)
    if isinstance(value, str):
        return conditional_escape(value)
    if value is None:
        return "None"
    return conditional_escape(str(localize(value)))


def url_maker(name: str, *args: str) -> Callable[[str], str]:
    """id -> reverse(name, args=[*args, id]), escaped for an attribute, with one reverse()
    for all of them: the rest of the path does not depend on the id, and reverse() quotes
    character by character. An id reverse() would refuse (a `/`) still goes through it."""
    before, after = reverse(f"dashboard:{name}", args=[*args, _SENTINEL]).split(_SENTINEL)
    safe = RFC3986_SUBDELIMS + "/~:@"
    made: dict[str, str] = {}

    def url(item_id: str) -> str:
        found = made.get(item_id)
        if found is None:
            if "/" in item_id or "\x00" in item_id:
                path = reverse(f"dashboard:{name}", args=[*args, item_id])
            else:
                path = before + quote(item_id, safe=safe) + after
            found = made[item_id] = conditional_escape(path)
        return found

    return url


# --- the work graph (was templates/dashboard/_graph.html) -------------------------------

def graph_key(group_id: str, nodes: dict, expanded: Iterable, cycle: list | None) -> str:
    """The cache key of a graph's markup: a digest of everything layout() and the markup
    read (the nodes hold each WorkItem's state, goal, edges, policy and child Mission)."""
    source = json.dumps([group_id, nodes, sorted(expanded), cycle], sort_keys=True,
                        default=list, ensure_ascii=False)
    return GRAPH_KEY + hashlib.sha256(source.encode()).hexdigest()


def graph_markup(group_id: str, nodes: dict, expanded: Iterable, cycle: list | None,
                 draw: Callable[[], dict]) -> SafeString:
    """The graph's markup from the cache, else `draw()`n, rendered and kept."""
    key = graph_key(group_id, nodes, expanded, cycle)
    markup = cache.get(key)
    if markup is None:
        markup = render_graph(draw(), group_id)
        cache.set(key, str(markup), GRAPH_CACHE_SECONDS)
    return mark_safe(markup)  # built from escaped values only, by render_graph


def _lines(lines: list) -> str:
    return "".join(f'<text class="{e(line["cls"])}" x="{e(line["x"])}" y="{e(line["y"])}">'
                   f'{e(line["text"])}</text>' for line in lines)


def _rect(box: dict, rx: int) -> str:
    return (f'<rect x="{e(box["x"])}" y="{e(box["y"])}" width="{e(box["width"])}" '
            f'height="{e(box["height"])}" rx="{rx}"></rect>')


_LEGEND_MARKERS = "".join(
    f'    <marker id="arrow-{name}" class="arrow {cls}" viewBox="0 0 10 10" refX="10" refY="5" '
    f'markerUnits="userSpaceOnUse" markerWidth="9" markerHeight="9" '
    f'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z"></path></marker>\n'
    for name, cls in (("met", "met"), ("unmet", "unmet"), ("cycle", "in-cycle")))


def render_graph(graph: dict, group_id: str) -> SafeString:
    item_url = url_maker("work_item", group_id)
    mission_url = url_maker("mission", group_id)
    out = ['<div class="work-graph">\n'
           '<ul class="graph-legend" aria-label="Legend of the work graph">\n  ']
    out += [f'<li><span class="swatch state-{e(s)}"></span>{e(s)}</li>' for s in graph["states"]]
    out.append(
        '\n  <li><svg width="28" height="10" aria-hidden="true"><path class="edge met" '
        'd="M0,5 H28"></path></svg>dependency met</li>\n'
        '  <li><svg width="28" height="10" aria-hidden="true"><path class="edge unmet" '
        'd="M0,5 H28"></path></svg>not met</li>\n'
        '  <li><svg width="28" height="10" aria-hidden="true"><path class="edge in-cycle" '
        'd="M0,5 H28"></path></svg>closes a cycle</li>\n'
        '  <li><svg width="28" height="10" aria-hidden="true"><path class="connector" '
        'd="M0,5 H28"></path></svg>child Mission</li>\n</ul>\n<div class="graph-box">\n'
        f'<svg id="work-graph" class="graph" width="{e(graph["width"])}" '
        f'height="{e(graph["height"])}" viewBox="0 0 {e(graph["width"])} '
        f'{e(graph["height"])}" role="group" aria-label="WorkItem dependencies">\n'
        f'  <defs>\n{_LEGEND_MARKERS}  </defs>\n  ')
    for n in graph["nodes"]:  # clusters first: what comes later paints on top
        if n.get("expanded"):
            out.append(
                f'\n  <g class="cluster state-{e(n["child_state"])}" '
                f'data-child="{e(n["child_id"])}" data-expanded="true">\n'
                f'    <path class="connector" d="{e(n["connector"])}"></path>\n'
                f'    {_rect(n["child_box"], 10)}\n'
                f'    <a href="{mission_url(n["child_id"])}" aria-label="{e(n["child_summary"])}">'
                f'<title>{e(n["child_title"])}</title>{_lines(n["child_box"]["lines"])}</a>\n'
                f'  </g>')
    out.append("\n  ")
    for edge in graph["edges"]:
        met = "met" if edge["met"] else "not met"
        marker = "cycle" if edge["in_cycle"] else "met" if edge["met"] else "unmet"
        out.append(
            f'\n  <path class="edge {"met" if edge["met"] else "unmet"}'
            f'{" in-cycle" if edge["in_cycle"] else ""}" d="{e(edge["d"])}" '
            f'marker-end="url(#arrow-{marker})" '
            f'data-edge="{e(edge["source"])}->{e(edge["target"])}" '
            f'data-met="{"true" if edge["met"] else "false"}"><title>{e(edge["target"])} '
            f'depends on {e(edge["source"])} ({met} under {e(edge["policy"])})'
            f'{", on the refused cycle" if edge["in_cycle"] else ""}</title></path>')
    out.append("\n  ")
    for edge in graph["cycle_edges"]:
        out.append(
            f'\n  <path class="edge in-cycle proposed" d="{e(edge["d"])}" '
            f'marker-end="url(#arrow-cycle)" '
            f'data-edge="{e(edge["source"])}->{e(edge["target"])}" data-met="false" '
            f'data-cycle="true"><title>{e(edge["target"])} depends on {e(edge["source"])}: '
            f'closes a cycle</title></path>')
    out.append("\n  ")
    for n in graph["nodes"]:
        out.append(
            f'\n  <a class="node state-{e(n["state"])}{" in-cycle" if n["in_cycle"] else ""}" '
            f'href="{item_url(n["id"])}" aria-label="{e(n["id"])}: {e(n["state"])}" '
            f'data-item="{e(n["id"])}" data-state="{e(n["state"])}"><title>{e(n["goal"])}'
            f'</title>\n    {_rect(n, 6)}{_lines(n["lines"])}</a>\n  ')
        if n["kind"] == "child" and not n["expanded"]:
            out.append(
                f'\n  <g class="badge state-{e(n["child_state"])}" data-child="{e(n["child_id"])}" '
                f'data-expanded="false">\n'
                f'    <a href="{mission_url(n["child_id"])}" aria-label="{e(n["child_summary"])}">'
                f'<title>{e(n["child_title"])}</title>\n      {_rect(n["child_box"], 4)}'
                f'{_lines(n["child_box"]["lines"])}</a>\n  </g>')
    out.append("\n  ")
    for n in graph["nodes"]:
        if n["kind"] == "child":
            t = n["toggle"]
            out.append(
                f'\n  <a class="toggle" href="{e(t["href"])}#work-graph" '
                f'aria-label="{e(t["label"])}" '
                f'data-toggle="{e(n["child_id"])}"><title>{e(t["label"])}</title>'
                f'<rect x="{e(t["x"])}" y="{e(t["y"])}" width="{e(t["size"])}" '
                f'height="{e(t["size"])}" rx="3"></rect><text x="{e(t["text_x"])}" '
                f'y="{e(t["text_y"])}" text-anchor="middle">{e(t["mark"])}</text></a>')
    out.append('\n</svg>\n</div>\n<details class="graph-edges"><summary>Edges as a list'
               '</summary>\n<ul id="work-graph-edges">\n  ')
    for edge in graph["edges"]:
        out.append(
            f'<li class="{"met" if edge["met"] else "unmet"}"><a href="{item_url(edge["target"])}">'
            f'{e(edge["target"])}</a> depends on <a href="{item_url(edge["source"])}">'
            f'{e(edge["source"])}</a>: {"met" if edge["met"] else "not met"} under '
            f'{e(edge["policy"])}{", on the refused cycle" if edge["in_cycle"] else ""}</li>\n  ')
    for edge in graph["cycle_edges"]:
        out.append(
            f'<li class="in-cycle"><a href="{item_url(edge["target"])}">{e(edge["target"])}</a> '
            f'depends on <a href="{item_url(edge["source"])}">{e(edge["source"])}</a>: refused, '
            f'closes a cycle</li>\n  ')
    if not graph["edges"] and not graph["cycle_edges"]:
        out.append("<li>No dependencies.</li>")
    out.append("\n</ul>\n</details>\n</div>\n")
    return mark_safe("".join(out))


# --- the page's other per-WorkItem rows -------------------------------------------------

def rows(group_id: str, items: list, unfinished: list, item_budgets: list) -> dict:
    """{work_items, item_budgets, options, ending}: the rows of the page's per-WorkItem
    tables and lists, as the template printed them."""
    item_url = url_maker("work_item", group_id)
    return {"work_items": work_item_rows(items, item_url),
            "item_budgets": budget_rows(item_budgets, item_url),
            "options": mark_safe("".join(f'<option value="{e(i.id)}">{e(i.id)}</option>'
                                         for i in items)),
            "ending": mark_safe("".join(
                f'<li><a href="{item_url(i.id)}">{e(i.id)}</a> <span class="state '
                f'state-{e(i.state)}">{e(i.state)}</span> {e(_truncate(i.contract["goal"]))}</li>'
                for i in unfinished))}


def _truncate(text: str, length: int = 80) -> str:
    from django.utils.text import Truncator  # what |truncatechars:80 does

    return Truncator(text).chars(length)


def work_item_rows(items: list, item_url: Callable[[str], str]) -> SafeString:
    out = []
    for item in items:
        depends = ", ".join(f'<a href="{item_url(d)}">{e(d)}</a>' for d in item.depends_on)
        lease = when(item.live_lease.expires_at) if item.live_lease else "—"
        out.append(
            f'\n    <tr data-item="{e(item.id)}"><td><a href="{item_url(item.id)}">{e(item.id)}'
            f'</a></td>\n        <td>{e(item.contract.get("goal", ""))}</td>\n'
            f'        <td><span class="state state-{e(item.state)}">{e(item.state)}</span>'
            f'{AMBIGUITY if item.open_ambiguities else ""}</td>\n'
            f'        <td>{e(item.owner or "—")}</td>\n'
            f'        <td>{depends or "—"}\n            '
            f'{f"<small>({e(item.dependency_policy)})</small>" if item.depends_on else ""}'
            f'</td>\n        <td>{e(lease)}</td></tr>\n  ')
    return mark_safe("".join(out))


def budget_rows(item_budgets: list, item_url: Callable[[str], str]) -> SafeString:
    out = []
    for entry in item_budgets:
        item_id = entry["item"].id
        cells = []
        for row in entry["budgets"]:
            text = e(row["charged"])
            if row["charged_unit"]:
                text += f' {e(row["charged_unit"])}'
            if row["allowed"] is not None:
                text += f' of {e(row["allowed"])}' + (f' {e(row["unit"])}' if row["unit"] else "")
            if row["over"]:
                text += ' <span class="over-flag">over</span>'
            cells.append(f'<td data-dimension="{e(row["dimension"])}"'
                         f'{OVER if row["over"] else ""}>{text}</td>')
        out.append(f'\n  <tr data-budget-item="{e(item_id)}"><th scope="row"><a href='
                   f'"{item_url(item_id)}">{e(item_id)}</a></th>\n    {"".join(cells)}</tr>\n  ')
    return mark_safe("".join(out))
