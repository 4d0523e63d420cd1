"""Origin checking for `/ws/v1/` that lets agents in.

Channels' AllowedHostsOriginValidator refuses a handshake without an Origin header,
which is every non-browser agent. A browser always sends Origin, so a cross-site page
riding on a human's session cookie is still refused; a missing Origin can only come
from a non-browser client, which must bring a bearer token (the consumer refuses the
handshake otherwise)."""

from channels.security.websocket import AllowedHostsOriginValidator


class AgentFriendlyOriginValidator:
    def __init__(self, application):
        self.application = application
        self.browser_checked = AllowedHostsOriginValidator(application)

    async def __call__(self, scope, receive, send):
        if any(name == b"origin" for name, _ in scope.get("headers", ())):
            return await self.browser_checked(scope, receive, send)
        return await self.application(scope, receive, send)
