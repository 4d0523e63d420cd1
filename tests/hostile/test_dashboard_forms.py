"""Nothing a person can type into the dashboard produces a 5xx: every form the pages
render ("Waiting on me", the log, the Mission, a WorkItem in every state of the Cast,
tests/hostile/cast.py, and the Coordinator's contract forms; for the Mission's
MissionOwner and its delegated Coordinator) is sent back with generated values in its own
fields (odd text, huge and non-finite numbers, impossible dates, U+0000, JSON fragments,
what its selects and checkboxes offer) and with members it does not have; and with
U+0000 in each field in turn, which is always refused (apps/dashboard/middleware.py).

Forms are read from the rendered HTML, so a form added later is fuzzed too. A refusal is
a page that says why (4xx); an accepted form redirects (302). Each test runs in a
transaction rolled back after it (the module's Cast stays as built)."""

from html.parser import HTMLParser

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hostile.cast import STATES

pytestmark = pytest.mark.django_db

# Text that int() (over 4,300 digits) or json.loads (over ~1,000 levels) cannot read: each
# is put in every field in turn, as U+0000 is.
UNREADABLE = ["9" * 4400, "[" * 1100]
ODD = ["", " ", "-1", "0", "1e309", "NaN", "-Infinity", "9" * 400, *UNREADABLE, "²", "١٢",
       "\x00", "a\x00b",
       "2026-13-45T99:99:99Z", "9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z", "null", "{}",
       "[]", "[", '{"a": ' * 200, '{"goal": 1}', "<script>alert(1)</script>", "é" * 5000,
       "\u202e", "x" * 100_000]


class Forms(HTMLParser):
    """The page's forms: [{"method", "action", "fields": {name: [the values offered]}}]."""

    def __init__(self):
        super().__init__()
        self.forms, self.form, self.select = [], None, None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form":
            self.form = {"method": (attrs.get("method") or "get").lower(),
                         "action": attrs.get("action") or "", "fields": {}}
            self.forms.append(self.form)
        elif self.form is None:
            return
        elif tag in ("input", "textarea", "select") and attrs.get("name") and \
                attrs["name"] != "csrfmiddlewaretoken":
            offered = self.form["fields"].setdefault(attrs["name"], [])
            if attrs.get("value") is not None:
                offered.append(attrs["value"])
            self.select = offered if tag == "select" else None
        elif tag == "option" and self.select is not None and attrs.get("value") is not None:
            self.select.append(attrs["value"])

    def handle_endtag(self, tag):
        if tag == "select":
            self.select = None
        elif tag == "form":
            self.form = None


def forms_of(actor, path: str) -> list:
    response = actor.client.get(path)
    assert response.status_code == 200, (path, response.status_code)
    parser = Forms()
    parser.feed(response.content.decode())
    return [{**f, "action": f["action"] or path} for f in parser.forms
            if f["action"] in ("", path) or f["action"].startswith("/g/")]  # not: log out


# The pages with forms: "Waiting on me", the Group's log, the Mission and a WorkItem in
# each state for both, and the Coordinator's new-WorkItem, revision and new-Mission forms.
PAGES = [(who, page) for page in ("home", "log", "mission", *STATES)
         for who in ("owner", "delegate")] + [
    ("delegate", "new-work-item"), ("delegate", "revise"), ("delegate", "new-mission")]


def path_of(cast, page: str) -> str:
    group, mission = cast.home.group.id, cast.m1.mission_id
    return {"home": "/", "log": f"/g/{group}/log/",
            "mission": f"/g/{group}/missions/{mission}/",
            "new-work-item": f"/g/{group}/missions/{mission}/work-items/new",
            "new-mission": f"/g/{group}/missions/new",
            "revise": f"/g/{group}/work-items/{cast.m1.items['open']}/revise"}.get(page) or \
        f"/g/{group}/work-items/{cast.m1.items.get(page)}/"


def value(offered: list):
    return st.one_of(st.sampled_from(ODD), st.text(max_size=40),
                     st.integers().map(str), *([st.sampled_from(offered)] if offered else []))


def form_data(form: dict):
    fields = {name: st.lists(value(offered), min_size=0, max_size=2)
              for name, offered in form["fields"].items()}
    extra = st.dictionaries(st.sampled_from(["offer-candidates", "contract_json", "editor",
                                             "criteria", "next", "id", "groupId",
                                             f"capabilities-{'9' * 5000}-id"]),
                            st.lists(value([]), max_size=2), max_size=2)
    return st.tuples(st.fixed_dictionaries(fields), extra).map(lambda t: {**t[1], **t[0]})


def send(actor, form: dict, data: dict):
    method = actor.client.post if form["method"] == "post" else actor.client.get
    return method(form["action"], data)


@pytest.mark.parametrize(("who", "page"), PAGES)
def test_no_form_value_breaks_the_server(cast, who, page):
    actor, path = getattr(cast, who), path_of(cast, page)
    forms = forms_of(actor, path)
    assert forms, f"{who} sees no form on {path}"

    for form in forms:
        send_generated_values(actor, form)


def send_generated_values(actor, form):
    @settings(max_examples=15, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(data=form_data(form))
    def send_generated(data):
        response = send(actor, form, data)
        assert response.status_code in (200, 302, 400, 403, 404, 409, 413, 422), (
            form["action"], data, response.status_code, response.content[:500])

    send_generated()


@pytest.mark.parametrize(("who", "page"), PAGES)
def test_u0000_in_any_field_of_any_form_is_refused(cast, who, page):
    """Each field in turn holds U+0000, the others what the page offers: always a 400."""
    actor = getattr(cast, who)
    for form in forms_of(actor, path_of(cast, page)):
        offered = {name: values[:1] for name, values in form["fields"].items()}
        for name in form["fields"]:
            response = send(actor, form, {**offered, name: "a\x00b"})
            assert response.status_code == 400, (form["action"], name, response.status_code)
            assert "contains the character U+0000" in response.content.decode()


@pytest.mark.parametrize(("who", "page"), PAGES)
def test_a_value_no_parser_can_read_in_any_field_is_answered(cast, who, page):
    """Each field in turn holds each UNREADABLE value, the others what the page offers;
    so does a row input whose index has 5,000 digits. Never a 5xx."""
    actor = getattr(cast, who)
    for form in forms_of(actor, path_of(cast, page)):
        offered = {name: values[:1] for name, values in form["fields"].items()}
        sent = [{**offered, name: text} for name in form["fields"] for text in UNREADABLE]
        for data in [*sent, {**offered, f"capabilities-{'9' * 5000}-id": "x"}]:
            response = send(actor, form, data)
            assert response.status_code < 500, (form["action"], response.status_code)
