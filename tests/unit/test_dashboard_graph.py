"""The work graph's layout (apps/dashboard/graph.py) and its SVG (_graph.html): layers by
dependency depth, barycenter ordering, edges left to right with their verdicts under each
policy, a refused cycle drawn, child Missions as badges or clusters."""

import random
import re

import pytest
from django.template.loader import render_to_string

from apps.dashboard import graph
from mission_weave.core import dag
from mission_weave.core.state import ACTIVE, CANCELLED, FAILED, OPEN, SUBMITTED, VERIFIED

W, H = graph.NODE_WIDTH, graph.NODE_HEIGHT


def node(*depends_on, state=OPEN, policy="all_verified", child=None, goal="a goal"):
    return {"state": state, "goal": goal, "depends_on": depends_on, "policy": policy,
            "child": child}


def child_mission(mission_id, nodes, state=ACTIVE, title="The child"):
    return {"id": mission_id, "title": title, "state": state, "nodes": nodes}


def by_id(drawing):
    return {n["id"]: n for n in drawing["nodes"]}


def edges_of(drawing):
    return {(e["source"], e["target"]): e for e in drawing["edges"]}


def overlap(a, b):
    return (a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"]
            and a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"])


def boxes(drawing):
    """Every rectangle drawn: item boxes, and badges or clusters."""
    found = list(drawing["nodes"])
    return found + [n["child_box"] for n in drawing["nodes"] if "child_box" in n]


def random_dag(count, seed):
    rng = random.Random(seed)
    ids = [f"item-{i:03d}" for i in range(count)]
    nodes = {}
    for i, item_id in enumerate(ids):
        earlier = ids[max(0, i - 30):i]
        depends_on = rng.sample(earlier, min(len(earlier), rng.randint(0, 3)))
        nodes[item_id] = node(*depends_on, state=rng.choice(graph.STATES),
                              policy=rng.choice(dag.POLICIES))
    return nodes


REPORT = {"research": node(state=VERIFIED), "outline": node("research"),
          "figures": node("research"), "report": node("outline", "figures", "research")}


def test_items_sit_in_the_column_of_their_longest_dependency_chain():
    drawing = graph.layout(REPORT)
    nodes = by_id(drawing)
    step = W + graph.GAP_X

    assert graph.depths({"a": (), "b": ("a",), "c": ("b", "a")}) == {"a": 0, "b": 1, "c": 2}
    assert [nodes[n]["x"] for n in ("research", "figures", "outline", "report")] == [
        graph.MARGIN, graph.MARGIN + step, graph.MARGIN + step, graph.MARGIN + 2 * step]
    assert sorted(edges_of(drawing)) == [
        ("figures", "report"), ("outline", "report"), ("research", "figures"),
        ("research", "outline"), ("research", "report")]
    edge = edges_of(drawing)[("research", "outline")]
    research, outline = nodes["research"], nodes["outline"]
    assert edge["points"][0] == (research["x"] + W, research["y"] + H // 2)  # right side
    assert edge["points"][-1] == (outline["x"], outline["y"] + H // 2)  # to the left side
    assert edge["d"].startswith(f"M{research['x'] + W},{research['y'] + H // 2} C")
    assert drawing["width"] == nodes["report"]["x"] + W + graph.MARGIN


def test_a_long_edge_runs_through_a_lane_of_the_column_it_crosses():
    drawing = graph.layout(REPORT)
    long_edge = edges_of(drawing)[("research", "report")]
    middle = [p for p in long_edge["points"] if p[0] == by_id(drawing)["outline"]["x"]]

    assert len(middle) == 1
    assert all(not (b["y"] <= middle[0][1] <= b["y"] + H) for b in boxes(drawing)
               if b["x"] == middle[0][0])  # between the boxes of that column, not through


def test_dependencies_outside_the_graph_draw_no_edge_and_a_cycle_ends():
    outside = graph.layout({"a": node("elsewhere")})
    cycle = graph.depths({"a": ("b",), "b": ("a",)})

    assert outside["edges"] == [] and by_id(outside)["a"]["x"] == graph.MARGIN
    assert outside["verdicts"] == {"a": False}  # a dependency of unknown state is not met
    assert sorted(cycle.values()) == [0, 1]


def test_a_long_chain_does_not_exhaust_the_recursion_limit():
    chain = {f"n{i:04d}": (f"n{i - 1:04d}",) if i else () for i in range(3000)}

    assert graph.depths(chain)["n2999"] == 2999


def test_an_empty_graph_is_empty():
    drawing = graph.layout({})

    assert (drawing["width"], drawing["height"]) == (2 * graph.MARGIN, 2 * graph.MARGIN)
    assert drawing["nodes"] == drawing["edges"] == drawing["cycle_edges"] == []
    assert drawing["verdicts"] == {}


def test_two_hundred_items_lay_out_apart_and_left_to_right():
    nodes = random_dag(200, seed=7)

    drawing = graph.layout(nodes)

    placed = drawing["nodes"]
    assert len(placed) == 200 and {n["width"] for n in placed} == {W}
    assert [(a["id"], b["id"]) for i, a in enumerate(placed) for b in placed[i + 1:]
            if overlap(a, b)] == []
    assert all(n["x"] >= 0 and n["x"] + W <= drawing["width"] and n["y"] >= 0
               and n["y"] + H <= drawing["height"] for n in placed)
    assert len(drawing["edges"]) == sum(len(n["depends_on"]) for n in nodes.values())
    for edge in drawing["edges"]:
        xs = [x for x, _ in edge["points"]]
        assert xs == sorted(set(xs)), edge  # every step goes right
    assert graph.crossings(drawing) < graph.crossings(graph.layout(nodes, sweeps=0))


def test_the_layout_is_deterministic_whatever_the_input_order():
    nodes = random_dag(60, seed=3)
    reversed_nodes = dict(reversed(list(nodes.items())))

    assert graph.layout(nodes) == graph.layout(nodes) == graph.layout(reversed_nodes)


def test_barycenter_ordering_crosses_fewer_edges_than_id_order():
    # In id order, each of x, y, z sits across from the opposite end of its dependency.
    nodes = {"a": node(), "b": node(), "c": node(),
             "x": node("c"), "y": node("b"), "z": node("a"), "w": node("c", "z")}

    in_id_order = graph.layout(nodes, sweeps=0)
    ordered = graph.layout(nodes)

    assert graph.crossings(in_id_order) >= 3
    assert graph.crossings(ordered) == 0
    column = sorted((n for n in ordered["nodes"] if n["id"] in "xyz"), key=lambda n: n["y"])
    assert [n["id"] for n in column] == ["z", "y", "x"]


@pytest.mark.parametrize(("policy", "states", "verdict", "met"), [
    ("all_verified", [VERIFIED, VERIFIED], True, [True, True]),
    ("all_verified", [VERIFIED, CANCELLED], False, [True, False]),
    ("any_verified", [VERIFIED, FAILED], True, [True, False]),
    ("any_verified", [CANCELLED, SUBMITTED], False, [False, False]),
    ("all_terminal", [VERIFIED, CANCELLED], True, [True, True]),
    ("all_terminal", [CANCELLED, FAILED], False, [True, False]),
])
def test_verdicts_and_edges_under_each_policy(policy, states, verdict, met):
    nodes = {"d1": node(state=states[0]), "d2": node(state=states[1]),
             "item": node("d1", "d2", policy=policy)}

    drawing = graph.layout(nodes)
    edges = edges_of(drawing)

    assert drawing["verdicts"] == {"d1": True, "d2": True, "item": verdict}
    assert [edges[("d1", "item")]["met"], edges[("d2", "item")]["met"]] == met
    assert {e["policy"] for e in edges.values()} == {policy}


def test_a_refused_dependency_draws_its_cycle_in_red():
    nodes = {"a": node(), "b": node("a"), "c": node("b")}
    cycle = dag.cycle_through("a", ["c"], {k: v["depends_on"] for k, v in nodes.items()})

    drawing = graph.layout(nodes, cycle=cycle)
    plain = graph.layout(nodes)

    assert cycle == ["a", "c", "b", "a"]  # a would depend on c, c depends on b, b on a
    assert {k: e["in_cycle"] for k, e in edges_of(drawing).items()} == {
        ("a", "b"): True, ("b", "c"): True}
    [proposed] = drawing["cycle_edges"]
    assert (proposed["source"], proposed["target"]) == ("c", "a") and proposed["d"]
    assert all(n["in_cycle"] for n in drawing["nodes"])
    assert drawing["height"] == plain["height"] + graph.ARC_LIFT  # room for the arc
    assert all(y >= 0 for _, y in proposed["points"])


def test_a_collapsed_child_mission_is_a_badge_under_its_item():
    child = child_mission("m-child", {"c1": node(), "c2": node("c1")}, title="Chapters")
    drawing = graph.layout({"a": node(), "b": node("a", child=child)})
    b = by_id(drawing)["b"]

    assert set(by_id(drawing)) == {"a", "b"}  # the child's items are not drawn
    assert (b["kind"], b["child_id"], b["count"], b["expanded"]) == ("child", "m-child", 2,
                                                                     False)
    assert b["child_summary"] == "child m-child (2 items, active)"
    assert b["toggle"]["href"] == "?expand=m-child" and b["toggle"]["mark"] == "+"
    badge = b["child_box"]
    assert (badge["x"], badge["y"], badge["width"]) == (b["x"], b["y"] + H, W)


def test_an_expanded_child_mission_is_a_cluster_below_its_item():
    grandchild = child_mission("m-grand", {"g1": node()})
    child = child_mission("m-child", {"c1": node(state=VERIFIED),
                                      "c2": node("c1", child=grandchild)}, title="Chapters")
    nodes = {"a": node(), "b": node("a", child=child), "c": node("a"), "d": node("b", "c")}

    drawing = graph.layout(nodes, expanded={"m-child", "m-other"})
    placed = by_id(drawing)
    b, cluster = placed["b"], placed["b"]["child_box"]

    assert set(placed) == {"a", "b", "c", "d", "c1", "c2"}
    assert b["expanded"] is True and b["toggle"]["href"] == "?expand=m-other"
    assert b["connector"].startswith("M")
    assert cluster["y"] > b["y"] + H and cluster["x"] > b["x"]  # below, indented
    for inner in (placed["c1"], placed["c2"], placed["c2"]["child_box"]):
        assert cluster["x"] < inner["x"] and inner["x"] + inner["width"] < (
            cluster["x"] + cluster["width"])
        assert cluster["y"] + graph.CLUSTER_HEADER <= inner["y"]
        assert inner["y"] + inner["height"] < cluster["y"] + cluster["height"]
    assert placed["c2"]["expanded"] is False  # m-grand stays a badge
    assert edges_of(drawing)[("c1", "c2")]["met"] is True
    assert drawing["verdicts"]["c2"] is True and drawing["verdicts"]["d"] is False
    outer = [placed[i] for i in "acd"]
    assert not any(overlap(box, cluster) for box in outer)
    assert placed["d"]["x"] > cluster["x"] + cluster["width"]  # the next column clears it
    for edge in drawing["edges"]:
        xs = [x for x, _ in edge["points"]]
        assert xs == sorted(set(xs))


@pytest.mark.parametrize(("expanded", "child_id", "link"), [
    (set(), "m1", "?expand=m1"),
    ({"m2"}, "m1", "?expand=m1,m2"),
    ({"m1", "m2"}, "m1", "?expand=m2"),
    ({"m1"}, "m1", "?"),
    (set(), "m:1", "?expand=m%3A1"),
])
def test_expand_link_toggles_one_child(expanded, child_id, link):
    assert graph.expand_link(expanded, child_id) == link


def test_the_svg_carries_states_verdicts_links_and_the_edge_list():
    child = child_mission("m-child", {"c1": node()}, title="Chapters <draft>")
    nodes = {"a": node(state=VERIFIED, goal="Collect the sources"),
             "b": node("a", goal="Write it up"),
             "c": node("b", policy="any_verified", child=child)}
    cycle = dag.cycle_through("a", ["c"], {k: v["depends_on"] for k, v in nodes.items()})

    html = render_to_string("dashboard/_graph.html",
                            {"graph": graph.layout(nodes, cycle=cycle), "group_id": "g1"})
    svg = html[html.index('<svg id="work-graph"'):html.index("</svg>\n</div>")]
    listed = html[html.index("Edges as a list"):]

    assert html.startswith('<div class="work-graph">') and '<div class="graph-box">' in html
    assert re.findall(r'data-item="([^"]+)" data-state="([^"]+)"', svg) == [
        ("a", "verified"), ("b", "open"), ("c", "open")]
    assert 'aria-label="a: verified"' in svg and "<title>Collect the sources</title>" in svg
    assert 'href="/g/g1/work-items/a/"' in svg
    assert 'data-edge="a->b" data-met="true"' in svg
    assert 'data-edge="b->c" data-met="false"' in svg
    assert "b depends on a (met under all_verified), on the refused cycle" in svg
    assert "c depends on b (not met under any_verified)" in svg
    assert 'class="edge in-cycle proposed"' in svg and "a depends on c: closes a cycle" in svg
    assert 'data-child="m-child" data-expanded="false"' in svg
    assert 'href="/g/g1/missions/m-child/"' in svg
    assert 'aria-label="child m-child (1 item, active)"' in svg
    assert 'href="?expand=m-child#work-graph"' in svg
    assert "Chapters &lt;draft&gt;" in svg  # escaped
    assert "class=\"swatch state-blocked\"" in html  # the legend
    assert ">b</a> depends on <a href=\"/g/g1/work-items/a/\">a</a>: met under all_verified" \
        in listed
    assert "c</a>: refused, closes a cycle" in listed


def test_an_expanded_cluster_renders_its_items_and_a_collapse_link():
    child = child_mission("m-child", {"c1": node()}, title="Chapters")
    drawing = graph.layout({"p": node(child=child)}, expanded={"m-child"})

    html = render_to_string("dashboard/_graph.html", {"graph": drawing, "group_id": "g1"})

    assert 'data-child="m-child" data-expanded="true"' in html
    assert 'class="connector"' in html and 'data-item="c1"' in html
    assert 'href="?#work-graph" aria-label="collapse child m-child"' in html
