"""Rate limits that keep one client from hurting the rest (docs/operations.md, "Limits").

Each kind of request (`commands`, `reads`, `sessions`, `login`) has one limit per
principal and one per client IP, in the `limits` library's notation (`600/second`,
`10/minute`; `0` turns it off), counted in sliding windows (two counters per key, one Lua
call per check). With Redis (REDIS_URL, or REDIS_SENTINELS' primary) the counts are kept
there, so every web process shares one count; without it each process counts for itself
(the embedded try-out).

A refused check raises ProtocolError RATE_LIMITED with `details.retryAfter` (whole
seconds, at least 1). The key is then remembered as refused in this process until then,
so a client that goes on flooding costs no Redis round trip at all. Should Redis fail,
requests pass and a warning is logged: a limit is a guard, PostgreSQL is the record.

The IP is checked first, by RateLimitMiddleware, before the session, the user or the body
is read; the principal once it is known: apps/api/auth.py (after the bearer token or the
Django session), the sessions view (the agent named in the body, before its signature is
checked) and the WebSocket consumer (COMMAND frames).
"""

import contextlib
import functools
import html
import logging
import math
import threading
import time

from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.shortcuts import resolve_url
from django.urls import NoReverseMatch, reverse
from limits import parse
from limits.errors import StorageError
from limits.storage import MemoryStorage, RedisStorage
from limits.strategies import SlidingWindowCounterRateLimiter

from mission_weave.protocol.errors import ProtocolError

from . import redis_connections

log = logging.getLogger(__name__)

KINDS = ("commands", "reads", "sessions", "login")
SCOPES = ("principal", "ip")
NOUNS = {"commands": "commands", "reads": "reads", "sessions": "session openings",
         "login": "sign-in attempts", "frames": "WebSocket frames"}
REDIS_PREFIX = "mw:limits"
REFUSED_MEMORY = 10_000  # keys remembered as refused in this process before it forgets all


def setting_name(kind: str, scope: str) -> str:
    return f"MW_RATE_{kind.upper()}_PER_{scope.upper()}"


@functools.lru_cache(maxsize=64)
def _item(text: str):
    """The parsed limit, or None when it is off."""
    text = (text or "").strip()
    return None if text in ("", "0") else parse(text)


class Counter:
    """Sliding-window counts in one storage, and the keys this process knows are refused
    (until when, in time.time() seconds)."""

    def __init__(self, storage: MemoryStorage | RedisStorage) -> None:
        self.limiter = SlidingWindowCounterRateLimiter(storage)
        self.refused_until: dict[str, float] = {}
        self.warned_at = 0.0

    def hit(self, item, *identifiers: str) -> int | None:
        """Count one; None if it passes, else the seconds until it would."""
        key = item.key_for(*identifiers)
        now = time.time()
        until = self.refused_until.get(key)
        if until is not None:
            if until > now:
                return max(1, math.ceil(until - now))
            self.refused_until.pop(key, None)
        try:
            if self.limiter.hit(item, *identifiers):
                return None
            reset = self.limiter.get_window_stats(item, *identifiers).reset_time
        except StorageError as error:
            self._storage_failed(error)
            return None
        if len(self.refused_until) >= REFUSED_MEMORY:
            self.refused_until.clear()
        # At least a moment: a reset in the past (clock drift) must not make it free.
        self.refused_until[key] = max(reset, now + 0.001)
        return max(1, math.ceil(reset - now))

    def test(self, item, *identifiers: str) -> int | None:
        """Like hit, without counting: None if one more would pass."""
        try:
            if self.limiter.test(item, *identifiers):
                return None
            reset = self.limiter.get_window_stats(item, *identifiers).reset_time
        except StorageError as error:
            self._storage_failed(error)
            return None
        return max(1, math.ceil(reset - time.time()))

    def _storage_failed(self, error) -> None:
        now = time.monotonic()
        if now - self.warned_at > 60:  # once a minute, not once a request
            self.warned_at = now
            log.warning("rate limits are not enforced: their storage failed (%s)",
                        type(error.storage_error).__name__)


_counters: dict[str, Counter] = {}
_counters_lock = threading.Lock()


def _counter() -> Counter:
    """The shared counter: in Redis when there is one, else in this process's memory."""
    where = redis_connections.location()
    counter = _counters.get(where)
    if counter is None:
        with _counters_lock:
            counter = _counters.get(where)
            if counter is None:
                counter = _counters[where] = Counter(_storage())
    return counter


def _storage() -> MemoryStorage | RedisStorage:
    if not redis_connections.configured():
        return MemoryStorage(wrap_exceptions=True)
    # Short timeouts: a stalled Redis must not stall every request with it.
    return redis_connections.rate_limit_storage(wrap_exceptions=True, key_prefix=REDIS_PREFIX,
                                                socket_timeout=1, socket_connect_timeout=1)


_local = None


