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

URLs: anything redis-py's ``from_url`` takes, or ``redis+sentinel://h1:p1,h2:p2/name``
(``config.redis_url``): then the client asks the Sentinels for the master of ``name``
before each new connection, with the same options (blocking pool, timeouts, retries,
error mapping). A failover looks like a few seconds of ``MetadataUnavailable`` (the
dead master refuses connections until the Sentinels promote a replica; a demoted master
answers READONLY, which drops the connection), then commands reach the new master.
Pub/sub connections come from the same pool, so a resubscribing listener
(``metadata.events``) follows the master too.

Every client carries a ``replica_waiter`` (``metadata.durability``): writes that must not
be lost wait for a replica's acknowledgement when the master has one.

The caller owns the client and must ``await client.aclose()`` (which also closes the
connections to the Sentinels).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.backoff import ExponentialBackoff
from redis.exceptions import BusyLoadingError, ConnectionError, NoScriptError, RedisError, TimeoutError, WatchError

from vpq.config.redis_url import is_sentinel_url, parse_sentinel_url
from vpq.config.settings import RedisClientSettings, RedisSettings
from vpq.metadata.durability import ReplicaWaiter
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

    replica_waiter: ReplicaWaiter | None = None
    _sentinel: Sentinel | None = None

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        try:
            await super().aclose(close_connection_pool)
        finally:
            sentinel, self._sentinel = self._sentinel, None
            if sentinel is not None:
                await sentinel.aclose()

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        try:
            return await super().execute_command(*args, **options)
        except _PASS_THROUGH:
            raise
        except RedisError as exc:
            if isinstance(exc, (ConnectionError, TimeoutError)) and self.replica_waiter is not None:
                self.replica_waiter.forget()  # the master may be another one next time
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
    replica_wait_ms: int = 1000
    replica_check_s: float = 5.0

    @classmethod
    def from_settings(cls, section: RedisClientSettings) -> ClientOptions:
        """The options of the ``[redis.client]`` settings section (same field names)."""
        return cls(**section.model_dump())


class _BlockingSentinelPool(SentinelConnectionPool, aioredis.BlockingConnectionPool):
    """A Sentinel-managed pool that waits for a free connection like the plain one."""


def create_client(url: str, options: ClientOptions | None = None, client_name: str | None = None) -> MetadataClient:
    """A new client for ``url`` (no I/O happens until the first command); closing the
    client closes its pool. ValueError on a malformed ``redis+sentinel://`` URL."""
    o = options or ClientOptions()
    retry = Retry(ExponentialBackoff(cap=o.backoff_cap, base=o.backoff_base), o.retries)
    common: dict[str, Any] = dict(
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
    sentinel = None
    if is_sentinel_url(url):
        parts = parse_sentinel_url(url)
        sentinel_kwargs: dict[str, Any] = dict(
            socket_timeout=o.socket_timeout, socket_connect_timeout=o.connect_timeout, decode_responses=True
        )
        if parts.sentinel_password is not None:
            sentinel_kwargs.update(username=parts.sentinel_username, password=parts.sentinel_password)
        sentinel = Sentinel(list(parts.sentinels), sentinel_kwargs=sentinel_kwargs)
        client = sentinel.master_for(
            parts.master_name, redis_class=MetadataClient, connection_pool_class=_BlockingSentinelPool,
            db=parts.db, username=parts.username, password=parts.password, **common,
        )
    else:
        client = MetadataClient.from_pool(aioredis.BlockingConnectionPool.from_url(url, **common))
    client._sentinel = sentinel
    client.replica_waiter = ReplicaWaiter(o.replica_wait_ms, o.replica_check_s)
    return client


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
