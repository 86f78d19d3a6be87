from __future__ import annotations

import asyncio

import pytest

from vpq.metadata.map_cache import MapCache, QueueEntry
from vpq.metadata.store import MetadataStore


async def _eventually(pred, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not pred():
            await asyncio.sleep(0.01)


def _placed(**queues: list[int]) -> dict:
    return {n: {"virtual_partitions": len(p), "placement": p} for n, p in queues.items()}


async def test_cache_loads_queues_on_first_use_and_follows_their_changes(md: MetadataStore, make_store) -> None:
    writer = make_store()
    await md.queues.create_or_update("a", {"virtual_partitions": 2})
    await md.maps.publish_changes(_placed(a=[0, 1]), 0)
    listener = md.event_listener()
    cache = MapCache(md.queues, md.maps, listener)
    await listener.start()
    await cache.start()
    try:
        assert cache.epoch == 1 and len(cache) == 0 and cache.entry("a") is None  # nothing held before use
        await cache.refresh(["a"], sync=False)
        entry = cache.entry("a")
        assert entry is not None and entry.placement == (0, 1) and entry.epoch == 1
        assert cache.queue_by_id(entry.record.id) == entry.record
        # a new queue is not loaded by anyone's announcements: idle queues cost nothing
        b, _ = await writer.queues.create_or_update("b", {"virtual_partitions": 1})
        await writer.maps.publish_changes(_placed(a=[1, 1], b=[3]), 1)
        await _eventually(lambda: cache.epoch == 2)
        assert cache.entry("a").placement == (1, 1) and cache.entry("a").epoch == 2
        assert cache.entry("b") is None and len(cache) == 1
        await cache.refresh(["b"], sync=False)
        assert cache.entry("b").placement == (3,)
        await writer.queues.create_or_update("a", {"max_deliveries": 9})
        await _eventually(lambda: cache.queue("a").config["max_deliveries"] == 9)
        await writer.queues.delete("b")
        await _eventually(lambda: cache.entry("b") is None)
        assert cache.queue_by_id(b.id) is None
        assert [q.name for q in cache.queues()] == ["a"]
        # unknown names and ids load nothing
        await cache.refresh(["nope"], [12345], sync=False)
        assert len(cache) == 1
    finally:
        await cache.stop()
        await listener.stop()


async def test_sync_reads_only_the_cached_queues_that_changed(md: MetadataStore) -> None:
    listener = md.event_listener()
    cache = MapCache(md.queues, md.maps, listener)
    for n in ("a", "b"):
        await md.queues.create_or_update(n)
    await md.maps.publish_changes(_placed(a=[0], b=[0]), 0)
    await cache.start()  # (listener not started: explicit refreshes only)
    try:
        await cache.refresh(["a"], sync=False)
        loads = cache.loads
        for epoch in range(1, 30):  # others' changes: the epoch follows, nothing is loaded
            await md.maps.publish_changes(_placed(**{f"x{epoch}": [1], "b": [epoch % 4]}), epoch)
        await cache.refresh_map()
        assert cache.epoch == 30 and cache.loads == loads and len(cache) == 1
        assert cache.entry("a").epoch == 30  # still right at the newer epoch: the delta says it did not change
        await md.maps.publish_changes(_placed(a=[2]), 30)
        await cache.refresh_map()
        assert cache.loads == loads + 1 and cache.entry("a").placement == (2,) and cache.epoch == 31
        await md.maps.publish_changes({"a": None}, 31)  # removed from the map: back to unplaced
        await cache.refresh_map()
        assert cache.entry("a").placement is None and cache.entry("a").epoch == 32
    finally:
        await cache.stop()


async def test_cache_resyncs_when_announcements_are_lost(md: MetadataStore) -> None:
    listener = md.event_listener()
    cache = MapCache(md.queues, md.maps, listener)
    await md.queues.create_or_update("a")
    await listener.start()
    await cache.start()
    try:
        await cache.refresh(["a"], sync=False)
        assert cache.epoch == 0 and cache.entry("a").placement is None
        # change the map behind the cache's back, then make the gap unrecoverable
        await md.client.hset(md.keys.map_queues(), "a", '{"placement":[5],"virtual_partitions":1}')
        await md.client.hset(md.keys.map(), "epoch", 9)
        await md.client.incrby(md.keys.events_version(), 10_000)
        await _eventually(lambda: cache.epoch == 9)
        assert cache.entry("a") is None  # dropped: read again on its next use
        await cache.refresh(["a"], sync=False)
        assert cache.entry("a").placement == (5,)
    finally:
        await cache.stop()
        await listener.stop()


async def test_concurrent_misses_coalesce_into_few_reads(md: MetadataStore) -> None:
    listener = md.event_listener()
    cache = MapCache(md.queues, md.maps, listener)
    await cache.start()
    try:
        names = [f"q{i}" for i in range(50)]
        for n in names:
            await md.queues.create_or_update(n)
        await asyncio.gather(*(cache.refresh([n], sync=False) for n in names))
        assert cache.loads <= 2  # the first one, then all the rest
        assert [q.name for q in cache.queues()] == sorted(names)
        # a failed read fails every caller it served; the next one reads again
        real = md.maps.load_queues

        async def failing(*a, **kw):
            md.maps.load_queues = real  # type: ignore[method-assign]
            raise ConnectionError("redis away")

        md.maps.load_queues = failing  # type: ignore[method-assign]
        results = await asyncio.gather(*(cache.refresh(["q7"], sync=False) for _ in range(3)), return_exceptions=True)
        assert all(isinstance(r, ConnectionError) for r in results)
        await md.queues.delete("q7")
        await cache.refresh(["q7"], sync=False)
        assert cache.queue("q7") is None and cache.entry("q7") is None
    finally:
        await cache.stop()


async def test_least_recently_used_queues_are_dropped_beyond_capacity(md: MetadataStore) -> None:
    listener = md.event_listener()
    cache = MapCache(md.queues, md.maps, listener, capacity=3)
    await cache.start()
    try:
        recs = [(await md.queues.create_or_update(f"q{i}"))[0] for i in range(5)]
        await cache.refresh(["q0", "q1", "q2"], sync=False)
        cache.entry("q0")  # used: q1 is now the least recent
        await cache.refresh(["q3"], sync=False)
        assert [q.name for q in cache.queues()] == ["q0", "q2", "q3"]
        assert cache.queue_by_id(recs[1].id) is None and cache.queue_by_id(recs[0].id) is not None
        await cache.refresh(["q4"], sync=False)
        assert len(cache) == 3 and cache.entry("q2") is None
        with pytest.raises(ValueError):
            MapCache(md.queues, md.maps, listener, capacity=0)
    finally:
        await cache.stop()


async def test_after_change_rereads_only_a_cached_queue(md: MetadataStore) -> None:
    listener = md.event_listener()
    cache = MapCache(md.queues, md.maps, listener)
    await cache.start()
    try:
        rec, _ = await md.queues.create_or_update("a", {"virtual_partitions": 2})
        await md.maps.publish_changes(_placed(a=[1, 0]), 0)
        await cache.after_change("a", {"epoch": 1, "queues": _placed(a=[1, 0])})
        assert len(cache) == 0 and cache.loads == 0  # not held: loaded when first used
        await cache.refresh(["a"], sync=False)
        assert cache.entry("a") == QueueEntry(rec, 1, 2, (1, 0))
        await md.maps.publish_changes(_placed(a=[1, 1]), 1)
        await cache.after_change("a", {"epoch": 2, "queues": _placed(a=[1, 1])})
        assert cache.entry("a").placement == (1, 1)
        await md.queues.delete("a")
        await cache.after_change("a")
        assert cache.entry("a") is None and cache.queue_by_id(rec.id) is None
    finally:
        await cache.stop()


async def test_no_cached_entry_is_older_than_the_cache_epoch_under_concurrent_changes(
    md: MetadataStore, make_store
) -> None:
    """The rule the write nodes' remap fencing relies on, while another process publishes:
    epoch E even moves queue a to pp E, odd epochs change only b, so the entry of a held at
    cache epoch C must come from the last even epoch at or before C, or later."""
    writer = make_store()
    await md.queues.create_or_update("a")
    listener = md.event_listener()
    cache = MapCache(md.queues, md.maps, listener)
    await listener.start()
    await cache.start()
    done = asyncio.Event()

    async def publish() -> None:
        for epoch in range(1, 301):
            name = "a" if epoch % 2 == 0 else "b"
            await writer.maps.publish_changes(_placed(**{name: [epoch]}), epoch - 1)
            if epoch % 7 == 0:
                await asyncio.sleep(0)
        done.set()

    def check() -> None:
        e = cache.entry("a")
        c = cache.epoch
        if e is not None and e.placement is not None:
            assert e.placement[0] >= c - c % 2, (c, e.placement)
            assert e.epoch >= c

    try:
        task = asyncio.create_task(publish())
        i = 0
        while not done.is_set():
            i += 1
            await (cache.refresh(["a"], sync=False) if i % 3 else cache.refresh_map())
            check()
            await asyncio.sleep(0)
            check()
        await task
        await cache.refresh_map()
        check()
        assert cache.epoch == 300 and cache.entry("a").placement == (300,)
    finally:
        await cache.stop()
        await listener.stop()
