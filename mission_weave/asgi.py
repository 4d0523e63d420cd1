"""ASGI entry point: HTTP through Django (run WSGI-style, see
mission_weave/runtime/http_handler.py), WebSockets through Channels.

Serve with `python -m mission_weave.runtime.serve` (several daphne processes) or
`daphne mission_weave.asgi:application`.
"""

import asyncio
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mission_weave.settings")

import django

# Set Django up before anything below imports models.
django.setup(set_prefix=False)

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402

from apps.delivery.origin import AgentFriendlyOriginValidator  # noqa: E402
from apps.ledger import publish  # noqa: E402
from mission_weave.routing import websocket_urlpatterns  # noqa: E402
from mission_weave.runtime.http_handler import PooledSyncASGIHandler  # noqa: E402

http_app = PooledSyncASGIHandler()
if settings.MW_SERVE_STATIC:
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

    http_app = ASGIStaticFilesHandler(http_app)

if settings.MW_SWEEP_IN_PROCESS:
    # No Celery beat without Redis: this process sweeps deadlines itself.
    import logging

    from apps.work import sweeper

    logging.getLogger("mission_weave").warning(
        "REDIS_URL is not set: no Celery beat, so this web process runs the sweeper "
        "itself (MW_SWEEP_IN_PROCESS=0 turns it off)")
    sweeper.start_in_process()

router = ProtocolTypeRouter(
    {
        "http": http_app,
        "websocket": AgentFriendlyOriginValidator(URLRouter(websocket_urlpatterns)),
    }
)


async def application(scope, receive, send):
    # Committed events are pushed on this loop without blocking the request thread.
    publish.remember_server_loop(asyncio.get_running_loop())
    return await router(scope, receive, send)
