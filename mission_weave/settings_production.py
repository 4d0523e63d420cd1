"""Production settings: the env-driven base plus the hardening `check --deploy` asks for.

Run behind a TLS-terminating proxy that sets X-Forwarded-Proto.
"""

from django.core.exceptions import ImproperlyConfigured

from apps.ledger import signing_keys

from .settings import *  # noqa: F403
from .settings import (
    INSTALLED_APPS,
    MW_AUTHORITY_KEY_ID,
    MW_AUTHORITY_RETIRED_KEYS,
    envbool,
    envstr,
)

DEBUG = False

# The benchmarks (manage.py mw_bench) are a development tool, left out of the image too.
INSTALLED_APPS = [app for app in INSTALLED_APPS if app != "apps.bench"]

SECRET_KEY = envstr("SECRET_KEY")
if not SECRET_KEY:
    raise ImproperlyConfigured("SECRET_KEY must be set in production")

MW_AUTHORITY_KEY = envstr("MW_AUTHORITY_KEY")
if not MW_AUTHORITY_KEY:
    raise ImproperlyConfigured(
        "MW_AUTHORITY_KEY (base64url Ed25519 seed, 32 bytes) must be set in production"
    )
try:  # the seed, its id and the retired keys, checked together (docs: "Key rotation")
    signing_keys.from_environment(MW_AUTHORITY_KEY,
                                  MW_AUTHORITY_KEY_ID or signing_keys.FIRST_KEY_ID,
                                  MW_AUTHORITY_RETIRED_KEYS)
except ValueError as error:
    raise ImproperlyConfigured(str(error)) from None

SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", True)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_HSTS_SECONDS = 31_536_000
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
SECURE_CONTENT_TYPE_NOSNIFF = True
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
X_FRAME_OPTIONS = "DENY"

# Off unless asked for: a proxy or CDN serving STATIC_ROOT is the better choice, but the
# shipped compose and k8s files set MW_SERVE_STATIC=true so the image works on its own.
MW_SERVE_STATIC = envbool("MW_SERVE_STATIC", False)

# Logs for a collector: JSON lines, one per request and per command (docs/operations.md).
MW_LOG_FORMAT = envstr("MW_LOG_FORMAT", "json")  # checked by settings.py
LOGGING["handlers"]["console"]["formatter"] = MW_LOG_FORMAT  # noqa: F405
MW_REQUEST_LOG = envbool("MW_REQUEST_LOG", True)

if MW_FAULT_POINT:  # noqa: F405 - a fault test's switch, never a production one
    raise ImproperlyConfigured("MW_FAULT_POINT is for `make test-faults` only")
