"""Shared helpers of the write-node service tests (no tests here): settings with short
leases, queue placement in Redis, magic-2 batch building and small HTTP wrappers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from vpq.codec.columnar import build_columnar_batch, columns_of
from vpq.codec.records import Record
from vpq.config.settings import ClusterSettings, LogSettings, RebalanceSettings, RedisSettings, Settings
from vpq.metadata.store import MetadataStore
from vpq.node_rpc.append_frames import Frame, encode_frames

LEASE_TTL_MS = 300
STEADY_LEASE_MS = 10_000  # for tests that need the node to stay owner on a loaded machine


def make_settings(
    tmp_path: Path,
    key_prefix: str,
    *,
    write_nodes: int = 1,
    partitions: int = 2,
    poll_ms: int = 50,
    lease_ttl_ms: int = LEASE_TTL_MS,
) -> Settings:
    """Settings for one test; the short default lease lets tests watch a lease lapse, and
    tests that only need the node to stay owner pass a long one."""
    return Settings(
        data_dir=tmp_path / "data",
        log=LogSettings(segment_bytes=64 * 1024, retention_ms=-1, checkpoint_interval_ms=60_000),
        redis=RedisSettings(key_prefix=key_prefix, lease_ttl_ms=lease_ttl_ms, poll_fallback_ms=poll_ms),
        cluster=ClusterSettings(write_nodes=write_nodes, physical_partitions=partitions),
        rebalance=RebalanceSettings(window_ms=100),
    )


async def open_metadata(settings: Settings, redis_url: str) -> MetadataStore:
    md = MetadataStore(settings.redis, url=redis_url, queue_defaults=settings.queues)
    await md.start()
    return md


async def place_queue(md: MetadataStore, name: str, placement: Sequence[int]) -> int:
    """Create ``name`` with V = len(placement) and publish a map placing vp i on
    ``placement[i]``; returns the queue id."""
    rec, _ = await md.queues.create_or_update(name, {"virtual_partitions": len(placement)})

    def put(m: dict[str, Any]) -> dict[str, Any]:
        m["queues"][name] = {"virtual_partitions": len(placement), "placement": list(placement)}
        return m

    await md.maps.update(put)
    return rec.id


def batch(queue_id: int, vps: Sequence[int], tag: str = "m", context_id: int = 0) -> bytes:
    """One magic-2 batch (as the produce path builds them) with one record per entry of
    ``vps`` (values ``{tag}-{i}``)."""
    records = [
        Record(
            value=f"{tag}-{i}".encode(),
            queue_id=queue_id,
            virtual_partition=vp,
            key_hash=i,
            context_id=context_id,
            key=f"k{i}".encode(),
        )
        for i, vp in enumerate(vps)
    ]
    ts = int(time.time() * 1000)
    return build_columnar_batch(0, ts, columns_of(records, ts))


async def append(
    http: aiohttp.ClientSession, address: str, pp: int, body: bytes, epoch: int
) -> tuple[int, dict[str, Any]]:
    """Send ``body`` as the one frame of a ``POST /internal/v1/append`` for ``pp``: (200,
    ``{"base_offset", "last_offset"}``) or (the frame's status, ``{"error": ...}``); when
    the whole request is refused, its status and answer."""
    async with http.post(
        f"http://{address}/internal/v1/append",
        data=encode_frames([Frame(pp, body)]),
        headers={"X-Map-Epoch": str(epoch), "Content-Type": "application/octet-stream"},
    ) as resp:
        answer = orjson.loads(await resp.read())
        if resp.status != 200:
            return resp.status, answer
    (entry,) = answer["results"]
    if "error" in entry:
        return entry["status"], {"error": entry["error"]}
    return 200, entry


async def read(
    http: aiohttp.ClientSession, address: str, pp: int, offset: int, wait_ms: int = 0, max_bytes: int = 1 << 20
) -> tuple[int, bytes, Any]:
    async with http.get(
        f"http://{address}/internal/v1/partitions/{pp}/read",
        params={"offset": str(offset), "max_bytes": str(max_bytes), "wait_ms": str(wait_ms)},
    ) as resp:
        return resp.status, await resp.read(), resp.headers


async def partitions(http: aiohttp.ClientSession, address: str) -> dict[str, Any]:
    async with http.get(f"http://{address}/internal/v1/partitions") as resp:
        assert resp.status == 200
        return orjson.loads(await resp.read())


async def eventually(check: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 15.0) -> None:
    """Wait until ``check()`` is true (a bounded wait, not a timing assertion)."""
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        await asyncio.sleep(0.05)
