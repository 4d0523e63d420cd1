"""Where a webhook may POST: http(s) URLs only, and, unless the operator allows it, no
address inside the server's own networks.

A Group's coordinator chooses the URL, and the server makes the request: without this
check a webhook could reach what only the server can (its database's host, a cloud
metadata endpoint at 169.254.169.254, an admin port on localhost), a server-side request
forgery. The check runs when the webhook is saved and again at every send, on the
addresses the name resolves to then (DNS may have changed since), and the send connects
to the address that was checked, not to a second lookup's answer."""

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

from mission_weave.protocol.errors import ProtocolError

MAX_URL = 2000


@dataclass(frozen=True)
class Target:
    """A checked URL: connect to `address`, name the host `host` (Host header, TLS)."""

    scheme: str
    host: str
    port: int
    address: str


class Unresolved(ProtocolError):
    """The host name has no address (now)."""


def allow_private() -> bool:
    """MW_WEBHOOK_ALLOW_PRIVATE, or, unset, DEBUG (so never under the production
    settings, which turn DEBUG off)."""
    chosen = settings.MW_WEBHOOK_ALLOW_PRIVATE
    return settings.DEBUG if chosen is None else chosen


def invalid(message: str) -> ProtocolError:
    return ProtocolError("VALIDATION_ERROR", message)


def check_url(url: str) -> str:
    """The URL if it is one a webhook may have (its shape only; resolve() at send time
    checks where it leads); VALIDATION_ERROR otherwise."""
    url = (url or "").strip()
    if not url:
        raise invalid("a webhook needs a URL")
    if len(url) > MAX_URL:
        raise invalid(f"the URL is longer than {MAX_URL} characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise invalid(f"the URL cannot be read: {error}") from None
    if parts.scheme not in ("http", "https"):
        raise invalid("a webhook's URL must begin with http:// or https://")
    if not parts.hostname:
        raise invalid("the URL names no host")
    if parts.username or parts.password:
        raise invalid("the URL may not carry a user name or password; the signature "
                      "authenticates the server to the receiver")
    if any(ord(c) < 33 for c in url):
        raise invalid("the URL may not contain spaces or control characters")
    if port == 0:
        raise invalid("the URL's port cannot be 0")
    literal = _literal(parts.hostname)
    if literal is not None and not allow_private() and _private(literal):
        raise invalid(f"{parts.hostname} is a private, loopback or link-local address: "
                      f"webhooks may not point inside the server's networks "
                      f"(MW_WEBHOOK_ALLOW_PRIVATE)")
    return url


def check_destination(url: str) -> None:
    """At save time: a name that resolves inside the server's networks now is refused at
    once (VALIDATION_ERROR), rather than at every send. One that does not resolve yet is
    let through; the send checks again either way."""
    try:
        resolve(url)
    except Unresolved:
        pass


def resolve(url: str) -> Target:
    """Where to send now: the first address the host resolves to, each of them checked
    (one private address refuses the URL, so that a name cannot mix a public address
    with an internal one). Raises ProtocolError (VALIDATION_ERROR) if refused or
    unresolvable."""
    parts = urlsplit(url)
    scheme, host = parts.scheme, parts.hostname or ""
    port = parts.port or (443 if scheme == "https" else 80)
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as error:
        raise Unresolved("VALIDATION_ERROR", f"cannot resolve {host}: {error}") from None
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in found]
    if not addresses:
        raise Unresolved("VALIDATION_ERROR", f"{host} resolves to no address")
    if not allow_private():
        refused = [str(a) for a in addresses if _private(a)]
        if refused:
            raise invalid(f"{host} resolves to {', '.join(refused)}: a private, loopback or "
                          f"link-local address (MW_WEBHOOK_ALLOW_PRIVATE)")
    return Target(scheme, host, port, str(addresses[0]))


def _literal(host: str):
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _private(address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    return not address.is_global or address.is_multicast
