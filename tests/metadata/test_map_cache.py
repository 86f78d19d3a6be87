from __future__ import annotations

import asyncio

from metadata.map_cache import MapCache
from metadata.store import MetadataStore


async def _eventually(pred, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not pred():
            await asyncio.sleep(0.01)


async def test_cache_follows_queue_and_map_changes(md: MetadataStore, make_store) -> None:
    writer = make_store()
    await md.queues.create_or_update("a", {"virtual_partitions": 2})
    await md.maps.publish({"epoch": 1, "queues": {"a": {"virtual_partitions": 2, "placement": [0, 1]}}}, 0)
    listener = md.event_listener()
    cache = MapCache(md.queues, md.maps, listener)
    await listener.start()
    await cache.start()
    try:
        entry = cache.entry("a")
        assert entry is not None and entry.placement == (0, 1) and entry.epoch == 1
        assert cache.queue_by_id(entry.record.id) == entry.record
        # a new queue shows up unplaced, then placed by the next epoch
        b, _ = await writer.queues.create_or_update("b", {"virtual_partitions": 1})
        await _eventually(lambda: cache.entry("b") is not None)
        assert cache.entry("b").placement is None
        await writer.maps.publish(
            {
                "epoch": 2,
                "queues": {"a": {"virtual_partitions": 2, "placement": [1, 1]}, "b": {"virtual_partitions": 1, "placement": [3]}},
            },
            1,
        )
        await _eventually(lambda: cache.epoch == 2)
        assert cache.entry("a").placement == (1, 1)
        assert cache.entry("b").placement == (3,)
        await writer.queues.create_or_update("a", {"max_deliveries": 9})
        await _eventually(lambda: cache.queue("a").config["max_deliveries"] == 9)
        await writer.queues.delete("b")
        await _eventually(lambda: cache.entry("b") is None)
        assert cache.queue_by_id(b.id) is None
        assert [q.name for q in cache.queues()] == ["a"]
    finally:
        await cache.stop()
        await listener.stop()


async def test_cache_resyncs_when_announcements_are_lost(md: MetadataStore) -> None:
    listener = md.event_listener()
    cache = MapCache(md.queues, md.maps, listener)
    await listener.start()
    await cache.start()
    try:
        assert cache.map is None and cache.epoch == 0
        # change the registry behind the cache's back, then make the gap unrecoverable
        await md.client.hset(
            md.keys.queues(),
            "ghost",
            '{"name":"ghost","id":77,"config":{"virtual_partitions":1,"ordering":"key","max_deliveries":5,'
            '"visibility_timeout_ms":1,"retention_ms":-1,"max_message_bytes":1},"created_ms":1,"updated_ms":1}',
        )
        await md.client.incrby(md.keys.events_version(), 10_000)
        await _eventually(lambda: cache.queue("ghost") is not None)
        assert cache.queue_by_id(77).name == "ghost"
    finally:
        await cache.stop()
        await listener.stop()
