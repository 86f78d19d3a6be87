from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from vpq.common.redis_server import RedisServer
from vpq.config.settings import RedisSettings
from vpq.metadata.events import EventListener
from vpq.metadata.store import MetadataStore


class Collector:
    def __init__(self) -> None:
        self.events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def __call__(self, event: dict[str, Any]) -> None:
        await self.events.put(event)

    async def next(self, timeout: float = 5.0) -> dict[str, Any]:
        async with asyncio.timeout(timeout):
            return await self.events.get()


@contextlib.asynccontextmanager
async def listening(md: MetadataStore, **options: Any) -> AsyncIterator[Collector]:
    """A started ``EventListener`` on ``md`` feeding a ``Collector``; stopped on exit."""
    listener = EventListener(md.client, md.keys, **options)
    got = Collector()
    listener.add_callback(got)
    await listener.start()
    try:
        yield got
    finally:
        await listener.stop()


async def test_events_arrive_over_pubsub(md: MetadataStore) -> None:
    listener = EventListener(md.client, md.keys, poll_interval_ms=60_000)  # polling cannot help here
    got = Collector()
    listener.add_callback(got)
    await listener.start()
    try:
        rec, _ = await md.queues.create_or_update("orders", {})
        ev = await got.next()
        assert ev["type"] == "queue" and ev["op"] == "create" and ev["name"] == "orders" and ev["id"] == rec.id
        await md.maps.publish({"epoch": 1, "queues": {}}, 0)
        assert (await got.next())["epoch"] == 1
        await md.groups.join("orders", "g", "c1", ("prod", "", ""), 1000)
        ev = await got.next()
        assert (ev["type"], ev["queue"], ev["group"], ev["generation"]) == ("group", "orders", "g", 1)
        assert listener.version == ev["version"]
        await md.queues.create_or_update("orders", {"ordering": "none"})
        assert (await got.next())["op"] == "update"
        await md.queues.delete("orders")
        assert (await got.next())["op"] == "delete"
        await md.groups.delete_group("orders", "g")
        assert (await got.next())["op"] == "delete"
        await md.nodes.register_node("w1", "write", "h:1", 1000)
        ev = await got.next()
        assert (ev["type"], ev["op"], ev["node_id"]) == ("node", "register", "w1")
        await md.nodes.deregister_node("w1", "write")
        assert (await got.next())["op"] == "deregister"
        await md.announcer.announce({"type": "custom"})
        assert (await got.next())["type"] == "custom"
    finally:
        await listener.stop()


async def test_missed_pubsub_is_caught_by_polling(md: MetadataStore) -> None:
    async with listening(md, poll_interval_ms=50) as got:
        # an announcement whose PUBLISH never reached us: only the version and the log move
        v = await md.client.incr(md.keys.events_version())
        await md.client.lpush(md.keys.events_log(), json.dumps({"type": "map", "epoch": 9, "version": v}))
        ev = await got.next()
        assert ev == {"type": "map", "epoch": 9, "version": v}
        # missed so many that the log no longer has them: a resync
        await md.client.incrby(md.keys.events_version(), 5000)
        ev = await got.next()
        assert ev["type"] == "resync" and ev["version"] == v + 5000


async def test_polling_only_listener_delivers_in_order(md: MetadataStore) -> None:
    async with listening(md, poll_interval_ms=30, use_pubsub=False) as got:
        for i in range(5):
            await md.queues.create_or_update(f"q{i}", {})
        names = [(await got.next())["name"] for _ in range(5)]
        assert names == [f"q{i}" for i in range(5)]


async def test_failing_callback_does_not_stop_delivery(md: MetadataStore) -> None:
    listener = EventListener(md.client, md.keys, poll_interval_ms=50)

    async def broken(event: dict[str, Any]) -> None:
        raise RuntimeError("boom")

    got = Collector()
    listener.add_callback(broken)
    listener.add_callback(got)
    await listener.start()
    try:
        await md.announcer.announce({"type": "custom", "n": 1})
        await md.announcer.announce({"type": "custom", "n": 2})
        assert [(await got.next())["n"] for _ in range(2)] == [1, 2]
    finally:
        await listener.stop()


async def test_listener_reconnects_after_redis_restart(redis_server: RedisServer, key_prefix: str) -> None:
    md = MetadataStore(RedisSettings(key_prefix=key_prefix), url=redis_server.url)
    listener = EventListener(md.client, md.keys, poll_interval_ms=50)
    got = Collector()
    listener.add_callback(got)
    await listener.start()
    try:
        await md.queues.create_or_update("before", {})
        assert (await got.next())["name"] == "before"
        redis_server.kill()
        redis_server.start()
        await md.queues.create_or_update("after", {})
        ev = await got.next(timeout=8)
        assert ev["name"] == "after"
    finally:
        await listener.stop()
        await md.stop()


async def test_a_node_back_at_another_address_is_announced(md: MetadataStore) -> None:
    # A read node SIGKILLed and restarted registers again before its old entry has gone:
    # readers that loaded the old address must hear of the new one (they once went on
    # calling the dead port until their own refresh, failing joins with group_moving).
    async with listening(md, poll_interval_ms=60_000) as got:
        await md.nodes.register_node("r0", "read", "h:1", 60_000)
        assert (await got.next())["op"] == "register"
        await md.nodes.register_node("r0", "read", "h:1", 60_000)  # the same: nothing to say
        await md.announcer.announce({"type": "marker"})
        assert (await got.next())["type"] == "marker"
        await md.nodes.register_node("r0", "read", "h:2", 60_000)
        ev = await got.next()
        assert (ev["type"], ev["op"], ev["node_id"]) == ("node", "register", "r0")
        assert [n.address for n in await md.nodes.nodes("read")] == ["h:2"]
