"""The Redis client every metadata component shares.

Contract: clients are ``redis.asyncio.Redis`` with ``decode_responses=True``
(every value vpq keeps in Redis is text: JSON or decimal numbers), bounded
socket timeouts, and a few quick retries with exponential backoff on connection
errors and timeouts, so a Redis restart costs a short pause instead of an error.
The connection pool is bounded and *blocking*: when ``max_connections`` commands are
already in flight, the next one waits (up to ``pool_timeout`` seconds) for a free
connection instead of failing at once with "Too many connections" (a read node hosting
hundreds of groups runs their housekeeping in bursts). Every metadata script is written to be safe to retry (idempotent for the same
arguments), which is what makes the retry policy acceptable.

Errors: every redis-py exception a command (or a pipeline's ``execute``) raises
reaches the caller as ``metadata.errors.MetadataUnavailable`` (the redis-py one is its
``__cause__``), so code outside ``metadata/`` never handles redis-py types. Two stay
as they are because redis-py itself relies on them: ``NoScriptError`` (a script
reloads itself) and ``WatchError`` (optimistic transactions).

The caller owns the client and must ``await client.aclose()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import BusyLoadingError, ConnectionError, NoScriptError, RedisError, TimeoutError, WatchError

from vpq.config.settings import RedisClientSettings, RedisSettings
from vpq.metadata.errors import MetadataUnavailable

_PASS_THROUGH = (NoScriptError, WatchError)


def _unavailable(exc: RedisError) -> MetadataUnavailable:
    return MetadataUnavailable(f"{type(exc).__name__}: {exc}")


class _Pipeline(Pipeline):
    """A pipeline whose failures are ``MetadataUnavailable`` (see the module docstring)."""

    async def immediate_execute_command(self, *args: Any, **options: Any) -> Any:
        try:
            return await super().immediate_execute_command(*args, **options)
        except _PASS_THROUGH:
            raise
        except RedisError as exc:
            raise _unavailable(exc) from exc

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        try:
            return await super().execute(raise_on_error)
        except _PASS_THROUGH:
            raise
        except RedisError as exc:
            raise _unavailable(exc) from exc


class MetadataClient(aioredis.Redis):
    """``redis.asyncio.Redis`` whose failures are ``MetadataUnavailable`` (see the
    module docstring)."""

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        try:
            return await super().execute_command(*args, **options)
        except _PASS_THROUGH:
            raise
        except RedisError as exc:
            raise _unavailable(exc) from exc

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> _Pipeline:
        return _Pipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)


@dataclass(frozen=True, slots=True)
class ClientOptions:
    """Timeouts and retry policy of a metadata client (seconds)."""

    socket_timeout: float = 5.0
    connect_timeout: float = 2.0
    retries: int = 5
    backoff_base: float = 0.02
    backoff_cap: float = 0.5
    health_check_interval: int = 10
    max_connections: int = 100
    pool_timeout: float = 10.0

    @classmethod
    def from_settings(cls, section: RedisClientSettings) -> ClientOptions:
        """The options of the ``[redis.client]`` settings section (same field names)."""
        return cls(**section.model_dump())


def create_client(url: str, options: ClientOptions | None = None, client_name: str | None = None) -> MetadataClient:
    """A new client for ``url`` (no I/O happens until the first command); closing the
    client closes its pool."""
    o = options or ClientOptions()
    retry = Retry(ExponentialBackoff(cap=o.backoff_cap, base=o.backoff_base), o.retries)
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=o.max_connections,
        timeout=o.pool_timeout,
        decode_responses=True,
        socket_timeout=o.socket_timeout,
        socket_connect_timeout=o.connect_timeout,
        retry=retry,
        retry_on_error=[ConnectionError, TimeoutError, BusyLoadingError],
        health_check_interval=o.health_check_interval,
        client_name=client_name,
    )
    return MetadataClient.from_pool(pool)


def client_from_settings(
    settings: RedisSettings, url: str | None = None, options: ClientOptions | None = None
) -> MetadataClient:
    """A client for ``url`` or else ``settings.url``, with ``options`` or else those of
    ``settings.client``; ValueError when no URL is set (the embedded-Redis case
    resolves the URL before building metadata clients)."""
    target = url or settings.url
    if not target:
        raise ValueError("no Redis URL: start the embedded Redis first or set redis.url / VPQ_REDIS__URL")
    return create_client(target, options or ClientOptions.from_settings(settings.client))
