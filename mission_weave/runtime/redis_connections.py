"""Where every part of the server that talks to Redis connects: the one Redis at
REDIS_URL, or, when REDIS_SENTINELS is set, whichever Redis its sentinels name as the
primary of REDIS_SENTINEL_MASTER now (docs/operations.md, "Redis with failover
(Sentinel)").

The hub's subscription, the publisher, the rate limits, readiness and the metrics get
their clients here, and Django's cache its pool (SentinelCachePool); the channel layer
and Celery take settings.py's Sentinel settings directly. Through Sentinel each new
connection first asks the sentinels where the primary is (redis-py's
SentinelConnectionPool): after a failover the old primary's connections fail (it died)
or are closed by the sentinels (it became a replica), and the next one reaches the new
primary. Every user already survives a lost connection: Redis is a hint, PostgreSQL the
record. The passwords come from the settings (the environment), never from a URL here,
and are never logged.
"""

import redis
from django.conf import settings
from redis.credentials import UsernamePasswordCredentialProvider
from redis.sentinel import Sentinel, SentinelConnectionPool

SENTINEL_TIMEOUT = 1.0  # seconds to reach a sentinel and for its answer, at most


def configured() -> bool:
    """Is there a Redis at all? Without one, the embedded stand-ins serve (one process)."""
    return bool(settings.REDIS_URL or settings.REDIS_SENTINELS)


def location() -> str:
    """Which Redis the settings name, as a key for what is built per Redis (REDIS_URL may
    hold a password: never log this)."""
    if settings.REDIS_SENTINELS:
        return f"sentinel://{_sentinels_and_master()}"
    return settings.REDIS_URL


def client(url: str | None = None, **options) -> redis.Redis:
    """A client of the Redis at `url`, or by default of the settings' Redis (through
    the sentinels when REDIS_SENTINELS is set). `options`: redis-py's (timeouts, a name)."""
    if url is None and settings.REDIS_SENTINELS:
        return _sentinels(Sentinel, options).master_for(settings.REDIS_SENTINEL_MASTER,
                                                        **options)
    return redis.Redis.from_url(url or settings.REDIS_URL, **options)


def async_client(**options):
    """The asyncio client of the settings' Redis (redis.asyncio.Redis)."""
    import redis.asyncio
    import redis.asyncio.sentinel

    if settings.REDIS_SENTINELS:
        return _sentinels(redis.asyncio.sentinel.Sentinel, options).master_for(
            settings.REDIS_SENTINEL_MASTER, **options)
    return redis.asyncio.from_url(settings.REDIS_URL, **options)


def rate_limit_storage(**options):
    """The `limits` library's storage in the settings' Redis: its RedisSentinelStorage
    through the sentinels (the primary only: a replica's counts may lag)."""
    from limits.storage import RedisSentinelStorage, RedisStorage

    if settings.REDIS_SENTINELS:
        return RedisSentinelStorage(
            f"redis+sentinel://{_sentinels_and_master()}", use_replicas=False,
            sentinel_kwargs=sentinel_kwargs(options), **credentials(settings.REDIS_PASSWORD),
            **options)
    return RedisStorage(settings.REDIS_URL, **options)


def credentials(password: str | None) -> dict:
    """A password as redis-py's connection options: a credential provider, never
    `password=`, as redis-py writes a client's options into some of its errors (a
    MasterNotFoundError names every sentinel it tried), and errors are logged."""
    if not password:
        return {}
    return {"credential_provider": UsernamePasswordCredentialProvider(password=password)}


def sentinel_kwargs(options: dict) -> dict:
    """How to talk to a sentinel: its password, and timeouts no longer than the client's
    own (so a readiness probe stays short), at most SENTINEL_TIMEOUT."""
    return {**credentials(settings.REDIS_SENTINEL_PASSWORD),
            **{name: min(options.get(name) or SENTINEL_TIMEOUT, SENTINEL_TIMEOUT)
               for name in ("socket_timeout", "socket_connect_timeout")}}


def _sentinels_and_master() -> str:
    sentinels = ",".join(f"{host}:{port}" for host, port in settings.REDIS_SENTINELS)
    return f"{sentinels}/{settings.REDIS_SENTINEL_MASTER}"


def _sentinels(kind, options: dict):
    return kind(settings.REDIS_SENTINELS, sentinel_kwargs=sentinel_kwargs(options),
                **credentials(settings.REDIS_PASSWORD))


class SentinelCachePool(SentinelConnectionPool):
    """Django's RedisCache through the sentinels. Django builds its pool with
    `pool_class.from_url(LOCATION, **OPTIONS)`: LOCATION is here the primary's name
    (settings.py), and the pool finds that primary at each new connection."""

    @classmethod
    def from_url(cls, url: str, **options):
        return cls(url, _sentinels(Sentinel, options), **credentials(settings.REDIS_PASSWORD),
                   **options)
