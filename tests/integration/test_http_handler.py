"""The HTTP side of a web process: PooledSyncASGIHandler's request cycle
(mission_weave/runtime/http_handler.py) called as an ASGI app, and
mission_weave.runtime.serve spreading connections over its daphne children."""

import asyncio
import http.client
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
from django.core import signals
from django.db import connection
from django.http import HttpResponse
from django.test import override_settings
from django.urls import include, path
from django.views.decorators.csrf import csrf_exempt

from apps.api.blob_views import ThreadedStreamingResponse
from apps.bench.harness import ROOT, free_port
from mission_weave.runtime import serve
from mission_weave.runtime.http_handler import PooledSyncASGIHandler, install_lean_requests
from tests.integration.wslive import server_env

seen = {}  # what the views below saw: the thread they ran on, their connection


@csrf_exempt
def plain(request):
    seen["view"] = threading.get_ident()
    seen["connection"] = connection.connection is not None or connection.ensure_connection()
    return HttpResponse(request.body[::-1], content_type="text/plain")


def streamed(request):
    def parts():
        seen["streaming"] = threading.get_ident()
        yield b"one,"
        yield b"two"
    response = ThreadedStreamingResponse(parts(), content_type="text/plain")
    response._resource_closers.append(lambda: seen.setdefault("closed", threading.get_ident()))
    return response


urlpatterns = [path("plain", plain), path("streamed", streamed),
               path("", include("mission_weave.urls"))]


def call(app, method: str, route: str, body: bytes = b"") -> dict:
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": method, "scheme": "http", "path": route, "raw_path": route.encode(),
             "query_string": b"", "root_path": "", "client": ("127.0.0.1", 5000),
             "server": ("127.0.0.1", 80), "headers": [(b"host", b"testserver"),
                                                       (b"content-length",
                                                        str(len(body)).encode())]}
    answer = {"body": b"", "messages": []}

    async def run():
        messages = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive():
            if messages:
                return messages.pop()
            await asyncio.Event().wait()  # nothing more is read after the body

        async def send(message):
            answer["messages"].append(message["type"])
            if message["type"] == "http.response.start":
                answer["status"] = message["status"]
            else:
                answer["body"] += message.get("body", b"")

        answer["loop thread"] = threading.get_ident()
        await asyncio.wait_for(app(scope, receive, send), 10)

    asyncio.run(run())
    return answer


@pytest.fixture
def app(settings):
    settings.ALLOWED_HOSTS = ["testserver"]
    with override_settings(ROOT_URLCONF=__name__):
        handler = PooledSyncASGIHandler()
        yield handler
        handler.executor.shutdown()


@pytest.fixture
def signal_threads():
    fired = []

    def started(**kwargs):
        fired.append(("started", threading.get_ident()))

    def finished(**kwargs):
        fired.append(("finished", threading.get_ident()))

    signals.request_started.connect(started)
    signals.request_finished.connect(finished)
    yield fired
    signals.request_started.disconnect(started)
    signals.request_finished.disconnect(finished)


@pytest.mark.django_db(transaction=True)
def test_a_whole_response_runs_signals_middleware_and_view_on_one_pool_thread(app,
                                                                            signal_threads):
    seen.clear()
    answer = call(app, "POST", "/plain", b"abc")
    assert answer["status"] == 200 and answer["body"] == b"cba"
    assert answer["messages"] == ["http.response.start", "http.response.body"]
    view = seen["view"]
    assert view != answer["loop thread"]
    # request_started (close_old_connections) and request_finished (the response's close,
    # which hands the connection back to the pool) ran on the view's thread, before the
    # answer was sent: nothing hops to another thread for them.
    assert signal_threads == [("started", view), ("finished", view)]


@pytest.mark.django_db(transaction=True)
def test_a_streamed_response_is_closed_after_its_last_part_was_sent(app, signal_threads):
    seen.clear()
    answer = call(app, "GET", "/streamed")
    assert answer["status"] == 200 and answer["body"] == b"one,two"
    assert answer["messages"][-1] == "http.response.body"
    assert "closed" in seen and seen["closed"] != answer["loop thread"]
    assert [name for name, _ in signal_threads] == ["started", "finished"]


