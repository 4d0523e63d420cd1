"""Serve the ASGI app with several daphne processes on one listening socket.

Django runs sync views on one thread per process, so HTTP throughput grows with
processes, not threads. The parent binds one socket per daphne child on the same port
(SO_REUSEPORT) and hands each its own (`--fd`), so the kernel spreads connections over
the children evenly; with one shared socket, the first child to wake accepted a whole
burst of keep-alive connections (twisted accepts up to 100 per wake) and served them all
on one core while the others idled. The parent stops them all on SIGINT/SIGTERM.

    python -m mission_weave.runtime.serve --workers 2 --host 127.0.0.1 --port 8000 [daphne options]

Options it does not know (e.g. --proxy-headers) are passed on to each daphne, after the
ones it derives from the settings (WebSocket pings), which they override.
"""

import argparse
import contextlib
import errno
import os
import signal
import socket
import subprocess
import sys


def listening_socket(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.set_inheritable(True)
    return sock


def listening_sockets(host: str, port: int, count: int) -> list[socket.socket]:
    """`count` sockets on one port. A plain bind first, closed at once: SO_REUSEPORT
    would otherwise share the port with another server of this user already on it
    (splitting its connections) instead of failing."""
    listening_socket(host, port).close()
    return [listening_socket(host, port, reuse_port=True) for _ in range(count)]


def listen_error(host: str, port: int, error: OSError) -> str:
    """Why a bind on host:port failed, in a sentence."""
    held = " (another program is listening there)" if error.errno == errno.EADDRINUSE else ""
    return f"cannot listen on {host}:{port}: {error.strerror}{held}"


def cannot_listen(host: str, port: int) -> str | None:
    """Why this process cannot serve on host:port; None if it can."""
    try:
        listening_socket(host, port).close()
    except OSError as error:
        return listen_error(host, port, error)
    return None


def daphne_limits() -> list[str]:
    """daphne's options for what the settings limit (docs/operations.md, "Limits"): an idle
    WebSocket is pinged after MW_WS_PING_INTERVAL_SECONDS without a frame from its client,
    and closed when the pong has not come MW_WS_PING_TIMEOUT_SECONDS later."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mission_weave.settings")
    from django.conf import settings

    return ["--ping-interval", str(settings.MW_WS_PING_INTERVAL_SECONDS),
            "--ping-timeout", str(settings.MW_WS_PING_TIMEOUT_SECONDS)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=int(os.getenv("MW_WEB_WORKERS", "1")))
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=int(os.getenv("PORT", "8000")))
    parser.add_argument("--app", default="mission_weave.asgi:application")
    parser.add_argument("--access-log", action="store_true")
    args, daphne_options = parser.parse_known_args(argv)

    options = [*daphne_limits(), *daphne_options, *([] if args.access_log else ["-v", "0"]),
               args.app]
    try:
        sockets = listening_sockets(args.host, args.port, max(1, args.workers))
    except OSError as error:
        print(f"serve: {listen_error(args.host, args.port, error)}; choose another port with "
              "--port or PORT", file=sys.stderr)
        return 1
    children = [subprocess.Popen([sys.executable, "-m", "daphne", "--fd", str(sock.fileno()),
                                  *options], pass_fds=[sock.fileno()])
                for sock in sockets]

    def stop(signum, frame):
        for child in children:
            if child.poll() is None:
                child.terminate()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # The first child to exit takes the others down: a half-alive server is worse.
    exit_code = 0
    with contextlib.suppress(ChildProcessError):
        os.wait()
    stop(None, None)
    for child in children:
        exit_code = child.wait() or exit_code
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
