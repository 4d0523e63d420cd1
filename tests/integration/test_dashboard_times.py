"""Times on the dashboard read to the second, in UTC, and say so (`2026-11-29 08:00:00 UTC`),
never as the wire's `2026-11-29T08:00:00.123456Z`: every page of a Mission whose WorkItems
stand in every state, with messages, an ambiguity, refusals, progress and a renewal. The
exact value stays in the `<time>` element's `datetime`; raw event data (`<pre>`) is left
as the wire has it."""

import re
from datetime import UTC, datetime, timedelta, timezone

from django.template import Context, Template

from tests.hostile.cast import BUSY_CARD, Stage
from tests.support import World

PRE = re.compile(r"<pre\b.*?</pre>", re.S)
TAG = re.compile(r"<[^>]+>")
WIRE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d|\d\d:\d\d:\d\d\.\d")
SHOWN = re.compile(r'<time datetime="([^"]+)">(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC</time>')


def shown_text(html: str) -> str:
    return TAG.sub(" ", PRE.sub("", html))


def test_every_page_shows_times_to_the_second_in_utc(db):
    world = World()
    human = world.human("hc-" + world.group.slug, roles=("coordinator", "owner"))
    worker = world.agent("wk-" + world.group.slug, card=BUSY_CARD)
    stage = Stage(world, human, worker, human).build()
    items = stage.items
    human.ok("conversation.post", {"kind": "ambiguity", "text": "Q2 too?"},
             workItemId=items["open"])
    human.ok("conversation.post", {"kind": "message", "text": "Only Q3."},
             workItemId=items["open"])
    human.ok("approval.refuse_execution", {"reason": "not this week"},
             workItemId=items["approval"])
    human.ok("mission.refuse_approval", {"missionId": stage.mission_id, "reason": "not yet"})
    worker.ok("lease.renew", {}, **stage.lease(items["active"]))
    worker.ok("work.progress", {"phase": "drafting", "estimate": {
        "completion": (datetime.now(UTC) + timedelta(hours=2)).isoformat()}},
        **stage.lease(items["active"]))
    g = world.group.id
    paths = ["/", f"/g/{g}/", f"/g/{g}/log/", f"/g/{g}/missions/{stage.mission_id}/",
             f"/g/{g}/artifacts/{stage.artifact}/",
             *(f"/g/{g}/work-items/{item}/" for item in items.values())]

    exact = []
    for path in paths:
        response = human.client.get(path)
        assert response.status_code == 200, path
        html = response.content.decode()
        text = shown_text(html)
        assert not WIRE.search(text), (path, text[WIRE.search(text).start() - 150:][:300])
        for value, shown in SHOWN.findall(html):
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
            assert shown == moment.strftime("%Y-%m-%d %H:%M:%S"), (path, value, shown)
            exact.append(value)
    assert len(exact) > 100
    assert any("." in value for value in exact)  # the wire had fractions to drop


def test_the_when_filter_takes_datetimes_and_wire_strings_and_leaves_the_rest():
    def render(value):
        return Template("{% load dashboard %}{{ value|when }}").render(Context({"value": value}))

    moment = datetime(2026, 11, 29, 9, 30, 5, 999999, tzinfo=timezone(timedelta(hours=1)))
    expected = '<time datetime="2026-11-29T08:30:05.999999Z">2026-11-29 08:30:05 UTC</time>'
    assert render(moment) == expected
    assert render("2026-11-29T08:30:05.999999Z") == expected
    assert render("2026-11-29T08:30:05Z") == (
        '<time datetime="2026-11-29T08:30:05Z">2026-11-29 08:30:05 UTC</time>')
    assert render(None) == render("") == ""
    assert render("soon <b>") == "soon &lt;b&gt;"
