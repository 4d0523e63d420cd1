"""The layout of a Mission's work graph as an inline SVG, in layers (Sugiyama style): each
WorkItem in the column of its depth (the longest chain of dependencies under it), the
order within each column chosen by barycenter sweeps so that few edges cross, and each
edge a smooth curve from the right side of a dependency to the left side of what waits
on it. A WorkItem with a child Mission carries a badge or, expanded, the child's own
graph as a cluster below it. Pure: plain data in, plain data out.

Input, `nodes`: id -> {state, goal, depends_on, policy, child}, where child is None or
{id, title, state, nodes (the same shape), count (optional: len(nodes) by default)}."""

import itertools
from bisect import bisect_right, insort
from typing import Any
from urllib.parse import quote

from mission_weave.core import state
from mission_weave.core.dag import dependencies_met

# The WorkItem states in lifecycle order, for the legend.
STATES = (state.OPEN, state.OFFERED, state.QUEUED, state.ACTIVE, state.BLOCKED,
          state.SUBMITTED, state.VERIFIED, state.FAILED, state.CANCELLED)

NODE_WIDTH, NODE_HEIGHT = 176, 52
GAP_X, GAP_Y, MARGIN = 72, 16, 12
# Where a long edge crosses a column it takes a thin lane of its own, so that it runs
# between the boxes of that column rather than through them.
LANE_HEIGHT, LANE_GAP = 4, 6
BADGE_HEIGHT = 34
CLUSTER_INDENT, CLUSTER_GAP, CLUSTER_PAD, CLUSTER_HEADER = 20, 14, 12, 40
TOGGLE = 18  # the side of the expand/collapse square
ARC_LIFT = 40  # how far above the boxes an edge drawn right to left (a cycle's) arches
TEXT_PAD, CHAR_WIDTH, ID_CHARS = 8, 7.2, 22  # the labels' 12px monospace font
SWEEPS = 8  # barycenter passes, alternately down and up the layers
PLACEMENT_PASSES = 3
# The state counted for a dependency outside the Mission: none of the states, so not
# verified (nor terminal) for dependencies_met().
OUTSIDE = "outside"

# An element of a layer: an item id, or a lane (source, target, layer) (see _layers).
Element = str | tuple[str, str, int]


def layout(nodes: dict, expanded=frozenset(), cycle: list | None = None,
           sweeps: int = SWEEPS) -> dict:
    """{width, height, nodes, edges, cycle_edges, verdicts} for `nodes` (see the module's
    docstring), with the child Missions whose ids are in `expanded` drawn as clusters
    and `cycle` (DEPENDENCY_CYCLE's details.cycle: each id depends on the next) marked.
    `sweeps=0` keeps each column in id order."""
    drawing = _arrange(nodes, set(expanded), sweeps)
    cycle_edges = _mark_cycle(drawing, cycle or [])
    edges = drawing["edges"] + cycle_edges
    lift = ARC_LIFT if any(e["arc"] for e in edges) else 0  # room above for the arcs
    _shift({"nodes": drawing["nodes"], "edges": edges}, MARGIN, MARGIN + lift)
    for node in drawing["nodes"]:
        _label(node)
    for edge in edges:
        edge["d"] = _path(edge)
    return {"width": drawing["width"] + 2 * MARGIN,
            "height": drawing["height"] + 2 * MARGIN + lift,
            "nodes": drawing["nodes"], "edges": drawing["edges"], "cycle_edges": cycle_edges,
            "verdicts": drawing["verdicts"], "states": STATES}


def expand_link(expanded, child_id: str) -> str:
    """The query string that toggles `child_id` in the set of expanded child Missions."""
    toggled = sorted(set(expanded) ^ {child_id})
    return "?expand=" + ",".join(quote(i, safe="") for i in toggled) if toggled else "?"


