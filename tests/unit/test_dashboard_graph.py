"""The work graph's layout (apps/dashboard/graph.py): columns by dependency depth, one
edge per dependency inside the graph, a cycle cut rather than followed."""

from apps.dashboard import graph


def by_id(drawing):
    return {n["id"]: n for n in drawing["nodes"]}


def test_items_sit_in_the_column_of_their_longest_dependency_chain():
    drawing = graph.layout({"research": (), "outline": ("research",), "figures": ("research",),
                            "report": ("outline", "figures", "research")})
    nodes = by_id(drawing)
    step = graph.NODE_WIDTH + graph.GAP_X

    assert graph.depths({"a": (), "b": ("a",), "c": ("b", "a")}) == {"a": 0, "b": 1, "c": 2}
    assert [nodes[n]["x"] for n in ("research", "figures", "outline", "report")] == [
        graph.MARGIN, graph.MARGIN + step, graph.MARGIN + step, graph.MARGIN + 2 * step]
    assert nodes["figures"]["y"] < nodes["outline"]["y"]  # one column, ordered by id
    assert sorted((e["source"], e["target"]) for e in drawing["edges"]) == [
        ("figures", "report"), ("outline", "report"), ("research", "figures"),
        ("research", "outline"), ("research", "report")]
    edge = next(e for e in drawing["edges"] if e["target"] == "outline")
    assert (edge["x1"], edge["x2"]) == (nodes["research"]["x"] + graph.NODE_WIDTH,
                                       nodes["outline"]["x"])
    assert drawing["width"] == nodes["report"]["x"] + graph.NODE_WIDTH + graph.MARGIN


def test_dependencies_outside_the_graph_draw_no_edge_and_a_cycle_ends():
    outside = graph.layout({"a": ("elsewhere",)})
    cycle = graph.depths({"a": ("b",), "b": ("a",)})

    assert outside["edges"] == [] and by_id(outside)["a"]["x"] == graph.MARGIN
    assert sorted(cycle.values()) == [0, 1]


def test_an_empty_graph_is_empty():
    assert graph.layout({}) == {"width": graph.MARGIN, "height": graph.MARGIN, "nodes": [],
                                "edges": []}
