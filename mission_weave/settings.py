"""MissionWeave settings: one file, configured by environment variables.

The database is always PostgreSQL: DATABASE_URL, or else the private one the embedded
stack (`make run`, mission_weave/stack) runs for MW_DATA_DIR. REDIS_URL likewise; with
no Redis at all, the in-memory channel layer, eager Celery tasks and an in-process
sweeper stand in. Production hardening is in settings_production.py. Code elsewhere
reads these through django.conf.settings at call time, never at import time.
"""

import json
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def envstr(name, default=None):
    return os.getenv(name, default)


def envbool(name, default):
    value = os.getenv(name)
    if value is None or value.strip() == "":
        return default
    value = value.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be one of {_TRUE + _FALSE}, got {value!r}")


def envint(name, default):
    value = os.getenv(name)
    if value is None or value.strip() == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}") from None


def _host_and_port(name, address):
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ImproperlyConfigured(f"{name} must list host:port pairs, got {address!r}")
    return (host, int(port))


def envlist(name, default):
    value = os.getenv(name)
    if value is None or value.strip() == "":
        return list(default)
    return [item.strip() for item in value.split(",") if item.strip()]


BASE_DIR = Path(__file__).resolve().parent.parent
MW_DATA_DIR = Path(envstr("MW_DATA_DIR", str(BASE_DIR / ".mw")))
MW_DATA_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = envbool("DEBUG", True)
SECRET_KEY = envstr("SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off")
    SECRET_KEY = "mw-dev-only-insecure-key-8f3c1e0b7a9d4c62b5e1f0a3d7c9b2e4"

ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",  # first, so that `manage.py runserver` serves ASGI (WebSockets)
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI / ReDoc assets for the API reference page
    "channels",
    "django_htmx",
    "apps.identity",
    "apps.ledger",
    "apps.work",
    "apps.review",  # the Evidence review (§13.2): above work, whose WorkItems it reads
    "apps.artifacts",
    "apps.delivery",
    "apps.notify",  # people told when something waits on them (e-mail, digest)
    "apps.webhooks",  # a Group's events POSTed, signed, to its webhooks
    "apps.api",
    "apps.bench",
    "apps.dashboard",
    "apps.operations",  # /healthz, /readyz, /metrics, request and command logs
]

MIDDLEWARE = [
    # First: the request id and the request's log line cover everything below; the probes
    # and /metrics are answered before the host check and the HTTPS redirect.
    "apps.operations.middleware.RequestLogMiddleware",
    "apps.operations.middleware.OperationsEndpointsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Per-IP rate limits before anything reads the request
    # (mission_weave/runtime/rate_limits.py).
    "mission_weave.runtime.rate_limits.RateLimitMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # After the session, the user, messages and htmx: its refusal is a dashboard page.
    "apps.dashboard.middleware.RefuseNulMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "apps.api.middleware.ApiErrorsMiddleware",
]

ROOT_URLCONF = "mission_weave.urls"
ASGI_APPLICATION = "mission_weave.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.debug",
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# The embedded stack writes the URLs of the services it started here while it runs, so
# that `python manage.py ...` beside `make run` finds them without any environment.
_STACK = MW_DATA_DIR / "services.json"
_stack_urls = json.loads(_STACK.read_text()) if _STACK.exists() else {}

DATABASE_URL = envstr("DATABASE_URL") or _stack_urls.get("DATABASE_URL")
if not DATABASE_URL:
    raise ImproperlyConfigured(
        f"No database: set DATABASE_URL (postgres://...), or start the embedded stack with "
        f"`make run`, which runs a private PostgreSQL for {MW_DATA_DIR}.")
DATABASES = {"default": dj_database_url.parse(DATABASE_URL)}
if DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
    raise ImproperlyConfigured(f"DATABASE_URL must name a PostgreSQL database, not "
                               f"{DATABASES['default']['ENGINE']}")
# Under ASGI every request runs in a thread of its own, so Django's persistent
# connections would open a new PostgreSQL connection per request (~20 ms). A
# process-wide psycopg pool hands each request a warm one instead.
DATABASES["default"]["CONN_MAX_AGE"] = 0
# Server-side binding lets psycopg prepare the hot statements once per connection.
DATABASES["default"].setdefault("OPTIONS", {}).update(server_side_binding=True,
                                                      prepare_threshold=2)