def crossings(drawing: dict) -> int:
    """How many times the drawing's edges cross. All the segments between two columns
    start and end at the same two x: two of them cross when their ends swap order."""
    between: dict[tuple[float, float], list[tuple[float, float]]] = {}
    for edge in drawing["edges"]:
        if not edge["arc"]:
            for (x0, y0), (x1, y1) in zip(edge["points"], edge["points"][1:]):
                between.setdefault((x0, x1), []).append((y0, y1))
    return sum(_inversions(pairs) for pairs in between.values())


def depths(depends_on: dict) -> dict:
    """id -> depth: 0 for an item with no dependency in the graph, else one more than its
    deepest dependency. Dependencies outside the graph are ignored; a cycle (which the
    server refuses, DEPENDENCY_CYCLE) is cut rather than followed. Iterative, so that a
    long chain cannot exhaust Python's recursion limit."""
    found: dict[str, int] = {}
    for root in sorted(depends_on):
        if root in found:
            continue
        stack, visiting = [root], {root}
        while stack:
            node = stack[-1]
            pending = [d for d in depends_on[node]
                       if d in depends_on and d not in found and d not in visiting]
            if pending:
                stack.append(pending[0])
                visiting.add(pending[0])
                continue
            below = [found[d] for d in depends_on[node] if d in found]
            found[node] = 1 + max(below) if below else 0
            stack.pop()
            visiting.discard(node)
    return found


# --- one Mission's drawing, at (0, 0) --------------------------------------------------
# A drawing is {width, height, nodes, edges, verdicts}, nested clusters included; an edge
# keeps its points (numbers) until the end, when the whole drawing has moved into place.

