"""Real write nodes for the remap publisher tests (no tests here).

``WriteCluster`` starts real ``WriteNodeService``s (``takeover=False``: a partition
whose home node is not started stays unowned) over the test's Redis, each behind a
``tests.recording_proxy.RecordingProxy``; the node's registration is rewritten to the
proxy's address (renewals keep it), so the publisher's fence calls, found through
the registry, go through the proxy: ``fence_calls()`` lists them and ``proxy.before``
lets a test act while one is on its way. Appends go straight to the nodes with the
multi-partition ``POST /internal/v1/append`` (``WriteNodeClient.append_many``, one
``codec.columnar`` batch per call); ``records(pp)`` reads a partition back.

``GatedStorage`` is the real file system whose data flushes (``fdatasync``) wait while
``gate`` is clear: appends are then admitted (offsets assigned) but not durable, as on a
slow disk. With it the cluster's logs make every flush on their group-commit I/O thread
(``log.inline_commit_idle_ms`` 0), never on the event loop the test runs on.

``start_md`` and ``create_queue`` set up metadata as the queue admin does.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from tests.recording_proxy import RecordingProxy
from vpq.codec.columnar import build_columnar_batch, columns_of
from vpq.codec.records import Record, decode_batches
from vpq.common.errors import VpqError
from vpq.config.settings import ClusterSettings, LogSettings, RedisSettings, Settings
from vpq.metadata.store import MetadataStore
from vpq.node_rpc.append_frames import Frame
from vpq.node_rpc.write_node_client import WriteNodeClient
from vpq.write_nodes.service import WriteNodeService
from vpq.write_nodes.storage import OS_STORAGE, OsStorage, Storage


class GatedStorage(OsStorage):
    """See the module docstring. Open ``gate`` before stopping the node."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()

    def fdatasync(self, fd: int) -> None:
        self.gate.wait(30)
        super().fdatasync(fd)


async def start_md(redis_url: str, key_prefix: str) -> MetadataStore:
    md = MetadataStore(RedisSettings(key_prefix=key_prefix), url=redis_url)
    await md.start()
    return md


async def create_queue(md: MetadataStore, name: str, placement: Sequence[int]) -> dict[str, Any]:
    """What the queue admin does: the queue record, lineage (pp, 0) for every vp, then
    the map (CAS); returns the map."""
    await md.queues.create_or_update(name, {"virtual_partitions": len(placement)})
    epoch = await md.maps.epoch()
    for vp, pp in enumerate(placement):
        assert await md.maps.open_range(name, vp, pp, 0, epoch)

    def add(m: dict[str, Any]) -> dict[str, Any]:
        m["queues"][name] = {"virtual_partitions": len(placement), "placement": list(placement)}
        return m

    return await md.maps.update(add)


class WriteCluster:
    """See the module docstring. ``running``: the node indexes to start (default all)."""

    def __init__(
        self, redis_url: str, key_prefix: str, data_dir: Path, *, write_nodes: int = 2, partitions: int = 4,
        running: Sequence[int] | None = None, storage: Storage = OS_STORAGE,
    ) -> None:
        self.redis_url = redis_url
        self.settings = Settings(
            data_dir=data_dir,
            redis=RedisSettings(key_prefix=key_prefix, poll_fallback_ms=50),
            cluster=ClusterSettings(write_nodes=write_nodes, physical_partitions=partitions),
            log=LogSettings(inline_commit_idle_ms=0) if isinstance(storage, GatedStorage) else LogSettings(),
        )
        self.running = list(range(write_nodes) if running is None else running)
        self.storage = storage
        self.nodes: list[WriteNodeService] = []
        self.proxies: list[RecordingProxy] = []
        self._runners: list[web.AppRunner] = []
        self.md: MetadataStore | None = None
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self.md = await start_md(self.redis_url, self.settings.redis.key_prefix)
        self._session = aiohttp.ClientSession()
        self.client = WriteNodeClient(self._session)
        for i in self.running:
            node = WriteNodeService(self.settings, f"w{i}", i, self.redis_url, storage=self.storage, takeover=False)
            await node.start()
            self.nodes.append(node)
            proxy = RecordingProxy(f"http://{node.address}")
            runner = web.AppRunner(proxy.app(), access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self._runners.append(runner)
            self.proxies.append(proxy)
            address = f"127.0.0.1:{runner.addresses[0][1]}"
            meta = {"index": i, "pid": os.getpid()}
            await self.md.nodes.register_node(node.node_id, "write", address, self.settings.redis.lease_ttl_ms, meta)

    async def stop(self) -> None:
        if isinstance(self.storage, GatedStorage):
            self.storage.gate.set()
        for runner in self._runners:
            await runner.cleanup()
        for node in self.nodes:
            await node.stop()
        if self._session is not None:
            await self._session.close()
        if self.md is not None:
            await self.md.stop()

    def node_of(self, pp: int) -> WriteNodeService:
        return next(n for n in self.nodes if pp in {p.pp for p in n.ownership.held()})

    def fence_calls(self) -> list[tuple[int, int]]:
        """(pp, epoch) of every fence request that reached a node's proxy, in order per node."""
        return [
            (int(r.path.split("/")[-2]), r.body["epoch"])
            for p in self.proxies for r in p.requests if r.method == "POST" and r.path.endswith("/fence")
        ]

    async def append(self, pp: int, queue: str, vp: int, values: Sequence[bytes], map_epoch: int) -> int:
        """Append ``values`` as records of (queue, vp) to ``pp`` in one batch, routed with
        ``map_epoch``; the base offset once durable, or the node's error raised."""
        assert self.md is not None
        rec = await self.md.queues.get(queue)
        assert rec is not None
        records = [Record(value=v, queue_id=rec.id, virtual_partition=vp, key_hash=0, context_id=0) for v in values]
        now = int(time.time() * 1000)
        batch = build_columnar_batch(0, now, columns_of(records, now))
        [result] = await self.client.append_many(self.node_of(pp).address, [Frame(pp, batch)], map_epoch)
        if isinstance(result, VpqError):
            raise result
        return result[0]

    async def records(self, pp: int) -> list[Record]:
        """Every durable record of ``pp``, in offset order (offsets filled in)."""
        out: list[Record] = []
        address = self.node_of(pp).address
        while True:
            offset = out[-1].offset + 1 if out else 0
            got = await self.client.read(address, pp, offset, 1 << 20, 0)
            fresh = [r for r in decode_batches(got.data) if r.offset >= offset]
            if not fresh:
                return out
            out.extend(fresh)
