"""Test environment of the read-node service tests (no tests here).

A real redis-server (the ``redis_url`` fixture), queues created through the
gateway's own put-queue path (``queue_admin.cluster_queues.QueueAdmin``), messages
produced through the one produce path (``produce_path.produce.Appender``), and
either the real ``write_nodes.service.WriteNodeService`` (``real_writer=True``)
or ``FakeWriteNode``: real ``PartitionLog``s served by a minimal aiohttp app that
implements the write-node endpoints of ``docs/internals.md`` honestly (durable
data only, long-poll reads, ``X-Start-Offset``/``X-End-Offset``), registered
under role ``write`` and holding the ``pp:{n}`` leases. Read nodes are real
``ReadNodeService``s on free ports, driven through ``node_rpc.read_node_client``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from vpq.config.settings import ClusterSettings, LogSettings, QueueDefaults, RedisSettings, Settings
from vpq.isolation.context import IsolationContext
from vpq.metadata.leases import pp_resource
from vpq.metadata.map_cache import MapCache
from vpq.metadata.store import MetadataStore
from vpq.node_rpc.append_frames import decode_frames
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
from vpq.write_nodes.log import PartitionLog

FAST_OPTIONS = ReadNodeOptions(
    tick_ms=30, persist_interval_ms=30, tail_wait_ms=300, retry_ms=50, lineage_reload_ms=50, index_truncate_ms=0,
    index_keep_offsets=0,
)


class FakeWriteNode:
    """The write-node wire format over real partition logs (see the module docstring)."""

    def __init__(self, md: MetadataStore, data_dir: Path, pps: Sequence[int], node_id: str = "w0") -> None:
        self._md = md
        self._dir = data_dir
        self.node_id = node_id
        self.logs = {pp: PartitionLog(data_dir / f"pp-{pp:05d}", LogSettings(retention_ms=-1), pp) for pp in pps}
        self._runner: web.AppRunner | None = None
        self.address = ""
        self.reads = 0

    async def start(self) -> None:
        for log in self.logs.values():
            await log.start()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/internal/v1/partitions/{pp}/read", self._read)
        app.router.add_post("/internal/v1/append", self._append_many)
        app.router.add_get("/internal/v1/partitions", self._partitions)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.address = f"127.0.0.1:{self._runner.addresses[0][1]}"
        await self._md.nodes.register_node(self.node_id, "write", self.address, 120_000)
        for pp in self.logs:
            assert await self._md.leases.acquire(pp_resource(pp), self.node_id, 120_000) is not None

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        for log in self.logs.values():
            await log.stop()

    def _log(self, request: web.Request) -> PartitionLog:
        pp = int(request.match_info["pp"])
        if pp not in self.logs:
            body = {"error": {"code": "not_owner", "message": f"pp {pp} is not here", "retry_after": 1}}
            raise web.HTTPServiceUnavailable(body=orjson.dumps(body), content_type="application/json")
        return self.logs[pp]

    async def _read(self, request: web.Request) -> web.Response:
        log = self._log(request)
        self.reads += 1
        offset = max(int(request.query["offset"]), log.start_offset)
        max_bytes = int(request.query["max_bytes"])
        wait_ms = min(int(request.query.get("wait_ms", "0")), 30_000)
        if offset >= log.durable_end_offset and wait_ms > 0:
            await log.wait_for(offset, wait_ms / 1000.0)
        data = log.read(offset, max_bytes) if offset <= log.end_offset else b""
        headers = {"X-Start-Offset": str(log.start_offset), "X-End-Offset": str(log.durable_end_offset)}
        return web.Response(body=data, headers=headers, content_type="application/octet-stream")

    async def _append_many(self, request: web.Request) -> web.Response:
        results: list[dict[str, object]] = []
        for pp, batch, _ in decode_frames(await request.read()):
            if pp not in self.logs:
                results.append({"error": {"code": "not_owner", "message": f"pp {pp} is not here", "retry_after": 1}, "status": 503})
                continue
            base, last = await self.logs[pp].append_batch_bytes(batch)
            results.append({"base_offset": base, "last_offset": last})
        return web.json_response({"results": results})

    async def _partitions(self, request: web.Request) -> web.Response:
        parts = [
            {"id": pp, "start_offset": log.start_offset, "end_offset": log.durable_end_offset,
             "bytes": log.size_bytes, "online": log.online}
            for pp, log in sorted(self.logs.items())
        ]
        return web.json_response({"node_id": self.node_id, "partitions": parts})


class Env:
    """Redis + a fake write node + produce/admin paths + read nodes (see the module docstring)."""

    def __init__(
        self, redis_url: str, prefix: str, data_dir: Path, *, pps: int = 2, lease_ttl_ms: int = 1000,
        session_timeout_ms: int = 5000, real_writer: bool = False,
    ) -> None:
        self.real_writer = real_writer
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
        if self.real_writer:
            from vpq.write_nodes.service import WriteNodeService

            self.real = WriteNodeService(self.settings, "w0", 0, self.redis_url)
            await self.real.start()
        else:
            self.writer = FakeWriteNode(md, self.data_dir / "w0", self.pps)
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
        if self.real_writer:
            await self.real.stop()
        else:
            await self.writer.stop()
        await self.cache.stop()
        await self.listener.stop()
        await self.md.stop()

    async def end_offsets(self) -> dict[int, int]:
        """The durable end offset of every pp, as the write node reports it."""
        address = self.real.address if self.real_writer else self.writer.address
        listing = await WriteNodeClient(self.session).partitions(address)
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
