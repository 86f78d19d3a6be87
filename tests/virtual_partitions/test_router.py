from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import redis.asyncio as aioredis

from vpq.config.settings import RedisSettings
from vpq.isolation.context import IsolationContext
from vpq.metadata.events import EventListener
from vpq.metadata.map_cache import MapCache
from vpq.metadata.store import MetadataStore
from vpq.virtual_partitions.hashing import key_hash
from vpq.virtual_partitions.router import ProduceRouter, QueueNotPlacedError, UnknownQueueError

PLACEMENT = [0, 1, 2, 3, 3, 2, 1, 0]


@dataclass
class Env:
    md: MetadataStore
    router: ProduceRouter
    cache: MapCache
    probe: aioredis.Redis


@pytest.fixture
async def env(redis_url: str, key_prefix: str) -> AsyncIterator[Env]:
    md = MetadataStore(RedisSettings(key_prefix=key_prefix), url=redis_url)
    probe = aioredis.Redis.from_url(redis_url, decode_responses=True)
    await md.queues.create_or_update("orders", {"virtual_partitions": 8})
    await md.queues.create_or_update("unplaced", {"virtual_partitions": 2})
    await md.maps.publish({"epoch": 1, "queues": {"orders": {"virtual_partitions": 8, "placement": PLACEMENT}}}, 0)
    # no polling during the test: only pub/sub, which sends no commands
    listener = EventListener(md.client, md.keys, poll_interval_ms=600_000)
    cache = MapCache(md.queues, md.maps, listener)
    await listener.start()
    await cache.start()
    await cache.refresh(["orders", "unplaced"], sync=False)  # what a miss does (the router itself does no I/O)
    try:
        yield Env(md, ProduceRouter(cache, md.contexts), cache, probe)
    finally:
        await cache.stop()
        await listener.stop()
        await probe.aclose()
        await md.stop()


async def _calls(probe: aioredis.Redis, command: str | None = None) -> int:
    """Commands the server has executed (including those run inside scripts), not
    counting INFO itself; or the calls of one ``command`` only."""
    stats = await probe.info("commandstats")
    if command is not None:
        return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))
    return sum(v["calls"] for k, v in stats.items() if k != "cmdstat_info")


async def test_hot_path_makes_zero_round_trips(env: Env) -> None:
    ctxs = [IsolationContext("prod", "", ""), IsolationContext("test", "eu-1", "feat-a"), ("prod", "", "lane-b")]
    for c in ctxs:  # first sight of each context: interned once
        await env.router.route("orders", b"warm", c)
    before = await _calls(env.probe)
    routes = [await env.router.route("orders", f"key-{i}".encode(), ctxs[i % 3]) for i in range(1000)]
    after = await _calls(env.probe)
    print(f"\nrouter hot path: 1000 routes, Redis calls before={before} after={after} (delta {after - before})")
    assert after == before
    assert len({r.ctx_id for r in routes}) == 3


async def test_new_context_costs_one_round_trip_once(env: Env) -> None:
    await env.router.route("orders", b"k", ("prod", "", ""))
    before, scripts_before = await _calls(env.probe), await _calls(env.probe, "evalsha")
    first = await env.router.route("orders", b"k", ("prod", "", "new-lane"))
    mid, scripts_mid = await _calls(env.probe), await _calls(env.probe, "evalsha")
    again = await env.router.route("orders", b"k", ("prod", "", "new-lane"))
    after = await _calls(env.probe)
    assert scripts_mid - scripts_before == 1  # one script call: the interning round trip
    assert mid > before and after == mid
    assert first.ctx_id == again.ctx_id
    assert await env.md.contexts.resolve(first.ctx_id) == ("prod", "", "new-lane")


async def test_routes_follow_hash_and_placement(env: Env) -> None:
    rec = env.cache.queue("orders")
    assert rec is not None
    for i in range(200):
        key = f"order-{i}".encode()
        r = await env.router.route("orders", key, ("prod", "", ""))
        assert r.key_hash == key_hash(key)
        assert r.vp == key_hash(key) % 8
        assert r.pp == PLACEMENT[r.vp]
        assert r.queue_id == rec.id and r.epoch == 1
    assert (await env.router.route("orders", "order-1", ("", "", ""))).vp == key_hash(b"order-1") % 8


async def test_keyless_messages_spread_over_every_vp(env: Env) -> None:
    routes = await env.router.route_many("orders", [(None, ("prod", "", ""))] * 16)
    vps = [r.vp for r in routes]
    assert sorted(vps) == sorted(list(range(8)) * 2)
    assert all(r.pp == PLACEMENT[r.vp] for r in routes)


async def test_unknown_and_unplaced_queues(env: Env) -> None:
    with pytest.raises(UnknownQueueError):
        await env.router.route("nope", b"k", ("prod", "", ""))
    with pytest.raises(QueueNotPlacedError):
        await env.router.route("unplaced", b"k", ("prod", "", ""))
    with pytest.raises(ValueError):
        await env.router.route("orders", b"k", ("PROD", "", ""))


async def test_router_sees_a_new_epoch(env: Env) -> None:
    moved = [3] * 8
    assert await env.md.maps.publish(
        {"epoch": 2, "queues": {"orders": {"virtual_partitions": 8, "placement": moved}}}, 1
    )
    await env.cache.refresh_map()  # what a producer does after a write node answers stale_map
    r = await env.router.route("orders", b"k", ("prod", "", ""))
    assert r.pp == 3 and r.epoch == 2
