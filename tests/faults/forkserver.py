"""A pre-forked HTTP server for the web-kill test (tests/faults/test_web_kills.py).

A thousand process restarts at a second each would take a quarter of an hour, most of it
importing Django. So this parent imports Django and the whole app once, opens no
database connection, binds the listening socket, and forks one child per life. The
child is the web process: it serves the API (Django's WSGI handler behind wsgiref, one
request at a time, the same URLs, middleware and views as daphne) with
MW_FAULT_POINT set to the point of this life, until apps/ledger/faults.py kills it
with SIGKILL. The parent reaps it and forks the next child, whose first work, before it
accepts a connection, is to compare the killed command's Group with a replay
(checks.after_kill) and send its finding up to the parent. So every kill is followed by
a check before the next load; a client's retry meanwhile waits in the socket's backlog,
as it would behind a load balancer while a process restarts.

    python -m tests.faults.forkserver --port P --kills N --rate R --report FILE --workdir DIR

The points rotate from life to life (before_append, after_append, before_commit,
after_commit). Each kill appends one JSON line to FILE: the kill number, the point, the
command that was in flight, what the check found, how long the life and the check took. After
N kills the children serve without faults until SIGTERM."""

import argparse
import contextlib
import io
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

POINTS = ("before_append", "after_append", "before_commit", "after_commit")


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # the base class's name
        pass


def serve(sock, app, port: int) -> None:
    """wsgiref on the inherited listening socket, until this process dies."""
    server = WSGIServer(("127.0.0.1", port), QuietHandler, bind_and_activate=False)
    server.socket.close()
    server.socket = sock
    server.server_name, server.server_port = "127.0.0.1", port
    server.setup_environ()
    server.set_app(app)
    server.serve_forever()


def noting(app, inflight: Path):
    """The app, writing the command id and Group of each POSTed command to `inflight`
    before handling it: what the parent reads once a fault point has killed the child."""
    def wrapped(environ, start_response):
        path = environ.get("PATH_INFO", "")
        if environ["REQUEST_METHOD"] == "POST" and path.endswith("/commands"):
            body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
            environ["wsgi.input"] = io.BytesIO(body)
            try:
                command_id = json.loads(body).get("id")
            except (ValueError, AttributeError):
                command_id = None
            group_id = path.split("/groups/", 1)[-1].split("/", 1)[0]
            inflight.write_text(json.dumps({"commandId": command_id, "groupId": group_id}))
        return app(environ, start_response)
    return wrapped


def warm_up(app) -> None:
    """One refused command through the whole stack (401, before any decision), so that
    what Django and DRF set up on first use is set up once, here, for every child. With
    no REDIS_URL meanwhile: the rate limits count in memory, and no Redis connection is
    left open for the children to share (each opens its own)."""
    from django.conf import settings

    redis_url, settings.REDIS_URL = settings.REDIS_URL, ""
    try:
        _refused_command(app)
    finally:
        settings.REDIS_URL = redis_url


def _refused_command(app) -> None:
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/api/v1/groups/grp_warm/commands",
               "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "80", "HTTP_HOST": "127.0.0.1",
               "CONTENT_TYPE": "application/json", "CONTENT_LENGTH": "2",
               "HTTP_AUTHORIZATION": "Bearer warm-up", "wsgi.input": io.BytesIO(b"{}"),
               "wsgi.url_scheme": "http", "wsgi.errors": sys.stderr}
    statuses = []
    b"".join(app(environ, lambda status, headers, exc_info=None: statuses.append(status)))
    if not statuses or not statuses[0].startswith("401"):
        raise SystemExit(f"the warm-up request answered {statuses}, not 401")


def open_connections() -> int:
    """TCP sockets this process has open (a database or Redis connection left behind)."""
    tcp = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            tcp |= {row.split()[9] for row in list(rows)[1:]}
    count = 0
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # the descriptor of the listing itself, gone already
            continue
        count += target.startswith("socket:[") and target[8:-1] in tcp
    return count


