"""WebSocket URL routes, mounted by mission_weave.asgi."""

from channels.auth import AuthMiddlewareStack
from django.urls import path

from apps.dashboard.live import DashboardLiveConsumer
from apps.delivery.consumer import DeliveryConsumer

# AuthMiddlewareStack gives the consumer the logged-in human (session cookie); agents
# bring `Authorization: Bearer` on the handshake instead.
websocket_urlpatterns = [
    path("ws/v1/", AuthMiddlewareStack(DeliveryConsumer.as_asgi())),
    path("ws/dashboard/g/<str:group_id>/", AuthMiddlewareStack(DashboardLiveConsumer.as_asgi())),
]