@pytest.mark.django_db(transaction=True)
def test_errors_before_the_view_are_answered_too(app, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10
    assert call(app, "POST", "/plain", b"x" * 11)["status"] == 400  # body too large to read
    assert call(app, "GET", "/nowhere")["status"] == 404


def daphne_children(parent: int) -> list[int]:
    children = f"/proc/{parent}/task/{parent}/children"
    return [int(pid) for pid in open(children).read().split()]


def sockets_of(pid: int) -> int:
    fds, count = f"/proc/{pid}/fd", 0
    for fd in os.listdir(fds):
        try:
            count += os.readlink(f"{fds}/{fd}").startswith("socket:")
        except FileNotFoundError:  # closed since it was listed (a probe's connection)
            pass
    return count


@pytest.mark.django_db(transaction=True)
def test_serve_spreads_keep_alive_connections_over_its_processes():
    port = free_port()
    parent = subprocess.Popen([sys.executable, "-m", "mission_weave.runtime.serve",
                               "--workers", "2", "--port", str(port)], cwd=ROOT, env=server_env(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    connections = []
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                probe = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                probe.request("GET", "/healthz")
                assert probe.getresponse().status == 200
                probe.close()
                break
            except OSError:
                assert time.monotonic() < deadline and parent.poll() is None
                time.sleep(0.2)
        children = daphne_children(parent.pid)
        assert len(children) == 2
        before = {pid: sockets_of(pid) for pid in children}
        # A burst of keep-alive connections, as 32 clients opening at once: with one shared
        # socket the first child to wake took most (27 and 5 of them, say). Spread by the
        # kernel's hash, fewer than 8 in one child is a chance of about 1 in 1,000.
        connections = [http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                       for _ in range(32)]
        for client in connections:
            client.connect()
        for client in connections:
            client.request("GET", "/healthz")
            assert client.getresponse().read()
        gained = {pid: sockets_of(pid) - before[pid] for pid in children}
        assert all(n >= 8 for n in gained.values()), gained
        # The port is this server's: a second one refuses to start instead of sharing it.
        with pytest.raises(OSError):
            serve.listening_sockets("127.0.0.1", port, 1)
    finally:
        for client in connections:
            client.close()
        parent.terminate()
        parent.wait(30)


def test_serve_on_a_port_another_program_holds_says_so_and_exits():
    port = free_port()
    with socket.create_server(("127.0.0.1", port)):
        ran = subprocess.run([sys.executable, "-m", "mission_weave.runtime.serve", "--port",
                              str(port)], cwd=ROOT, env=server_env(), capture_output=True,
                             text=True, timeout=60)

    assert ran.returncode == 1 and "Traceback" not in ran.stderr
    assert ran.stderr.strip() == (
        f"serve: cannot listen on 127.0.0.1:{port}: Address already in use (another program "
        "is listening there); choose another port with --port or PORT")


def test_listening_sockets_share_one_free_port():
    port = free_port()
    sockets = serve.listening_sockets("127.0.0.1", port, 3)
    try:
        assert {s.getsockname()[1] for s in sockets} == {port}
        assert all(s.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) for s in sockets)
    finally:
        for s in sockets:
            s.close()


def test_twisted_leaves_a_posted_form_for_django_to_parse():
    """install_lean_requests: twisted's Request sets parsePOSTFormSubmission on each
    instance, True; the class's property keeps it False, so twisted never parses a form
    body (Django parses it, from the raw body daphne hands on)."""
    import daphne.server  # noqa: F401 - the lean requests are for a process daphne serves
    from daphne.http_protocol import WebRequest
    from twisted.web import http as twisted_http
    from twisted.web.test.requesthelper import DummyChannel

    install_lean_requests()
    request = object.__new__(WebRequest)
    twisted_http.Request.__init__(request, DummyChannel())
    assert request._parsePOSTFormSubmission is False
