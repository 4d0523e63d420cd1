"""The authorization matrix over HTTP (tests/hostile/matrix.py has the tables and the
oracle): every principal of the Cast, agents with their bearer token and humans with
their dashboard login, against every REST endpoint, every command type and every dashboard
page and action, on objects of another Mission of their Group and of another Group.

Each case asserts the status and PROTOCOL code the oracle names, that a refusal appended
nothing to either Group's log, and that a refusal about what the principal may not see
reads exactly as the same request about ids that exist nowhere. Each runs in a transaction
rolled back after it, on one Cast built for the module (tests/hostile/conftest.py)."""

import json
import re
from http.cookies import SimpleCookie

import pytest
from django.test import Client

from apps.ledger.models import Group
from tests.hostile import matrix
from tests.hostile.matrix import OK, TARGETS
from tests.support import assert_error

PRINCIPALS = ("owner", "coordinator", "delegate", "worker", "reviewer", "observer",
              "observer_agent", "outsider", "outsider_human", "anonymous")
HUMANS = ("owner", "delegate", "observer", "outsider_human")


def client_for(actor) -> Client:
    """A client with the actor's login, of its own: nothing a response sets (a logout,
    a CSRF cookie) reaches the Cast's clients."""
    client = Client()
    if actor is not None and actor.key is None:
        client.cookies = SimpleCookie(actor.client.cookies.output(header="", sep=";"))
    return client


def bearer(actor) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {actor.token}"} if actor and actor.token else {}


def heads(cast) -> tuple:
    return tuple(Group.objects.filter(id__in=[cast.home.group.id, cast.other.group.id])
                 .order_by("id").values_list("head_sequence", flat=True))


def check_answer(response, expected: tuple) -> None:
    status, code = expected
    if code is None:
        assert response.status_code == status, (response.status_code, response.content[:500])
    else:
        assert_error(response, status, code)


def same_answer(real, twin, names: list) -> None:
    """The refusal about real objects reads as the one about objects that do not exist."""
    assert twin.status_code == real.status_code, (twin.status_code, real.status_code)
    assert matrix.unrenamed(twin.content.decode(), names) == real.content.decode()


# -- REST endpoints but the commands --------------------------------------------------------------

def send(actor, request: matrix.Request):
    client = client_for(actor)
    if request.method == "GET":
        return client.get(request.path, **bearer(actor))
    if isinstance(request.body, bytes):
        return client.generic(request.method, request.path, request.body,
                              content_type="application/octet-stream", **bearer(actor))
    return client.generic(request.method, request.path, json.dumps(request.body),
                          content_type="application/json", **bearer(actor))


def api_params() -> list:
    params = []
    for route, method, target in matrix.api_cases():
        for name in PRINCIPALS:
            params.append(pytest.param(name, route, method, target,
                                       id=f"{route}-{method}-{target}-{name}"))
    return params


# Successes whose content depends on the objects named: what they say of another Group's
# must be what they say of nothing (an inactive token, an empty list).
ANSWERS_ABOUT_OTHERS = frozenset({"capabilities/introspect",
                                  "groups/<group_id:group_id>/work-items"})


@pytest.mark.parametrize("name,route,method,target", api_params())
def test_api(cast, db, name, route, method, target):
    actor = cast.principals[name]
    request = matrix.api_request(cast, actor, route, method, target)
    before = heads(cast)

    response = send(actor, request)

    check_answer(response, request.expected)
    assert heads(cast) == before
    names = matrix.secrets(cast, actor, target)
    # A PUT's bytes are its name: no twin carries them under another. Its expected answer,
    # a new blob's 201, is what says that nothing of the stored one was learnt.
    uploads = (route, method) == ("blobs/<text:name>", "PUT")
    if names and not uploads and (request.expected != OK or route in ANSWERS_ABOUT_OTHERS):
        body = request.body if isinstance(request.body, bytes) else matrix.renamed(
            request.body, names)  # bytes are the content, not a name: the same ones
        twin = matrix.Request(request.method, matrix.renamed(request.path, names), body,
                              request.expected)
        same_answer(response, send(actor, twin), names)