DATABASES["default"]["OPTIONS"]["pool"] = {
    "min_size": envint("MW_DB_POOL_MIN", 2),
    "max_size": envint("MW_DB_POOL_MAX", 20),
    "timeout": envint("MW_DB_POOL_TIMEOUT", 10),
}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "dashboard:login"

# --- Sign-in with OpenID Connect (docs/operations.md "Sign-in with OpenID Connect") -------
# mozilla-django-oidc's own setting names. Off unless OIDC_RP_CLIENT_ID is set; local
# passwords (ModelBackend) work either way. Nothing here reads the network: the endpoints
# are given (`manage.py mw_oidc_discover ISSUER` prints them from the provider).
OIDC_RP_CLIENT_ID = envstr("OIDC_RP_CLIENT_ID", "")
OIDC_RP_CLIENT_SECRET = envstr("OIDC_RP_CLIENT_SECRET", "")
# The provider's issuer: the ID token's `iss` must be it, and with `sub` it names the person.
OIDC_OP_ISSUER = envstr("OIDC_OP_ISSUER", "").rstrip("/")
OIDC_OP_AUTHORIZATION_ENDPOINT = envstr("OIDC_OP_AUTHORIZATION_ENDPOINT", "")
OIDC_OP_TOKEN_ENDPOINT = envstr("OIDC_OP_TOKEN_ENDPOINT", "")
OIDC_OP_USER_ENDPOINT = envstr("OIDC_OP_USER_ENDPOINT", "")
OIDC_OP_JWKS_ENDPOINT = envstr("OIDC_OP_JWKS_ENDPOINT", "")
OIDC_RP_SIGN_ALGO = envstr("OIDC_RP_SIGN_ALGO", "RS256")
OIDC_RP_SCOPES = envstr("OIDC_RP_SCOPES", "openid email profile")
# The sign-in button says "Sign in with <this>".
OIDC_PROVIDER_NAME = envstr("OIDC_PROVIDER_NAME", "single sign-on")
# client_secret_basic, the method every provider must support (OpenID Connect Core §9);
# 0 sends the secret in the form body (client_secret_post).
OIDC_TOKEN_USE_BASIC_AUTH = envbool("OIDC_TOKEN_USE_BASIC_AUTH", True)
OIDC_USE_PKCE = envbool("OIDC_USE_PKCE", True)
# Seconds a call to the provider (token, keys, userinfo) may take; a sign-in waits on it.
OIDC_TIMEOUT = envint("OIDC_TIMEOUT", 10)
OIDC_ENABLED = bool(OIDC_RP_CLIENT_ID)
if OIDC_ENABLED:
    _missing = [name for name in ("OIDC_RP_CLIENT_SECRET", "OIDC_OP_ISSUER",
                                  "OIDC_OP_AUTHORIZATION_ENDPOINT", "OIDC_OP_TOKEN_ENDPOINT",
                                  "OIDC_OP_USER_ENDPOINT", "OIDC_OP_JWKS_ENDPOINT")
                if not globals()[name]]
    if _missing:
        raise ImproperlyConfigured(f"OIDC_RP_CLIENT_ID is set, so sign-in with OpenID Connect "
                                   f"needs {', '.join(_missing)} too")
    if OIDC_RP_SIGN_ALGO not in ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512",
                                 "PS256", "PS384", "PS512"):
        raise ImproperlyConfigured(f"OIDC_RP_SIGN_ALGO must name a public-key algorithm "
                                   f"such as RS256, got {OIDC_RP_SIGN_ALGO!r}")
    if "openid" not in OIDC_RP_SCOPES.split():
        raise ImproperlyConfigured(f"OIDC_RP_SCOPES must include openid, got {OIDC_RP_SCOPES!r}")
# The views and the backend (the mapping of (issuer, sub) to one user, never by e-mail).
OIDC_AUTHENTICATE_CLASS = "apps.dashboard.sign_in.AuthenticateView"
OIDC_CALLBACK_CLASS = "apps.dashboard.sign_in.CallbackView"
AUTHENTICATION_BACKENDS = ["django.contrib.auth.backends.ModelBackend"]
if OIDC_ENABLED:
    AUTHENTICATION_BACKENDS.append("apps.identity.oidc.OidcBackend")
LOGIN_REDIRECT_URL = "dashboard:groups"
LOGIN_REDIRECT_URL_FAILURE = "dashboard:sign_in_refused"

