"""Who may read GET /metrics: a request bearing MW_METRICS_TOKEN, or one that came
straight (no X-Forwarded-For) from a network in MW_METRICS_ALLOW.

A request that passed through a proxy is judged by its token alone: with daphne's
--proxy-headers, REMOTE_ADDR is the first X-Forwarded-For entry, which the client writes."""

import hmac
import ipaddress
from functools import lru_cache

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


@lru_cache(maxsize=8)
def networks(allow: tuple) -> tuple:
    if allow == ("none",):
        return ()
    try:
        return tuple(ipaddress.ip_network(item, strict=False) for item in allow)
    except ValueError as error:
        raise ImproperlyConfigured(f"MW_METRICS_ALLOW: {error}") from None


def allowed(request) -> bool:
    token = settings.MW_METRICS_TOKEN
    header = request.META.get("HTTP_AUTHORIZATION", "")
    if token and header.startswith("Bearer ") and hmac.compare_digest(
            header[len("Bearer "):].strip().encode(), token.encode()):
        return True
    if "HTTP_X_FORWARDED_FOR" in request.META:
        return False
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    if address.version == 6 and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # ::ffff:127.0.0.1 from a dual-stack socket
    return any(address in network for network in networks(tuple(settings.MW_METRICS_ALLOW)))
