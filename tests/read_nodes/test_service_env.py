"""Test environment of the read-node service tests (no tests here).

A real redis-server (the ``redis_url`` fixture), queues created through the
gateway's own put-queue path (``queue_admin.cluster_queues.QueueAdmin``), messages
produced through the one produce path (``produce_path.produce.Appender``) to the
real ``write_nodes.service.WriteNodeService`` (node ``w0``, owning every pp). Read
nodes are real ``ReadNodeService``s on free ports, driven through
``node_rpc.read_node_client``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from vpq.config.settings import ClusterSettings, QueueDefaults, RedisSettings, Settings
from vpq.isolation.context import IsolationContext
from vpq.metadata.map_cache import MapCache
from vpq.metadata.store import MetadataStore
from vpq.node_rpc.node_directory import WriteNodeDirectory
from vpq.node_rpc.read_node_client import ReadNodeClient
from vpq.node_rpc.write_node_client import WriteNodeClient
from vpq.produce_path.append_accumulator import AppendAccumulator
from vpq.produce_path.produce import Appender, PlainMessage
from vpq.queue_admin.cluster_queues import QueueAdmin
from vpq.read_nodes.node_parts import ReadNodeOptions
from vpq.read_nodes.service import ReadNodeService
from vpq.traffic.cluster_traffic import TrafficMeter
from vpq.virtual_partitions.router import ProduceRouter
from vpq.write_nodes.service import WriteNodeService

FAST_OPTIONS = ReadNodeOptions(
    tick_ms=30, persist_interval_ms=30, tail_wait_ms=300, retry_ms=50, lineage_reload_ms=50, index_truncate_ms=0,
    index_keep_offsets=0,
)


class Env:
    """Redis + a real write node + produce/admin paths + read nodes (see the module docstring)."""

    def __init__(
        self, redis_url: str, prefix: str, data_dir: Path, *, pps: int = 2, lease_ttl_ms: int = 1000,
        session_timeout_ms: int = 5000,
    ) -> None:
        self.redis_url = redis_url
        self.settings = Settings(
            data_dir=data_dir,
            redis=RedisSettings(key_prefix=prefix, lease_ttl_ms=lease_ttl_ms, poll_fallback_ms=100),
            cluster=ClusterSettings(physical_partitions=pps),
            queues=QueueDefaults(session_timeout_ms=session_timeout_ms),
        )
        self.data_dir = data_dir
        self.pps = list(range(pps))
        self.md = MetadataStore(self.settings.redis, url=redis_url, queue_defaults=self.settings.queues)
        self.nodes: list[ReadNodeService] = []

    async def start(self) -> None:
        md = self.md
        await md.start()
        self.listener = md.event_listener()
        await self.listener.start()
        self.cache = MapCache(md.queues, md.maps, self.listener)
        await self.cache.start()
        self.writer = WriteNodeService(self.settings, "w0", 0, self.redis_url)
        await self.writer.start()
        self.session = aiohttp.ClientSession()
        self.admin = QueueAdmin(md, lambda: self.pps, TrafficMeter(), on_change=self.cache.refresh)
        writers = WriteNodeDirectory(md.nodes, md.leases, len(self.pps))
        self.appender = Appender(self.cache, ProduceRouter(self.cache, md.contexts), writers, AppendAccumulator(WriteNodeClient(self.session)))
        self.client = ReadNodeClient(self.session, timeout_s=10.0)

    async def stop(self) -> None:
        for node in self.nodes:
            await node.stop()
        await self.session.close()
        await self.writer.stop()
        await self.cache.stop()
        await self.listener.stop()
        await self.md.stop()

    async def end_offsets(self) -> dict[int, int]:
        """The durable end offset of every pp, as the write node reports it."""
        listing = await WriteNodeClient(self.session).partitions(self.writer.address)
        return {p["id"]: p["end_offset"] for p in listing["partitions"]}

    async def read_node(self, node_id: str = "r1", options: ReadNodeOptions = FAST_OPTIONS) -> ReadNodeService:
        node = ReadNodeService(self.settings, node_id, self.redis_url, options=options)
        await node.start()
        self.nodes.append(node)
        return node

    async def create_queue(self, name: str, **config: Any) -> dict[str, Any]:
        info, _ = await self.admin.put(name, config)
        return info

    async def produce(self, queue: str, messages: Sequence[PlainMessage]) -> list[dict[str, Any]]:
        return (await self.appender.append(queue, list(messages))).dicts()

    async def produce_json(
        self, queue: str, items: Sequence[tuple[str | None, Any]], ctx: IsolationContext | None = None
    ) -> list[dict[str, Any]]:
        c = ctx or IsolationContext()
        msgs = [
            PlainMessage(value=orjson.dumps(v), value_is_json=True, key=k, context=(c.env, c.set, c.lane))
            for k, v in items
        ]
        return await self.produce(queue, msgs)


async def drain(
    env: Env, address: str, queue: str, group: str, cid: str, want: int, *, ack: bool = True, timeout_s: float = 10.0
) -> list[dict[str, Any]]:
    """Poll (and ack) until ``want`` messages came or ``timeout_s`` passed."""
    got: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while len(got) < want and loop.time() < deadline:
        batch = await env.client.poll(address, queue, group, cid, 100, 200)
        got.extend(batch)
        if ack and batch:
            await env.client.ack(address, queue, group, cid, [m["id"] for m in batch])
    return got