# -- commands ------------------------------------------------------------------------------------

def post_command(actor, group_id: str, envelope: dict):
    return client_for(actor).post(f"/api/v1/groups/{group_id}/commands", json.dumps(envelope),
                                  content_type="application/json", **bearer(actor))


def twin_command(actor, type_: str, envelope: dict, names: list) -> dict:
    twin = matrix.renamed(envelope, names)
    if type_ == "context.publish" and actor.key is not None:  # the package is signed too
        twin["body"] = matrix.signed_by(actor, twin["body"])
    return matrix.signed_by(actor, twin)


@pytest.mark.parametrize("name", PRINCIPALS)
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("type_", matrix.COMMAND_TYPES)
def test_command(cast, db, name, target, type_):
    actor = cast.principals[name]
    sender = actor or cast.observer  # anonymous: someone's envelope, sent without credentials
    group_id, envelope = matrix.command(cast, sender, type_, target)
    expected = matrix.expect_command(cast, actor, type_, target)
    before = heads(cast)

    response = post_command(actor, group_id, matrix.signed_by(sender, envelope))

    check_answer(response, expected)
    if expected != OK:
        assert heads(cast) == before
    names = matrix.secrets(cast, actor, target)
    if names and expected != OK:
        twin = twin_command(sender, type_, envelope, [*names, envelope["id"]])
        same_answer(response, post_command(actor, matrix.renamed(group_id, names), twin),
                    [*names, envelope["id"]])


# -- the dashboard -------------------------------------------------------------------------------

CSRF_VALUE = re.compile(r'(name="csrfmiddlewaretoken" value=")[^"]*(")')


def visit(actor, method: str, path: str, data: dict | None):
    client = client_for(actor)
    headers = bearer(actor)  # an agent's token means nothing here
    if method == "GET":
        return client.get(path, **headers)
    return client.post(path, data or {}, **headers)


@pytest.mark.parametrize("name", PRINCIPALS)
@pytest.mark.parametrize("page,target", matrix.dashboard_cases())
def test_dashboard(cast, db, name, page, target):
    actor = cast.principals[name]
    method, path, data = matrix.dashboard_path(cast, page, target)
    status, code = matrix.expect_dashboard(cast, actor, page, target)
    before = heads(cast)

    response = visit(actor, method, path, data)

    assert response.status_code == status, (response.status_code, response.content[:300])
    human = actor is not None and actor.key is None
    if status == 302:  # to the login page, unless a human's action was recorded
        assert response["Location"].startswith("/login/") == (not human or page == "logout")
    if code is not None:  # the refusal is shown with its PROTOCOL code
        assert code in response.content.decode()
    if not (status == 302 and human):
        assert heads(cast) == before
    names = matrix.secrets(cast, actor, target)
    if names and status == 404:
        twin = visit(actor, method, matrix.renamed(path, names),
                     matrix.renamed(data, names) if data else data)
        assert twin.status_code == 404
        assert CSRF_VALUE.sub(r"\1\2", twin.content.decode()) == \
            CSRF_VALUE.sub(r"\1\2", response.content.decode())


# -- coverage and size ---------------------------------------------------------------------------

def test_the_matrix_covers_every_endpoint_command_and_page(cast, db, capsys):
    document = Client().get("/api/v1/schema/?format=json").json()

    assert matrix.uncovered(document, cast) == []
    api = len(matrix.api_cases()) * len(PRINCIPALS)
    commands = len(matrix.COMMAND_TYPES) * len(TARGETS) * len(PRINCIPALS)
    dashboard = len(matrix.dashboard_cases()) * len(PRINCIPALS)
    from tests.hostile.test_authorization_ws import ws_case_count

    ws = ws_case_count()
    with capsys.disabled():
        print(f"\nauthorization matrix: {api + commands + dashboard + ws} cases = "
              f"{len(PRINCIPALS)} principals x ({len(matrix.api_cases())} REST endpoint "
              f"cases + {len(matrix.COMMAND_TYPES)} command types x {len(TARGETS)} targets "
              f"+ {len(matrix.dashboard_cases())} dashboard cases) + {ws} WebSocket cases")