def local_counter() -> Counter:
    """This process's own memory, for what is never shared (a WebSocket's frames)."""
    global _local
    if _local is None:
        with _counters_lock:
            if _local is None:
                _local = Counter(MemoryStorage(wrap_exceptions=True))
    return _local


# --- checks -------------------------------------------------------------------------------

def refusal(kind: str, scope: str, limit: str, retry_after: int) -> ProtocolError:
    who = {"principal": "this principal", "ip": "this address"}.get(scope, f"this {scope}")
    return ProtocolError(
        "RATE_LIMITED", f"too many {NOUNS[kind]} from {who} (at most {limit}); nothing was "
        f"done: retry in {retry_after} s",
        {"retryAfter": retry_after, "limit": limit, "scope": scope})


def check(kind: str, *, ip: str | None = None, principal: str | None = None,
          count: bool = True) -> None:
    """Count a request of `kind` against the IP's and the principal's limits (each one
    given); raise RATE_LIMITED at the first that is over. count=False only asks whether
    one more would pass."""
    for scope, who in (("ip", ip), ("principal", principal)):
        if who is None:
            continue
        text = getattr(settings, setting_name(kind, scope))
        item = _item(text)
        if item is None:
            continue
        counter = _counter()
        ask = counter.hit if count else counter.test
        retry_after = ask(item, kind, scope, who)
        if retry_after is not None:
            raise refusal(kind, scope, text.strip(), retry_after)


def record(kind: str, *, principal: str) -> None:
    """Count one against the principal without refusing (after it was done)."""
    item = _item(getattr(settings, setting_name(kind, "principal")))
    if item is not None:
        _counter().hit(item, kind, "principal", principal)


def check_frame(connection_key: str) -> None:
    """A WebSocket frame against its connection's MW_WS_FRAME_RATE (in this process)."""
    item = _item(settings.MW_WS_FRAME_RATE)
    if item is None:
        return
    retry_after = local_counter().hit(item, "frames", connection_key)
    if retry_after is not None:
        raise refusal("frames", "connection", settings.MW_WS_FRAME_RATE.strip(), retry_after)


def refused_too_often(connection_key: str) -> bool:
    """After a refused frame: has this connection had another MW_WS_FRAME_RATE's worth of
    frames refused within the window (it keeps sending at twice the rate)?"""
    item = _item(settings.MW_WS_FRAME_RATE)
    return item is not None and local_counter().hit(item, "refused", connection_key) is not None


# --- HTTP -----------------------------------------------------------------------------

def with_retry_after(response, error: ProtocolError):
    """The Retry-After header of a RATE_LIMITED answer (RFC 9110: whole seconds)."""
    if error.code == "RATE_LIMITED" and "retryAfter" in error.details:
        response["Retry-After"] = str(error.details["retryAfter"])
    return response


@functools.lru_cache(maxsize=1)
def login_paths() -> frozenset:
    paths = {resolve_url(settings.LOGIN_URL)}
    with contextlib.suppress(NoReverseMatch):
        paths.add(reverse("admin:login"))
    return frozenset(paths)


def kind_of(method: str, path: str) -> str | None:
    """Which limit a request counts against, if any. Under /api/v1/ a write that is not
    a session opening (commands, presence, introspection, blob uploads) is `commands`."""
    if path.startswith("/api/v1/"):
        if method in ("GET", "HEAD", "OPTIONS"):
            return "reads"
        return "sessions" if method == "POST" and path == "/api/v1/sessions" else "commands"
    if method == "POST" and path in login_paths():
        return "login"
    return None


def client_ip(request) -> str:
    # daphne's --proxy-headers puts X-Forwarded-For's client here, behind a proxy.
    return request.META.get("REMOTE_ADDR") or "unknown"


class RateLimitMiddleware:
    """The per-IP limits, before anything else reads the request (early in MIDDLEWARE),
    and a sign-in's username: a refused request costs one Redis call and changes
    nothing."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        kind = kind_of(request.method, request.path_info)
        if kind is not None:
            try:
                check(kind, ip=client_ip(request))
                if kind == "login":
                    username = request.POST.get("username", "")
                    check(kind, principal=f"user:{username[:150]}")
            except ProtocolError as error:
                return self.refused(request, error)
        return self.get_response(request)

    @staticmethod
    def refused(request, error: ProtocolError):
        if request.path_info.startswith("/api/"):
            return with_retry_after(JsonResponse(error.as_json(), status=429), error)
        seconds = error.details["retryAfter"]
        page = (f"<!doctype html><title>Too many attempts</title><h1>Too many attempts</h1>"
                f"<p>Too many sign-in attempts from here; nothing was checked. Try again in "
                f"{seconds} seconds.</p><p><a href=\"{html.escape(request.path)}\">Back to "
                f"the sign-in form</a></p>")
        return with_retry_after(HttpResponse(page, status=429), error)