def _arrange(nodes: dict, expanded: set, sweeps: int) -> dict:
    depends_on = {i: tuple(dict.fromkeys(d for d in nodes[i]["depends_on"] if d in nodes))
                  for i in nodes}
    blocks = {i: _item_block(i, nodes[i], expanded, sweeps) for i in sorted(nodes)}
    layers, up, down, routes, backward = _layers(depends_on, depths(depends_on))
    order = _order(layers, up, down, sweeps)
    height = {e: blocks[e]["height"] if e in blocks else LANE_HEIGHT for e in up}
    anchor = {e: NODE_HEIGHT // 2 if e in blocks else LANE_HEIGHT // 2 for e in up}
    top = _place(order, height, anchor, up, down)
    widths = [max(blocks[e]["width"] for e in layer if e in blocks) for layer in order]
    lefts = [sum(widths[:k]) + k * GAP_X for k in range(len(order))]

    drawing: dict[str, Any] = {"width": lefts[-1] + widths[-1] if order else 0,
               "height": max((top[e] + height[e] for e in top), default=0),
               "nodes": [], "edges": [], "verdicts": {}}
    column = {e: k for k, layer in enumerate(order) for e in layer}
    for k, layer in enumerate(order):
        for element in layer:
            if element in blocks:
                _shift(blocks[element], lefts[k], top[element])
                _merge(drawing, blocks[element])
    for (source, target), route in routes.items():
        points = []
        for element in route:  # across each column at the height of its box or lane
            k, y = column[element], top[element] + anchor[element]
            start = lefts[k] + NODE_WIDTH if element == source else lefts[k]
            end = lefts[k] if element == target else lefts[k] + widths[k]
            points += [(start, y)] if start == end else [(start, y), (end, y)]
        drawing["edges"].append(_edge(nodes, source, target, points))
    boxes = {n["id"]: n for n in drawing["nodes"]}
    for source, target in backward:
        drawing["edges"].append(_edge(nodes, source, target,
                                      _arc(boxes[source], boxes[target]), arc=True))
    for item_id in sorted(nodes):
        # A dependency outside the Mission has no state here: counted as not verified.
        states = [nodes[d]["state"] if d in nodes else OUTSIDE
                  for d in nodes[item_id]["depends_on"]]
        drawing["verdicts"][item_id] = dependencies_met(nodes[item_id]["policy"], states)
    return drawing


def _item_block(item_id: str, node: dict, expanded: set, sweeps: int) -> dict:
    """The item's box, and under it its child Mission's badge or expanded cluster."""
    box = {"id": item_id, "kind": "item", "x": 0, "y": 0, "width": NODE_WIDTH,
           "height": NODE_HEIGHT, "state": node["state"], "goal": node["goal"],
           "in_cycle": False}
    block: dict[str, Any] = {"width": NODE_WIDTH, "height": NODE_HEIGHT, "nodes": [box],
                             "edges": [], "verdicts": {}}
    child = node.get("child")
    if not child:
        return block
    is_open = child["id"] in expanded
    box.update(kind="child", child_id=child["id"], child_title=child["title"],
               child_state=child["state"], count=child.get("count", len(child["nodes"])),
               expanded=is_open,
               toggle={"href": expand_link(expanded, child["id"]),
                       "mark": "−" if is_open else "+",
                       "label": f"{'collapse' if is_open else 'expand'} child {child['id']}"})
    if not is_open:
        box["child_box"] = {"x": 0, "y": NODE_HEIGHT, "width": NODE_WIDTH,
                            "height": BADGE_HEIGHT}
        block["height"] += BADGE_HEIGHT
        return block
    inner = _arrange(child["nodes"], expanded, sweeps)
    top = NODE_HEIGHT + CLUSTER_GAP
    cluster = {"x": CLUSTER_INDENT, "y": top,
               "width": max(NODE_WIDTH, inner["width"] + 2 * CLUSTER_PAD),
               "height": CLUSTER_HEADER + inner["height"] + CLUSTER_PAD}
    box["child_box"] = cluster
    _shift(inner, CLUSTER_INDENT + CLUSTER_PAD, top + CLUSTER_HEADER)
    _merge(block, inner)
    block["width"] = CLUSTER_INDENT + cluster["width"]
    block["height"] = top + cluster["height"]
    return block


def _edge(nodes: dict, source: str, target: str, points: list, arc: bool = False) -> dict:
    policy = nodes[target]["policy"]
    # Met: this one dependency's state gives the policy what it needs from it.
    return {"source": source, "target": target, "policy": policy,
            "met": dependencies_met(policy, [nodes[source]["state"]]),
            "in_cycle": False, "arc": arc, "points": points}


def _arc(source: dict, target: dict) -> list:
    """The points of a cubic arching above the boxes, for an edge that cannot run left to
    right: one that closes a cycle (or, in a graph holding one, is cut by depths())."""
    start = (source["x"] + NODE_WIDTH // 2, source["y"])
    end = (target["x"] + NODE_WIDTH // 2, target["y"])
    crest = min(start[1], end[1]) - ARC_LIFT
    return [start, (start[0] + 24, crest), (end[0] - 24, crest), end]


def _mark_cycle(drawing: dict, cycle: list) -> list:
    """Mark the edges and items on `cycle`; return its edges that are not real edges (the
    refused one) as extra edges."""
    boxes = {n["id"]: n for n in drawing["nodes"]}
    real = {(e["source"], e["target"]): e for e in drawing["edges"]}
    extra = []
    for dependant, dependency in itertools.pairwise(cycle):
        if dependant not in boxes or dependency not in boxes:
            continue
        boxes[dependant]["in_cycle"] = boxes[dependency]["in_cycle"] = True
        if (dependency, dependant) in real:
            real[(dependency, dependant)]["in_cycle"] = True
        else:
            extra.append({"source": dependency, "target": dependant, "in_cycle": True,
                          "arc": True, "points": _arc(boxes[dependency], boxes[dependant])})
    return extra


def _shift(drawing: dict, dx: int, dy: int):
    for node in drawing["nodes"]:
        for box in (node, node.get("child_box")):
            if box:
                box["x"] += dx
                box["y"] += dy
    for edge in drawing["edges"]:
        edge["points"] = [(x + dx, y + dy) for x, y in edge["points"]]


def _merge(drawing: dict, part: dict):
    drawing["nodes"] += part["nodes"]
    drawing["edges"] += part["edges"]
    drawing["verdicts"].update(part["verdicts"])


# --- layers and their order ------------------------------------------------------------
# An element of a layer is an item id (str) or a lane (source, target, layer): one column
# that the edge source -> target crosses.

def _layers(depends_on: dict, level: dict):
    layers: list[list[Element]] = [[] for _ in range(1 + max(level.values(), default=-1))]
    for node in sorted(depends_on):
        layers[level[node]].append(node)
    up: dict[Element, list[Element]] = {n: [] for n in depends_on}
    down: dict[Element, list[Element]] = {n: [] for n in depends_on}
    routes: dict[tuple[str, str], list[Element]] = {}
    backward: list[tuple[str, str]] = []
    for target in sorted(depends_on):
        for source in depends_on[target]:
            if level[source] >= level[target]:
                backward.append((source, target))
                continue
            lanes = [(source, target, k) for k in range(level[source] + 1, level[target])]
            for lane in lanes:
                layers[lane[2]].append(lane)
                up[lane], down[lane] = [], []
            route = [source, *lanes, target]
            for a, b in itertools.pairwise(route):
                down[a].append(b)
                up[b].append(a)
            routes[(source, target)] = route
    return layers, up, down, routes, backward


def _order(layers: list, up: dict, down: dict, sweeps: int) -> list:
    """Barycenter sweeps, alternately down (each element moves to the mean position of
    its neighbours in the layer before) and up; the ordering with fewest crossings wins."""
    best = current = layers
    fewest = _layer_crossings(layers, down)
    for sweep in range(sweeps):
        downward = sweep % 2 == 0
        current = _sweep(current, up if downward else down, downward)
        count = _layer_crossings(current, down)
        if count < fewest:
            best, fewest = current, count
    return best


def _sweep(layers: list, neighbours: dict, downward: bool) -> list:
    layers = list(layers)
    rank = {e: i for layer in layers for i, e in enumerate(layer)}

    def barycenter(element):
        near = neighbours[element]
        # An element with no neighbour there keeps its place; ties keep their order.
        return (sum(rank[n] for n in near) / len(near) if near else rank[element],
                rank[element])

    for k in range(1, len(layers)) if downward else range(len(layers) - 2, -1, -1):
        layers[k] = sorted(layers[k], key=barycenter)
        rank.update((e, i) for i, e in enumerate(layers[k]))
    return layers


def _layer_crossings(layers: list, down: dict) -> int:
    total = 0
    for upper, lower in itertools.pairwise(layers):
        rank = {e: i for i, e in enumerate(lower)}
        total += _inversions([(i, rank[b]) for i, a in enumerate(upper) for b in down[a]])
    return total


def _inversions(pairs: list) -> int:
    """Pairs (a, b), (a', b') with a < a' and b > b': segments whose ends swap order.
    Segments sharing an end (equal a or equal b) do not cross."""
    seen: list[float] = []
    count = 0
    for _, b in sorted(pairs):
        count += len(seen) - bisect_right(seen, b)
        insort(seen, b)
    return count


# --- heights ---------------------------------------------------------------------------

def _place(order: list, height: dict, anchor: dict, up: dict, down: dict) -> dict:
    """The top of each element: stacked in its layer's order, then moved, alternately down
    and up the layers, as near as the order allows to the mean height of its neighbours,
    so that edges run as straight as they can."""
    top: dict[Element, int] = {}
    for layer in order:
        top.update(zip(layer, _fit(layer, [0] * len(layer), height)))
    for placement in range(PLACEMENT_PASSES):
        downward = placement % 2 == 0
        neighbours = up if downward else down
        for layer in order[1:] if downward else order[-2::-1]:
            wanted = [sum(top[n] + anchor[n] for n in neighbours[e]) / len(neighbours[e])
                      - anchor[e] if neighbours[e] else top[e] for e in layer]
            top.update(zip(layer, _fit(layer, wanted, height)))
    least = min(top.values(), default=0)
    return {e: t - least for e, t in top.items()}


def _gap(a, b) -> int:
    return LANE_GAP if isinstance(a, tuple) and isinstance(b, tuple) else GAP_Y


def _fit(layer: list, wanted: list, height: dict) -> list:
    """Whole-pixel tops for `layer`, in its order and apart by at least the gaps, nearest
    to `wanted` in least squares: subtract from each top the room the elements above it
    need, and what remains must not decrease: an isotonic regression (pool adjacent
    violators)."""
    room = [0]
    for a, b in itertools.pairwise(layer):
        room.append(room[-1] + height[a] + _gap(a, b))
    pools = []  # [sum, count] of adjacent elements that share one value
    for w, r in zip(wanted, room):
        pools.append([w - r, 1])
        while len(pools) > 1 and pools[-2][0] * pools[-1][1] > pools[-1][0] * pools[-2][1]:
            total, count = pools.pop()
            pools[-1][0] += total
            pools[-1][1] += count
    values = [total / count for total, count in pools for _ in range(count)]
    tops: list[int] = []
    for i, (value, r) in enumerate(zip(values, room)):
        top = round(value + r)
        if tops:  # rounding must not bring two elements closer than their gap
            top = max(top, tops[-1] + r - room[i - 1])
        tops.append(top)
    return tops


# --- labels and paths ------------------------------------------------------------------

def _label(node: dict):
    """Text lines with their positions, so that the template only prints them."""
    x, y = node["x"] + TEXT_PAD, node["y"]
    ids = _truncate(node["id"], 2 * ID_CHARS)
    node["lines"] = [{"text": ids[i:i + ID_CHARS], "x": x, "y": y + 17 + 14 * n, "cls": "id"}
                     for n, i in enumerate(range(0, len(ids), ID_CHARS))]
    node["lines"].append({"text": node["state"], "x": x, "y": y + NODE_HEIGHT - 8,
                          "cls": "sub"})
    box = node.get("child_box")
    if not box:
        return
    count = f"{node['count']} item{'' if node['count'] == 1 else 's'}"
    node["child_summary"] = f"child {node['child_id']} ({count}, {node['child_state']})"
    chars = int((box["width"] - 2 * TEXT_PAD - TOGGLE) / CHAR_WIDTH)
    if node["expanded"]:
        first = _truncate(node["child_title"], chars)
        second = _truncate(f"child {node['child_id']} · {count} · {node['child_state']}", chars)
        # The dashed edge from the item down to its cluster's header.
        x0, y0 = node["x"] + CLUSTER_INDENT // 2, node["y"] + NODE_HEIGHT
        x1, y1 = box["x"], box["y"] + CLUSTER_HEADER // 2
        node["connector"] = f"M{x0},{y0} C{x0},{y1} {x0},{y1} {x1},{y1}"
    else:
        first = _truncate(f"child {node['child_id']}", chars)
        second = _truncate(f"{count} · {node['child_state']}", chars)
    bx = box["x"] + TEXT_PAD
    box["lines"] = [{"text": first, "x": bx, "y": box["y"] + 14, "cls": "title"},
                    {"text": second, "x": bx, "y": box["y"] + 28, "cls": "sub"}]
    tx, ty = box["x"] + box["width"] - TOGGLE - 4, box["y"] + 4
    node["toggle"].update(x=tx, y=ty, size=TOGGLE, text_x=tx + TOGGLE // 2, text_y=ty + 14)


def _truncate(text: str, most: int) -> str:
    return text if len(text) <= most else text[:most - 1] + "…"


def _path(edge: dict) -> str:
    """SVG path data: an arc is one cubic through its points; any other edge runs straight
    along a column and, between columns, as a cubic with level ends (smooth at each
    joint)."""
    points = edge["points"]
    (x, y), rest = points[0], points[1:]
    if edge["arc"]:
        return f"M{x},{y} C" + " ".join(f"{px},{py}" for px, py in rest)
    parts = [f"M{x},{y}"]
    for (x0, y0), (x1, y1) in zip(points, rest):
        middle = (x0 + x1) // 2
        parts.append(f"L{x1},{y1}" if y0 == y1 else f"C{middle},{y0} {middle},{y1} {x1},{y1}")
    return " ".join(parts)
