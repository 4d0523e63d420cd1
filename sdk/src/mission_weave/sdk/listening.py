"""What the bridges that listen (`mw-mcp` over HTTP, `mw-a2a-group`) check before they
bind: whoever reaches them acts as their Agent, so off loopback they require a bearer
token, taken from the environment only (never argv, never logged)."""

import ipaddress
import os


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bearer_token(variable: str, host: str) -> str | None:
    """The token in the environment's `variable`; ValueError, saying what to do, when
    there is none and `host` is not a loopback address."""
    token = os.environ.get(variable) or None
    if token is None and not loopback(host):
        raise ValueError(f"listening on {host} would let anyone who reaches it act as this "
                         f"Agent: set {variable} in the environment (clients then send "
                         "'Authorization: Bearer <it>'), or listen on 127.0.0.1")
    return token
