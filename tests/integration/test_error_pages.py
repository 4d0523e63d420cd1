"""What Django answers for a path nothing serves and for a view that fails: the PROTOCOL
envelope under /api/, a page a person can read elsewhere (mission_weave/urls.py's
handlers, apps/dashboard/views.py)."""

import pytest
from django.test import Client, override_settings
from django.urls import include, path

from mission_weave.urls import handler404, handler500  # noqa: F401 - the site's, for ROOT_URLCONF

pytestmark = pytest.mark.django_db


def boom(request):
    raise RuntimeError("a bug")


urlpatterns = [path("boom/", boom), path("api/v1/boom/", boom),
               path("", include("mission_weave.urls"))]


def test_a_path_nothing_serves_is_a_page_outside_the_api_and_an_envelope_inside():
    page, api = Client().get("/no/such/page/"), Client().get("/api/v1/no/such/thing")

    assert page.status_code == 404 and page["Content-Type"].startswith("text/html")
    assert "<h1>Not found</h1>" in page.content.decode()
    assert api.status_code == 404
    assert api.json()["error"] == {"code": "NOT_FOUND", "message": "nothing at "
                                   "/api/v1/no/such/thing", "details": {}}


@override_settings(ROOT_URLCONF=__name__, DEBUG=False)
def test_a_failing_view_is_a_plain_page_outside_the_api_and_an_envelope_inside(caplog):
    client = Client(raise_request_exception=False)
    page, api = client.get("/boom/"), client.get("/api/v1/boom/")

    assert page.status_code == 500 and page["Content-Type"].startswith("text/html")
    assert "<h1>Server error</h1>" in page.content.decode()
    assert "a bug" not in page.content.decode()  # nothing of the failure reaches the client
    assert api.status_code == 500 and api.json()["error"]["code"] == "INTERNAL_ERROR"
    assert "internal error on GET /boom/" in caplog.text