# Redis: channel layer and Celery broker. Without it: in-memory layer, eager tasks.
REDIS_URL = envstr("REDIS_URL") or _stack_urls.get("REDIS_URL", "")
# Or Redis through Sentinel, found again after a failover (docs/operations.md, "Redis with
# failover (Sentinel)"): the sentinels as host:port, the name they know the primary by,
# and the sentinels' and Redis's passwords (from the environment only). Then REDIS_URL
# is not used. The code connects through mission_weave/runtime/redis_connections.py.
REDIS_SENTINELS = [_host_and_port("REDIS_SENTINELS", address)
                   for address in envlist("REDIS_SENTINELS", [])]
REDIS_SENTINEL_MASTER = envstr("REDIS_SENTINEL_MASTER", "") or "mymaster"
REDIS_SENTINEL_PASSWORD = envstr("REDIS_SENTINEL_PASSWORD", "") or None
REDIS_PASSWORD = envstr("REDIS_PASSWORD", "") or None
if REDIS_SENTINELS:
    from mission_weave.runtime.redis_connections import credentials

    REDIS_URL = ""
    # How the channel layer and Celery talk to a sentinel: short timeouts pass a dead one.
    _sentinel_kwargs = {**credentials(REDIS_SENTINEL_PASSWORD), "socket_timeout": 1,
                        "socket_connect_timeout": 1}
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [{"sentinels": REDIS_SENTINELS,
                                  "master_name": REDIS_SENTINEL_MASTER,
                                  "sentinel_kwargs": _sentinel_kwargs,
                                  **credentials(REDIS_PASSWORD)}]},
        }
    }
    CACHES = {"default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_SENTINEL_MASTER, "KEY_PREFIX": "mw",
        "OPTIONS": {"pool_class": "mission_weave.runtime.redis_connections.SentinelCachePool"}}}
elif REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL]},
        }
    }
    # Shared by every process (the log page's chain verification, apps/dashboard/log_page.py).
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                          "LOCATION": REDIS_URL, "KEY_PREFIX": "mw"}}
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
# WebSocket event fan-out does not go through the channel layer: one Redis pub/sub
# subscription per process feeds its connections (apps/delivery/hub.py). An open
# connection re-checks a Group's membership at least this often (changes also
# notify it at once).
MW_WS_MEMBERSHIP_TTL_SECONDS = envint("MW_WS_MEMBERSHIP_TTL_SECONDS", 5)

CELERY_BROKER_URL = REDIS_URL or None
if REDIS_SENTINELS:
    # kombu's Sentinel transport: the sentinels, `;` between them. Redis's password is in
    # each one, as kombu takes it from the URL it fails over to (Celery masks it in logs).
    _password = f":{quote(REDIS_PASSWORD, safe='')}@" if REDIS_PASSWORD else ""
    CELERY_BROKER_URL = ";".join(f"sentinel://{_password}{host}:{port}"
                                 for host, port in REDIS_SENTINELS)
    CELERY_BROKER_TRANSPORT_OPTIONS = {"master_name": REDIS_SENTINEL_MASTER,
                                       "sentinel_kwargs": _sentinel_kwargs}
