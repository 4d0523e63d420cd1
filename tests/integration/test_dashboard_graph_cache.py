"""The Mission page's graph is cached under a digest of its input (issue 27,
apps/dashboard/mission_markup.py): a view at the same state draws nothing again, and any
change that shows in the graph (a new WorkItem, a dependency, a state, a child Mission)
shows at once. The markup built in Python is the one the templates printed."""

import re

import pytest
from django import forms as django_forms
from django.urls import reverse

from apps.dashboard import forms, graph, mission_markup
from tests.integration.test_dashboard import human_coordinator, mission_url

pytestmark = pytest.mark.django_db


def html(actor, s) -> str:
    response = actor.client.get(mission_url(s))
    assert response.status_code == 200
    return response.content.decode()


def node_state(page: str, item_id: str) -> str | None:
    found = re.search(rf'<a class="node state-\w+" href="[^"]+" aria-label="[^"]+" '
                      rf'data-item="{re.escape(item_id)}" data-state="(\w+)">', page)
    return found.group(1) if found else None


@pytest.fixture
def drawn(scenario, monkeypatch):
    """(scenario, its human Coordinator, the number of layouts computed so far)."""
    calls = []
    layout = graph.layout

    def counted(*args, **kwargs):
        calls.append(args)
        return layout(*args, **kwargs)

    monkeypatch.setattr(graph, "layout", counted)
    return scenario, human_coordinator(scenario), calls


def test_a_view_at_the_same_state_reuses_the_layout(drawn):
    s, hc, calls = drawn
    item = s.authorize(goal="Collect")

    first, second = html(hc, s), html(hc, s)

    assert len(calls) == 1
    assert first == second or re.sub(r'value="[^"]{64}"', "", first) == \
        re.sub(r'value="[^"]{64}"', "", second)  # only the CSRF tokens differ
    assert node_state(second, item) == "open"


def test_a_new_work_item_shows_at_once(drawn):
    s, hc, calls = drawn
    first = s.authorize(goal="Collect")
    before = html(hc, s)

    second = s.authorize(goal="Write")
    after = html(hc, s)

    assert node_state(before, second) is None and node_state(after, second) == "open"
    assert f'<tr data-item="{second}">' in after and len(calls) == 2
    assert node_state(after, first) == "open"


def test_a_new_dependency_shows_at_once(drawn):
    s, hc, calls = drawn
    a, b = s.authorize(goal="A"), s.authorize(goal="B")
    assert "data-edge=" not in html(hc, s)

    added = hc.client.post(mission_url(s, "edges"), {"dependant": b, "dependency": a,
                                                     "op": "add"})
    after = html(hc, s)

    assert added.status_code == 302
    assert f'data-edge="{a}->{b}" data-met="false"' in after
    assert f"{b} depends on {a}" in after and len(calls) == 2


def test_a_state_change_shows_at_once(drawn):
    s, hc, calls = drawn
    item = s.authorize(goal="Collect")
    assert node_state(html(hc, s), item) == "open"

    s.offer(item, s.w1)
    offered = html(hc, s)
    s.accept(item, s.w1)
    queued = html(hc, s)

    assert node_state(offered, item) == "offered"
    assert node_state(queued, item) == "queued" and len(calls) == 3


def test_a_child_mission_shows_at_once(drawn):
    s, hc, _ = drawn
    item = s.authorize(goal="Delegate")
    parent = mission_url(s)
    before = hc.client.get(parent).content.decode()

    child = s.in_child_mission(item)  # the Scenario works in the child from here on
    after = hc.client.get(parent).content.decode()
    s.authorize(goal="A figure")
    counted = hc.client.get(parent).content.decode()

    assert f'data-child="{child}"' not in before
    assert f'data-child="{child}" data-expanded="false"' in after
    assert "0 items" in after and "1 item ·" in counted  # the badge counts the child's


def test_urls_are_what_reverse_gives():
    url = mission_markup.url_maker("work_item", "grp_a b")
    for item_id in ("plain-1", "with space", "ü/ï", "q?x#y", "50%", "a:b@c~d", "<&\">"):
        if "/" in item_id:
            continue  # reverse() refuses it, and so does url_maker (through reverse)
        expected = reverse("dashboard:work_item", args=["grp_a b", item_id])
        assert url(item_id) == mission_markup.e(expected)


def test_the_plain_text_input_prints_what_django_prints():
    for value in (None, "", "plain", '<b>"quoted" & \'single\'</b>'):
        for attrs in ({}, {"id": "id_x", "required": True, "disabled": False, "maxlength": 9}):
            assert forms.PlainTextInput().render("refuse-item_0", value, attrs) == \
                django_forms.TextInput().render("refuse-item_0", value, attrs)


def test_the_markup_escape_prints_what_autoescape_prints():
    """mission_markup.e's short paths (plain str, int) give conditional_escape's text."""
    from django.utils.formats import localize
    from django.utils.html import conditional_escape
    from django.utils.safestring import mark_safe

    from apps.dashboard.mission_markup import e

    for value in ['<script>"x" & \'y\'</script>', "", "plain", 0, -12, 100000, True, None]:
        expected = "None" if value is None else conditional_escape(
            value if isinstance(value, str) else str(localize(value)))
        assert e(value) == expected
    assert e(mark_safe("<b>kept</b>")) == "<b>kept</b>"
