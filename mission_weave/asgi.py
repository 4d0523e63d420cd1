"""ASGI entry point: HTTP through Django, WebSockets through Channels.

Serve with `daphne mission_weave.asgi:application`.
"""

import asyncio
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mission_weave.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

# Set Django up before anything below imports models.
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402

from mission_weave.routing import websocket_urlpatterns  # noqa: E402

if settings.MW_SERVE_STATIC:
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

    django_asgi_app = ASGIStaticFilesHandler(django_asgi_app)

from apps.ledger import publish  # noqa: E402

router = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(URLRouter(websocket_urlpatterns)),
    }
)


async def application(scope, receive, send):
    # Committed events are pushed on this loop without blocking the request thread.
    publish.remember_server_loop(asyncio.get_running_loop())
    return await router(scope, receive, send)