# Without a broker, tasks run inline after the commit that starts them; MW_TASKS_EAGER=1
# forces that with one too (a test server that should finish its work before answering).
CELERY_TASK_ALWAYS_EAGER = envbool("MW_TASKS_EAGER", not CELERY_BROKER_URL)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_RESULT_BACKEND = None
CELERY_TIMEZONE = "UTC"
# The sweeper (apps/work/sweeper.py): expired leases, start-by deadlines, blocked leases,
# next sequential offers. Seconds between sweeps, and most WorkItems one sweep takes.
MW_SWEEP_INTERVAL_SECONDS = envint("MW_SWEEP_INTERVAL_SECONDS", 5)
MW_SWEEP_BATCH = envint("MW_SWEEP_BATCH", 5000)
# Most WorkItems of one Group per sweep transaction: bounds how long commands wait.
MW_SWEEP_GROUP_CHUNK = envint("MW_SWEEP_GROUP_CHUNK", 100)
# How much nicer than its process the sweeper's thread that decides expiries before the
# Group lock runs (os.nice increment; 0 for the same priority): commands come first.
MW_SWEEP_NICENESS = envint("MW_SWEEP_NICENESS", 10)
# Without Redis there is no Celery beat: each web process sweeps in a thread of its own.
MW_SWEEP_IN_PROCESS = envbool("MW_SWEEP_IN_PROCESS", not (REDIS_URL or REDIS_SENTINELS))
# Retention (apps/ledger/retention.py): keep at least this many newest events of each Group
# in the online log, snapshot and archive the older ones (0 turns it off); how often.
MW_RETENTION_ONLINE_EVENTS = envint("MW_RETENTION_ONLINE_EVENTS", 100_000)
MW_RETENTION_INTERVAL_SECONDS = envint("MW_RETENTION_INTERVAL_SECONDS", 3600)
# Most events one archiving transaction moves: bounds how long commands wait on the Group.
MW_ARCHIVE_CHUNK = envint("MW_ARCHIVE_CHUNK", 10_000)
# How often beat resumes reviews (§13.2) whose task was lost: Redis is a hint, and the
# WorkItem's review says which step is missing (apps/review/tasks.py).
MW_REVIEW_RESUME_SECONDS = envint("MW_REVIEW_RESUME_SECONDS", 60)
# Outgoing webhooks (apps/webhooks, docs/operations.md "Webhooks"): how often beat
# catches up webhooks behind their Group's log and deliveries whose retry was lost; the
# send's timeout; attempts per delivery and the backoff between them (doubling from
# BACKOFF to BACKOFF_MAX); events per fan-out transaction. ALLOW_PRIVATE: whether a
# webhook may point at loopback, private or link-local addresses (unset: only while
# DEBUG is on, so never in production).
MW_WEBHOOK_CATCH_UP_SECONDS = envint("MW_WEBHOOK_CATCH_UP_SECONDS", 30)
MW_WEBHOOK_TIMEOUT_SECONDS = envint("MW_WEBHOOK_TIMEOUT_SECONDS", 10)
MW_WEBHOOK_MAX_ATTEMPTS = envint("MW_WEBHOOK_MAX_ATTEMPTS", 16)  # ~7.5 h of retries
MW_WEBHOOK_BACKOFF_SECONDS = envint("MW_WEBHOOK_BACKOFF_SECONDS", 10)
MW_WEBHOOK_BACKOFF_MAX_SECONDS = envint("MW_WEBHOOK_BACKOFF_MAX_SECONDS", 3600)
MW_WEBHOOK_BATCH = envint("MW_WEBHOOK_BATCH", 500)
MW_WEBHOOK_ALLOW_PRIVATE = envbool("MW_WEBHOOK_ALLOW_PRIVATE", None)
# The Celery queue of the webhook tasks: a worker of their own (`-Q webhooks`) keeps slow
# receivers from delaying the review's tasks. Default: Celery's default queue.
MW_WEBHOOK_QUEUE = envstr("MW_WEBHOOK_QUEUE", "celery")
# Days a delivered or failed delivery (its body, its attempts) is kept; 0: forever.
MW_WEBHOOK_KEEP_DAYS = envint("MW_WEBHOOK_KEEP_DAYS", 30)
CELERY_BEAT_SCHEDULE = {
    "sweep": {"task": "apps.work.tasks.sweep", "schedule": MW_SWEEP_INTERVAL_SECONDS,
              # A round not started within an interval is superseded by the next one.
              "options": {"expires": MW_SWEEP_INTERVAL_SECONDS}},
    "review-resume": {"task": "apps.review.tasks.resume",
                      "schedule": MW_REVIEW_RESUME_SECONDS,
                      "options": {"expires": MW_REVIEW_RESUME_SECONDS}},
    "webhooks-catch-up": {"task": "apps.webhooks.tasks.catch_up",
                          "schedule": MW_WEBHOOK_CATCH_UP_SECONDS,
                          "options": {"expires": MW_WEBHOOK_CATCH_UP_SECONDS,
                                      "queue": MW_WEBHOOK_QUEUE}},
    "retention": {"task": "apps.ledger.tasks.retention",
                  "schedule": MW_RETENTION_INTERVAL_SECONDS,
                  "options": {"expires": MW_RETENTION_INTERVAL_SECONDS}},
}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"
# Serve /static/ from the ASGI app itself (daphne has no static file server). Fine for
# the try-out and small deployments; put a CDN or proxy in front for heavy traffic.
MW_SERVE_STATIC = envbool("MW_SERVE_STATIC", DEBUG)

# Threads per web process that run requests (mission_weave/runtime/http_handler.py).
# Requests wait on PostgreSQL, not on Python, for part of their time; a few threads
# overlap that.
MW_HTTP_THREADS = envint("MW_HTTP_THREADS", 4)

DATA_UPLOAD_MAX_MEMORY_SIZE = envint("MW_MAX_BODY_BYTES", 1_048_576)