def check(kill: dict) -> dict:
    """What checks.after_kill finds for the last kill (in the new child, before it serves)."""
    from tests.faults import checks

    try:
        return checks.after_kill(kill["groupId"], kill["commandId"], kill["point"],
                                 kill["before"])
    except Exception as error:  # reported, never raised: the parent keeps its loop
        return {"problems": [f"the check failed: {error!r}"]}


def life(sock, app, port: int, point: str, rate: float, inflight: Path, last_kill, pipe) -> None:
    """One child: check the last kill and send the finding up `pipe` (before any
    connection is accepted), then serve with the fault point armed, until it kills us."""
    from django.conf import settings

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        if last_kill is not None:
            began = time.monotonic()
            found = {**check(last_kill), "checkSeconds": round(time.monotonic() - began, 4)}
            os.write(pipe, (json.dumps(found) + "\n").encode())
        os.close(pipe)
        settings.MW_FAULT_POINT, settings.MW_FAULT_RATE = point, rate
        serve(sock, noting(app, inflight), port)
    finally:
        os._exit(1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--kills", type=int, required=True)
    parser.add_argument("--rate", type=float, default=0.5)
    parser.add_argument("--report", required=True)
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args(argv)

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mission_weave.settings")
    import django

    django.setup()
    from django.core.wsgi import get_wsgi_application
    from django.db import connections
    from django.urls import get_resolver

    from mission_weave.runtime.serve import listening_socket
    from tests.faults import checks  # noqa: F401 - imported once here, not per check

    app = get_wsgi_application()
    get_resolver().url_patterns  # noqa: B018 - imports every view now, not in each child
    warm_up(app)
    for each in connections.all():  # no connection, no pool thread may cross a fork
        each.close()
        each.close_pool()
    if threading.active_count() > 1:
        raise SystemExit(f"the fork server must not fork with threads: {threading.enumerate()}")
    if open_connections():
        raise SystemExit(f"the fork server holds {open_connections()} TCP connection(s), which "
                         "every child would share")

    sock = listening_socket("127.0.0.1", args.port)
    inflight = Path(args.workdir) / "inflight.json"
    child = {"pid": None}
    stopping = {"now": False}

    def stop(signum, frame):
        stopping["now"] = True
        if child["pid"]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child["pid"], signal.SIGKILL)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    kills, committed = 0, set()  # command ids a kill found committed
    last_kill = None  # the kill the next child checks before it serves
    with open(args.report, "a") as report:
        while not stopping["now"]:
            point = POINTS[kills % len(POINTS)] if kills < args.kills else ""
            inflight.unlink(missing_ok=True)
            read_end, write_end = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(read_end)
                life(sock, app, args.port, point, args.rate, inflight, last_kill, write_end)
            born = time.monotonic()
            child["pid"] = pid
            os.close(write_end)
            with os.fdopen(read_end) as findings:
                found = findings.readline()
            if stopping["now"]:
                break
            if last_kill is not None:
                if not found:
                    report.write(json.dumps({"error": "a child died before its check"}) + "\n")
                    return 1
                found = json.loads(found)
                if found.get("committed"):
                    committed.add(last_kill["commandId"])
                report.write(json.dumps({**last_kill, **found}) + "\n")
                report.flush()
            _, status = os.waitpid(pid, 0)
            child["pid"] = None
            if stopping["now"]:
                break
            if not (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL):
                report.write(json.dumps({"error": f"a child ended with status {status}"})
                             + "\n")
                return 1
            kills += 1
            noted = json.loads(inflight.read_text()) if inflight.exists() else {}
            last_kill = {"kill": kills, "point": point, "commandId": noted.get("commandId"),
                         "groupId": noted.get("groupId"),
                         "before": noted.get("commandId") in committed,
                         "lifeSeconds": round(time.monotonic() - born, 4)}
    return 0


if __name__ == "__main__":
    sys.exit(main())
