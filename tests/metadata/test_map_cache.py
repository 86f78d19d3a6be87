from __future__ import annotations

import asyncio

from vpq.metadata.map_cache import MapCache, QueueEntry
from vpq.metadata.store import MetadataStore


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


async def test_record_refreshes_coalesce_into_few_reads(md: MetadataStore) -> None:
    listener = md.event_listener()
    cache = MapCache(md.queues, md.maps, listener)
    await cache.start()  # (listener not started: only explicit refreshes here)
    try:
        names = [f"q{i}" for i in range(50)]
        for n in names:
            await md.queues.create_or_update(n)
        reads: list[list[str]] = []
        real = md.queues.get_many

        async def counting(batch):
            reads.append(list(batch))
            return await real(batch)

        md.queues.get_many = counting  # type: ignore[method-assign]
        await asyncio.gather(*(cache.refresh_queues([n]) for n in names))
        assert len(reads) == 2 and sorted(sum(reads, [])) == sorted(names)  # the first one, then all the rest
        assert [q.name for q in cache.queues()] == sorted(names)
        assert cache.entry("q7") is not None and cache.entry("q7").placement is None
        # a failed read leaves its names wanted: the callers that were coalesced into it retry
        await md.queues.delete("q7")

        async def failing(batch):
            md.queues.get_many = counting  # type: ignore[method-assign]
            raise ConnectionError("redis away")

        md.queues.get_many = failing  # type: ignore[method-assign]
        results = await asyncio.gather(*(cache.refresh_queues(["q7"]) for _ in range(3)), return_exceptions=True)
        assert sum(isinstance(r, ConnectionError) for r in results) == 1
        assert cache.queue("q7") is None and cache.entry("q7") is None
    finally:
        await cache.stop()


async def test_after_change_takes_the_published_map_without_reading_it(md: MetadataStore) -> None:
    listener = md.event_listener()
    cache = MapCache(md.queues, md.maps, listener)
    await cache.start()
    try:
        rec, _ = await md.queues.create_or_update("a", {"virtual_partitions": 2})
        m = {"epoch": 3, "queues": {"a": {"virtual_partitions": 2, "placement": [1, 0]}}}

        async def no_map_reads():
            raise AssertionError("the map must not be read")

        md.maps.current = no_map_reads  # type: ignore[method-assign]
        await cache.after_change("a", m)
        assert cache.epoch == 3 and cache.entry("a") == QueueEntry(rec, 3, 2, (1, 0))
        assert cache.queue_by_id(rec.id) == rec
        await cache.after_change("a", {"epoch": 2, "queues": {}})  # an older map is ignored
        assert cache.epoch == 3 and cache.entry("a").placement == (1, 0)
        await md.queues.delete("a")
        await cache.after_change("a", {"epoch": 4, "queues": {}})
        assert cache.entry("a") is None and cache.queue_by_id(rec.id) is None and cache.epoch == 4
    finally:
        await cache.stop()
