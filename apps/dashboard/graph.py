"""The layout of a Mission's work graph as an inline SVG: each WorkItem in the column
of its depth (the longest chain of dependencies under it), edges from a dependency to
what waits on it. Pure: plain data in, plain data out."""

NODE_WIDTH, NODE_HEIGHT = 160, 40
GAP_X, GAP_Y, MARGIN = 56, 18, 8


def depths(depends_on: dict) -> dict:
    """id -> depth: 0 for an item with no dependency in the graph, else one more than its
    deepest dependency. Dependencies outside the graph are ignored; a cycle (which the
    server refuses, DEPENDENCY_CYCLE) would be cut rather than loop."""
    found, visiting = {}, set()

    def depth(node):
        if node in found:
            return found[node]
        visiting.add(node)
        below = [depth(d) for d in depends_on[node] if d in depends_on and d not in visiting]
        visiting.discard(node)
        found[node] = 1 + max(below) if below else 0
        return found[node]

    for node in sorted(depends_on):
        depth(node)
    return found


def layout(depends_on: dict) -> dict:
    """{width, height, nodes: [{id, x, y, width, height}], edges: [{source, target, x1, y1,
    x2, y2}]} for `depends_on` (id -> ids it depends on)."""
    level = depths(depends_on)
    columns = {}
    for node in sorted(depends_on):
        columns.setdefault(level[node], []).append(node)
    place = {}
    for column, members in columns.items():
        for row, node in enumerate(members):
            place[node] = (MARGIN + column * (NODE_WIDTH + GAP_X),
                           MARGIN + row * (NODE_HEIGHT + GAP_Y))
    nodes = [{"id": n, "x": x, "y": y, "width": NODE_WIDTH, "height": NODE_HEIGHT}
             for n, (x, y) in sorted(place.items())]
    edges = []
    for node in sorted(depends_on):
        for source in depends_on[node]:
            if source in place:
                (sx, sy), (tx, ty) = place[source], place[node]
                edges.append({"source": source, "target": node, "x1": sx + NODE_WIDTH,
                              "y1": sy + NODE_HEIGHT // 2, "x2": tx, "y2": ty + NODE_HEIGHT // 2})
    width = max((x + NODE_WIDTH for x, _ in place.values()), default=0) + MARGIN
    height = max((y + NODE_HEIGHT for _, y in place.values()), default=0) + MARGIN
    return {"width": width, "height": height, "nodes": nodes, "edges": edges}
