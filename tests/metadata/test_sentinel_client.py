"""A metadata client on a redis+sentinel:// URL follows a failover (real master, replica
and three Sentinels; the master gets SIGKILL): commands fail as MetadataUnavailable
for a moment, then reach the promoted replica, and an event listener resubscribes there."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tests.sentinel_cluster import SentinelCluster
from vpq.config.settings import RedisSettings
from vpq.metadata.errors import MetadataUnavailable
from vpq.metadata.store import MetadataStore


async def test_client_and_listener_follow_a_failover(tmp_path) -> None:
    cluster = SentinelCluster(tmp_path / "redis")
    await asyncio.to_thread(cluster.start)
    md = MetadataStore(RedisSettings(key_prefix="sent", poll_fallback_ms=200), url=cluster.url)
    events: list[dict[str, Any]] = []

    async def collect(event: dict[str, Any]) -> None:
        events.append(event)

    listener = md.event_listener()
    listener.add_callback(collect)
    try:
        await md.start()
        assert await md.maps.publish_changes({"q": {"virtual_partitions": 1, "placement": [0]}}, 0)
        assert md.client.replica_waiter.waits == 1  # the master has its replica
        await listener.start()
        old = cluster.master_port()
        kill_at = time.monotonic()
        await asyncio.to_thread(cluster.kill_master)
        errors = 0
        while True:
            try:
                await md.client.set("sent:probe", "1")
                break
            except MetadataUnavailable:  # never a redis-py exception
                errors += 1
                await asyncio.sleep(0.1)
            assert time.monotonic() - kill_at < 60, "no command succeeded within 60 s of the kill"
        print(f"\ncommands work again {time.monotonic() - kill_at:.2f}s after the kill ({errors} failed attempts)")
        assert cluster.master_port() != old
        # the epoch published before the kill was WAITed for: the promoted replica has it
        assert await md.maps.epoch() == 1
        # the new master has no replica: nothing waits, the publish succeeds
        assert await md.maps.publish_changes({"r": {"virtual_partitions": 1, "placement": [0]}}, 1)
        for _ in range(100):
            if any(e.get("type") == "map" and e.get("epoch") == 2 for e in events):
                break
            await asyncio.sleep(0.1)
        assert any(e.get("type") == "map" and e.get("epoch") == 2 for e in events), events
    finally:
        await listener.stop()
        await md.stop()
        await asyncio.to_thread(cluster.stop)
