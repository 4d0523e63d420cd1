"""The site's icon: every dashboard page links it, and the request browsers make by
themselves for /favicon.ico (on pages that name no icon: the API's, the admin's) finds it
instead of a 404."""

import re
import struct
from pathlib import Path
from xml.etree import ElementTree

from django.contrib.staticfiles import finders
from django.test import Client

ICONS = re.compile(r'<link rel="icon" href="/static/([^"]+)"')


def test_favicon_ico_answers_with_the_dashboard_icon(db):
    response = Client().get("/favicon.ico")

    assert response.status_code == 301
    assert response["Location"] == "/static/dashboard/favicon.ico"
    data = Path(finders.find("dashboard/favicon.ico")).read_bytes()
    reserved, kind, count = struct.unpack("<HHH", data[:6])
    assert (reserved, kind, count) == (0, 1, 1)  # an ICO file with one image
    width, height, _, _, _, _, size, offset = struct.unpack("<BBBBHHII", data[6:22])
    assert (width, height) == (32, 32) and offset + size == len(data)
    assert data[offset:offset + 8] == b"\x89PNG\r\n\x1a\n"


def test_every_page_links_icons_that_exist(scenario):
    pages = [Client().get("/login/"),
             scenario.owner.client.get(f"/g/{scenario.world.group.id}/missions/"
                                       f"{scenario.mission_id}/")]
    for page in pages:
        assert page.status_code == 200
        linked = ICONS.findall(page.content.decode())
        assert linked == ["dashboard/favicon.ico", "dashboard/favicon.svg"]
        for name in linked:
            assert finders.find(name), name
    svg = ElementTree.parse(finders.find("dashboard/favicon.svg")).getroot()
    assert svg.tag == "{http://www.w3.org/2000/svg}svg"
    assert not [e for e in svg.iter() if e.tag.endswith("script")]
