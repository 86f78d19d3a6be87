"""The Redis Streams peer against its own redis-server (appendfsync always)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.needs import needs_redis_binary
from vpq.load.checks import DeliveryChecker
from vpq.load.payload import make_payload, parse_payload
from vpq.load.peers.redis_streams import RedisStreams
from vpq.load.system import SystemUnavailable

pytestmark = needs_redis_binary


async def _consume_all(system: RedisStreams, queue: str, checker: DeliveryChecker, ordered: bool, members: int) -> None:
    async def handler(key: str, payload: bytes) -> None:
        stamp = parse_payload(payload)
        assert stamp.key == key
        checker.observe(stamp.key, stamp.seq)
        await asyncio.sleep(0)

    handles = [await system.consume(queue, handler, ordered=ordered, member=m, members=members, batch=5)
               for m in range(members)]
    for _ in range(500):
        if checker.expected_seen == checker.expected_count:
            break
        await asyncio.sleep(0.01)
    for h in handles:
        await h.stop()


@pytest.mark.parametrize("ordered", [True, False])
async def test_produce_count_consume_delete(tmp_path: Path, ordered: bool) -> None:
    system = RedisStreams(data_dir=tmp_path / "redis")
    await system.start()
    try:
        assert system.describe()["own_server"]
        assert system.describe()["client_parser"] == "hiredis"  # the peers extra installs it
        await system.setup(["q"], ordered=ordered, shards=8)
        checker = DeliveryChecker(order_required=ordered)
        seq = {f"k{i}": 0 for i in range(12)}
        for _ in range(10):
            batch = []
            for key in seq:
                batch.append((key, make_payload(key, seq[key])))
                checker.expect(key, seq[key])
                seq[key] += 1
            await system.produce("q", batch)
        assert await system.count("q") == 120
        memory = await system.server_memory()
        assert memory["used_memory"] > 0 and memory["rss_bytes"] > 0
        await _consume_all(system, "q", checker, ordered, members=3)
        report = checker.report()
        assert report.ok and report.distinct == 120 and report.duplicates == 0
        await system.delete(["q"])
        await system.setup(["q"], ordered=ordered, shards=8)
        assert await system.count("q") == 0
    finally:
        await system.teardown()
        await system.stop()


async def test_a_redis_without_appendfsync_always_is_refused(redis_url: str) -> None:
    system = RedisStreams(url=redis_url)
    with pytest.raises(SystemUnavailable, match="appendfsync always"):
        await system.start()