REST_FRAMEWORK = {
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "apps.api.auth.BearerSessionAuthentication",
        "apps.api.auth.UserSessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": [],
    "UNAUTHENTICATED_USER": None,
    "EXCEPTION_HANDLER": "apps.api.error_responses.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "MissionWeave Group Authority API",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # 3.1: its Schema Object is JSON Schema 2020-12, the dialect the server validates with,
    # so the request and answer schemas come from those schemas (apps/api/openapi.py).
    "OAS_VERSION": "3.1.0",
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums",
                             "apps.api.openapi.postprocess"],
    # The reference pages (/api/v1/docs/, /api/v1/redoc/) load their assets from
    # drf-spectacular-sidecar's static files, never from a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # No badge from validator.swagger.io either: the page calls nothing but this server.
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
}

# --- Protocol (PROTOCOL.md) -----------------------------------------------------------
# Group commit (apps/ledger/group_commit.py): commands arriving together in one process
# are decided and appended in one transaction. Off, each has its own. Most commands per
# batch, and how long a batch waits for more before it starts (0: it takes what queued
# while the previous batch ran).
MW_GROUP_COMMIT = envbool("MW_GROUP_COMMIT", True)
MW_GROUP_COMMIT_MAX = envint("MW_GROUP_COMMIT_MAX", 32)
MW_GROUP_COMMIT_WAIT_MS = envint("MW_GROUP_COMMIT_WAIT_MS", 0)
# Allowed difference between a signed issuedAt and server time.
MW_CLOCK_SKEW_SECONDS = envint("MW_CLOCK_SKEW_SECONDS", 300)
# Time from offer acceptance to startBy when the offer sets no startWithinSeconds.
MW_START_WINDOW_SECONDS = envint("MW_START_WINDOW_SECONDS", 600)
# Lease length for work.start / lease.renew without leaseSeconds.
MW_DEFAULT_LEASE_SECONDS = envint("MW_DEFAULT_LEASE_SECONDS", 300)
# Largest leaseSeconds a work.start / lease.renew may ask for.
MW_MAX_LEASE_SECONDS = envint("MW_MAX_LEASE_SECONDS", 3600)
# Blocked lease length for work.block without blockedLeaseSeconds.
MW_DEFAULT_BLOCKED_LEASE_SECONDS = envint("MW_DEFAULT_BLOCKED_LEASE_SECONDS", 3600)
# Largest blockedLeaseSeconds a work.block may ask for.
MW_MAX_BLOCKED_LEASE_SECONDS = envint("MW_MAX_BLOCKED_LEASE_SECONDS", 86400)
# §11.5: how long after its lease's expiry a command buffered offline may still have been
# buffered (graceDeadline at most lease expiry + this), never more than the maximum.
MW_OFFLINE_GRACE_SECONDS = envint("MW_OFFLINE_GRACE_SECONDS", 300)
MW_MAX_OFFLINE_GRACE_SECONDS = envint("MW_MAX_OFFLINE_GRACE_SECONDS", 3600)
# Lifetime of an Agent session token.
MW_SESSION_TTL_SECONDS = envint("MW_SESSION_TTL_SECONDS", 86400)
# Most candidates one urgent work.offer may name.
MW_MAX_URGENT_CANDIDATES = envint("MW_MAX_URGENT_CANDIDATES", 10)
# A Presence report older than this counts as unknown when offers are ranked.
MW_PRESENCE_TTL_SECONDS = envint("MW_PRESENCE_TTL_SECONDS", 120)
# How long an offer made by automatic dispatch (autoDispatch Missions) stays open.
MW_AUTO_OFFER_SECONDS = envint("MW_AUTO_OFFER_SECONDS", 600)
# Largest `limit` of GET .../events (one page of the event feed).
MW_EVENTS_PAGE_MAX = envint("MW_EVENTS_PAGE_MAX", 1000)
# Group Authority Ed25519 signing key: base64url 32-byte seed (optional; see the file).
MW_AUTHORITY_KEY = envstr("MW_AUTHORITY_KEY") or None
# Where the authority key seed is kept when MW_AUTHORITY_KEY is not set.
MW_AUTHORITY_KEY_FILE = Path(envstr("MW_AUTHORITY_KEY_FILE", str(MW_DATA_DIR / "authority.key")))
# The id of the MW_AUTHORITY_KEY key, authority#<n> (empty: authority#1); one up per rotation.
MW_AUTHORITY_KEY_ID = envstr("MW_AUTHORITY_KEY_ID", "")
# Retired authority keys that still verify: "authority#<n>=<publicKey>[@<retiredAt>],...".
MW_AUTHORITY_RETIRED_KEYS = envstr("MW_AUTHORITY_RETIRED_KEYS", "")

