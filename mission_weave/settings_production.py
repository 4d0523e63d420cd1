"""Production settings: the env-driven base plus the hardening `check --deploy` asks for.

Run behind a TLS-terminating proxy that sets X-Forwarded-Proto.
"""

import base64
import binascii

from django.core.exceptions import ImproperlyConfigured

from .settings import *  # noqa: F401,F403
from .settings import envbool, envstr

DEBUG = False

SECRET_KEY = envstr("SECRET_KEY")
if not SECRET_KEY:
    raise ImproperlyConfigured("SECRET_KEY must be set in production")

MW_AUTHORITY_KEY = envstr("MW_AUTHORITY_KEY")
if not MW_AUTHORITY_KEY:
    raise ImproperlyConfigured(
        "MW_AUTHORITY_KEY (base64url Ed25519 seed, 32 bytes) must be set in production"
    )
try:
    _seed = base64.urlsafe_b64decode(MW_AUTHORITY_KEY + "=" * (-len(MW_AUTHORITY_KEY) % 4))
except (binascii.Error, ValueError):
    _seed = b""
if len(_seed) != 32:
    raise ImproperlyConfigured("MW_AUTHORITY_KEY must be a base64url-encoded 32-byte seed")
del _seed

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

if MW_FAULT_POINT:  # noqa: F405 - a fault test's switch, never a production one
    raise ImproperlyConfigured("MW_FAULT_POINT is for `make test-faults` only")
