"""The shared metadata client: bounded, blocking pool and retries on a real redis-server."""

from __future__ import annotations

import asyncio

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from vpq.metadata.connection import ClientOptions, create_client
from vpq.metadata.errors import MetadataUnavailable


async def test_bursts_beyond_the_pool_wait_for_a_connection(redis_url: str) -> None:
    """More concurrent commands than ``max_connections``: they queue, none fails."""
    client = create_client(redis_url, ClientOptions(max_connections=2, pool_timeout=10.0))
    try:
        script = "redis.call('SET', KEYS[1], ARGV[1]) return redis.call('GET', KEYS[1])"
        results = await asyncio.gather(*(client.eval(script, 1, f"pool-test-{i}", str(i)) for i in range(60)))
        assert results == [str(i) for i in range(60)]
        pool = client.connection_pool
        assert len(pool._available_connections) + len(pool._in_use_connections) <= 2
    finally:
        await client.aclose()


async def test_a_starved_pool_fails_after_pool_timeout(redis_url: str) -> None:
    """When every connection stays busy, the waiter gets MetadataUnavailable (which the
    API maps to 503 metadata_unavailable), not a hang."""
    client = create_client(redis_url, ClientOptions(max_connections=1, pool_timeout=0.2, socket_timeout=5.0))
    blocker = create_client(redis_url)
    try:
        busy = asyncio.ensure_future(client.blpop([f"pool-test-never-{id(client)}"], timeout=2))
        await asyncio.sleep(0.1)
        with pytest.raises(MetadataUnavailable) as info:
            await client.get("pool-test-x")
        assert isinstance(info.value.__cause__, RedisConnectionError)
        await blocker.lpush(f"pool-test-never-{id(client)}", "go")
        assert await busy is not None
        assert await client.get("pool-test-x") is None  # the connection came back
    finally:
        await client.aclose()
        await blocker.aclose()


async def test_client_options_reach_the_connections(redis_url: str) -> None:
    client = create_client(redis_url, ClientOptions(socket_timeout=3.0, retries=2), client_name="vpq-test")
    try:
        assert await client.client_getname() == "vpq-test"
        kwargs = client.connection_pool.connection_kwargs
        assert kwargs["socket_timeout"] == 3.0 and kwargs["decode_responses"] is True
        assert kwargs["retry"].get_retries() == 2
    finally:
        await client.aclose()


async def test_redis_failures_reach_callers_as_metadata_unavailable(redis_url: str) -> None:
    """Commands, scripts and pipelines alike; a script Redis forgot is reloaded, not an error."""
    dead = create_client("redis://127.0.0.1:1", ClientOptions(retries=0, connect_timeout=0.5))
    live = create_client(redis_url)
    try:
        with pytest.raises(MetadataUnavailable):
            await dead.get("x")
        with pytest.raises(MetadataUnavailable):
            async with dead.pipeline(transaction=True) as pipe:
                pipe.get("x")
                await pipe.execute()
        with pytest.raises(MetadataUnavailable):  # a command Redis refuses
            await live.eval("return redis.error_reply('nope')", 0)
        script = live.register_script("return 7")
        assert await script() == 7
        await live.script_flush()
        assert await script() == 7
        async with live.pipeline(transaction=False) as pipe:
            await script(client=pipe)
            assert await pipe.execute() == [7]
    finally:
        await dead.aclose()
        await live.aclose()