# --- Notifications (apps/notify, docs/operations.md "Notifications") ----------------------
# E-mail with Django's own names. With no EMAIL_HOST the mail is caught: written to files
# under EMAIL_FILE_PATH (Django's file backend) and shown to operators at /mail/, so the
# try-out's mail can be read without a mail server.
EMAIL_HOST = envstr("EMAIL_HOST", "")
EMAIL_PORT = envint("EMAIL_PORT", 25)
EMAIL_HOST_USER = envstr("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = envstr("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = envbool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = envbool("EMAIL_USE_SSL", False)
EMAIL_TIMEOUT = envint("EMAIL_TIMEOUT", 30)
DEFAULT_FROM_EMAIL = envstr("DEFAULT_FROM_EMAIL", "MissionWeave <missionweave@localhost>")
EMAIL_FILE_PATH = Path(envstr("EMAIL_FILE_PATH", str(MW_DATA_DIR / "mail")))
EMAIL_BACKEND = envstr("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend"
                       if EMAIL_HOST else "django.core.mail.backends.filebased.EmailBackend")
# The dashboard's address as people reach it: each mail's link to its decision starts here.
MW_PUBLIC_URL = envstr("MW_PUBLIC_URL", "http://127.0.0.1:8000").rstrip("/")
# A reminder when a decision still waits this long after its last mail; at most this many.
MW_NOTIFY_REMIND_AFTER_SECONDS = envint("MW_NOTIFY_REMIND_AFTER_SECONDS", 86400)
MW_NOTIFY_REMINDERS = envint("MW_NOTIFY_REMINDERS", 3)
# The daily digest goes out at this hour (UTC), to those who chose it for a Group.
MW_NOTIFY_DIGEST_HOUR = envint("MW_NOTIFY_DIGEST_HOUR", 7)
# How often beat catches up: Groups whose log is ahead of the notifier (a hint lost with a
# crash), mails not sent, reminders and digests due.
MW_NOTIFY_CATCH_UP_SECONDS = envint("MW_NOTIFY_CATCH_UP_SECONDS", 30)
# A mail a sender took this long ago without marking it sent (the sender died, or the
# mail server failed) is sent again, with the same Message-ID; at most ATTEMPTS times.
MW_NOTIFY_CLAIM_SECONDS = envint("MW_NOTIFY_CLAIM_SECONDS", 300)
MW_NOTIFY_ATTEMPTS = envint("MW_NOTIFY_ATTEMPTS", 5)
# Most events one look at a Group's log reads (one transaction).
MW_NOTIFY_BATCH = envint("MW_NOTIFY_BATCH", 1000)
CELERY_BEAT_SCHEDULE["notify-catch-up"] = {
    "task": "apps.notify.tasks.catch_up", "schedule": MW_NOTIFY_CATCH_UP_SECONDS,
    "options": {"expires": MW_NOTIFY_CATCH_UP_SECONDS}}

# --- Operations (apps/operations, docs/operations.md "Metrics") ---------------------------
# GET /metrics answers a request bearing this token (Authorization: Bearer ...) from any
# address. Empty: no token is accepted.
MW_METRICS_TOKEN = envstr("MW_METRICS_TOKEN", "")
# ...and, without the token, requests from these networks (CIDR, comma-separated) that came
# straight to the server (no X-Forwarded-For). "none": the token only.
MW_METRICS_ALLOW = envlist("MW_METRICS_ALLOW", ["127.0.0.1/32", "::1/128"])
# Where each process keeps its counters for prometheus_client's multiprocess mode, so that
# a scrape of any process sums the host's; one folder per host name (a container's own).
MW_METRICS_DIR = Path(envstr("MW_METRICS_DIR",
                             str(MW_DATA_DIR / "metrics" / os.uname().nodename)))

# Fault injection for `make test-faults` only (apps/ledger/faults.py): the point of the
# command transaction where the process kills itself, and how often. Empty: never.
MW_FAULT_POINT = envstr("MW_FAULT_POINT", "")
MW_FAULT_RATE = float(envstr("MW_FAULT_RATE", "1") or 1)

# --- Blob store (PROTOCOL §5) ------------------------------------------------------------
# Largest blob a PUT may carry, in bytes (PAYLOAD_TOO_LARGE above it). Blob bodies are
# streamed, so DATA_UPLOAD_MAX_MEMORY_SIZE (MW_MAX_BODY_BYTES) does not apply to them.
MW_BLOB_MAX_BYTES = envint("MW_BLOB_MAX_BYTES", 1024 * 1024 * 1024)
# The review pipeline (§13.2, apps/review/tasks.py): the largest artifact it parses as
# JSON for a schema or check (its content is held in memory).
MW_REVIEW_MAX_JSON_BYTES = envint("MW_REVIEW_MAX_JSON_BYTES", 16 * 1024 * 1024)
# The dashboard's artifact reader (apps/dashboard/reader.py, docs/architecture.md "The
# artifact reader"). Text, Markdown and source are shown a page of about this many bytes
# at a time (at least 1 KiB), never read whole.
MW_READER_PAGE_BYTES = max(1024, envint("MW_READER_PAGE_BYTES", 64 * 1024))
# CSV and TSV: the first this many data rows as a table; the rows after them are counted.
MW_READER_CSV_ROWS = max(1, envint("MW_READER_CSV_ROWS", 200))
# JSON up to this size is shown as a collapsible tree (parsed in memory); larger, as text.
MW_READER_JSON_MAX_BYTES = envint("MW_READER_JSON_MAX_BYTES", 1024 * 1024)
# Two submissions of a WorkItem are compared on their first this many bytes.
MW_READER_DIFF_BYTES = envint("MW_READER_DIFF_BYTES", 256 * 1024)
# "filesystem" (content-addressed files under MW_BLOB_ROOT) or "s3" (any S3-compatible
# service through django-storages; MW_S3_* below). Uploads are spooled and verified in
# MW_BLOB_ROOT/incoming either way.
MW_BLOB_STORAGE = envstr("MW_BLOB_STORAGE", "filesystem")
MW_BLOB_ROOT = Path(envstr("MW_BLOB_ROOT", str(MW_DATA_DIR / "blobs")))
MW_S3_BUCKET = envstr("MW_S3_BUCKET", "")
MW_S3_ENDPOINT_URL = envstr("MW_S3_ENDPOINT_URL", "") or None  # e.g. a MinIO URL
MW_S3_REGION = envstr("MW_S3_REGION", "") or None
MW_S3_ACCESS_KEY_ID = envstr("MW_S3_ACCESS_KEY_ID", "") or None
MW_S3_SECRET_ACCESS_KEY = envstr("MW_S3_SECRET_ACCESS_KEY", "") or None
MW_S3_PREFIX = envstr("MW_S3_PREFIX", "blobs")

# --- Limits (mission_weave/runtime/rate_limits.py; docs/operations.md "Limits") -------------
# Rates in the `limits` notation ("600/second", "10/minute"), counted in Redis when there is
# one (shared by every process); 0 turns one off. Over one: 429 RATE_LIMITED.
# Commands (POST .../commands, WebSocket COMMAND frames, the API's other writes) per principal.
MW_RATE_COMMANDS_PER_PRINCIPAL = envstr("MW_RATE_COMMANDS_PER_PRINCIPAL", "600/second")
# The same per client IP (all principals behind it), checked before anything is read.
MW_RATE_COMMANDS_PER_IP = envstr("MW_RATE_COMMANDS_PER_IP", "3000/second")
# Reads (GET under /api/v1/) per principal.
MW_RATE_READS_PER_PRINCIPAL = envstr("MW_RATE_READS_PER_PRINCIPAL", "600/second")
# Reads per client IP.
MW_RATE_READS_PER_IP = envstr("MW_RATE_READS_PER_IP", "3000/second")
# Session openings (POST /api/v1/sessions) per agent, counted once its signature passed.
MW_RATE_SESSIONS_PER_PRINCIPAL = envstr("MW_RATE_SESSIONS_PER_PRINCIPAL", "60/minute")
# Session openings per client IP, signed or not.
MW_RATE_SESSIONS_PER_IP = envstr("MW_RATE_SESSIONS_PER_IP", "100/second")
# Sign-in attempts (the dashboard's and the admin's login form) per username typed.
MW_RATE_LOGIN_PER_PRINCIPAL = envstr("MW_RATE_LOGIN_PER_PRINCIPAL", "10/minute")
# Sign-in attempts per client IP.
MW_RATE_LOGIN_PER_IP = envstr("MW_RATE_LOGIN_PER_IP", "60/minute")
# WebSocket frames per connection (in its process); over it ERROR RATE_LIMITED, and a
# connection that keeps sending at twice the rate is closed (1008).
MW_WS_FRAME_RATE = envstr("MW_WS_FRAME_RATE", "200/second")
# Most Groups one WebSocket connection may subscribe to (PAYLOAD_TOO_LARGE beyond).
MW_WS_MAX_SUBSCRIPTIONS = envint("MW_WS_MAX_SUBSCRIPTIONS", 100)
# JSON bodies and frames nested deeper than this are refused (VALIDATION_ERROR); command
# envelopes never deeper than the canonical form's 64 (sdk/src/mission_weave/protocol/canonical.py).
MW_MAX_JSON_DEPTH = envint("MW_MAX_JSON_DEPTH", 64)
# Most rows a list read answers (work-items, missions, an audit's refused commands).
MW_LIST_MAX = envint("MW_LIST_MAX", 1000)
# HTTP connections (daphne, patched in mission_weave/runtime/http_handler.py); 0 turns one off. Idle
# keep-alive connections are closed after this many seconds.
MW_HTTP_IDLE_TIMEOUT_SECONDS = envint("MW_HTTP_IDLE_TIMEOUT_SECONDS", 60)
# A request line and headers must arrive within this many seconds of their first byte.
MW_HTTP_HEADER_TIMEOUT_SECONDS = envint("MW_HTTP_HEADER_TIMEOUT_SECONDS", 20)
# A body has this many seconds, plus one more per MW_HTTP_BODY_MIN_RATE bytes received.
MW_HTTP_BODY_TIMEOUT_SECONDS = envint("MW_HTTP_BODY_TIMEOUT_SECONDS", 30)
# Bytes per second a slow body must keep up to earn more time (slow-loris bodies).
MW_HTTP_BODY_MIN_RATE = envint("MW_HTTP_BODY_MIN_RATE", 1024)
# WebSockets (daphne options that mission_weave/runtime/serve.py sets): a ping after this many
# seconds without a frame from the client,
MW_WS_PING_INTERVAL_SECONDS = envint("MW_WS_PING_INTERVAL_SECONDS", 20)
# and the connection closed when its pong has not come this many seconds later.
MW_WS_PING_TIMEOUT_SECONDS = envint("MW_WS_PING_TIMEOUT_SECONDS", 30)
for _name in [n for n in dir() if n.startswith("MW_RATE_")] + ["MW_WS_FRAME_RATE"]:
    if not re.match(r"^\s*(0|\d+\s*(/|per)\s*(\d+\s*)?(second|minute|hour|day)s?)?\s*$",
                    globals()[_name], re.IGNORECASE):
        raise ImproperlyConfigured(f"{_name} must be a rate such as 600/second or 10/minute, "
                                   f"or 0 for none; got {globals()[_name]!r}")

# --- Logging --------------------------------------------------------------------------
# Request bodies are never logged. django.db.backends stays at INFO even when
# LOG_LEVEL=DEBUG, because its DEBUG records carry SQL parameters (command payloads).
LOG_LEVEL = envstr("LOG_LEVEL", "INFO").upper()
# "json": one JSON object per line (apps/operations/logs.py); "plain": text for a person at
# a terminal. Production defaults to json (settings_production.py).
MW_LOG_FORMAT = envstr("MW_LOG_FORMAT", "plain")
if MW_LOG_FORMAT not in ("json", "plain"):
    raise ImproperlyConfigured(f"MW_LOG_FORMAT must be json or plain, got {MW_LOG_FORMAT!r}")
# One line per HTTP request and per command decided (apps/operations). Off by default here
# (servers started with piped output, as the tests do, would fill their pipe); on in
# production (settings_production.py).
MW_REQUEST_LOG = envbool("MW_REQUEST_LOG", False)
LOGGING: dict[str, Any] = {  # logging.config.dictConfig's schema
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        "json": {"()": "apps.operations.logs.JsonFormatter"},
    },
    "filters": {
        "request_id": {"()": "apps.operations.logs.RequestIdFilter"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": MW_LOG_FORMAT,
                    "filters": ["request_id"]},
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "django.db.backends": {"level": "INFO"},
        # Through the root handler only (Django's default adds a second one under DEBUG).
        "django": {"handlers": [], "propagate": True},
        # A refused command (4xx) is the client's business, not an operator's; 5xx stay.
        "django.request": {"level": "ERROR"},
        "daphne": {"level": "WARNING"},
    },
}
