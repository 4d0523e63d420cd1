"""WebSocket URL routes, mounted by mission_weave.asgi."""

# The delivery consumer is mounted at /ws/v1/ later (apps.delivery).
websocket_urlpatterns = []
