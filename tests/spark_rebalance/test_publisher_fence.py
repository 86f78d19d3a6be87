"""The write node's side of a cut-over (``write_nodes/fence.py``) against a real Redis:
``FenceView`` and ``FenceStore`` directly, the fence endpoint on a real write node."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from tests.spark_rebalance.write_cluster import GatedStorage, WriteCluster, create_queue, start_md
from vpq.common.errors import Unavailable
from vpq.metadata.fences import PUBLISHED, FenceStore, fence_of
from vpq.write_nodes.fence import FenceView

TTL_MS = 60_000


async def post_fence(session: aiohttp.ClientSession, address: str, pp: int, body: Any) -> tuple[int, Any]:
    async with session.post(f"http://{address}/internal/v1/partitions/{pp}/fence", json=body) as resp:
        return resp.status, await resp.json()


# ---------------------------------------------------------------------- tests
async def test_view_refuses_fenced_vps_and_their_descendants(redis_url, key_prefix) -> None:
    md = await start_md(redis_url, key_prefix)
    try:
        m = await create_queue(md, "a", [0, 1, 0, 1])
        store = FenceStore(md.client, md.keys)
        view = FenceView(store)
        await view.start()
        view.check(m["epoch"], [("a", 1), ("b", 0)])  # no fence yet
        fence = fence_of("f1", m["epoch"] + 1, TTL_MS, {"a": 4}, [("a", 1, 1, 0)])
        assert await store.publish_fenced({**m, "epoch": m["epoch"] + 1}, m["epoch"], fence) == PUBLISHED
        view.check(m["epoch"], [("a", 1)])  # the view is not reloaded yet: nothing fenced
        await view.refresh_to(fence.epoch)
        assert view.epoch == fence.epoch and view.fence == fence
        with pytest.raises(Unavailable) as ei:
            view.check(m["epoch"], [("a", 0)])  # the view is newer than the node's map
        assert ei.value.code == "stale_map" and "older than its remap fence view" in ei.value.message
        view.check(fence.epoch, [("a", 0), ("a", 2), ("a", 3)])
        for vp in (1, 5):  # vp 5 descends from fenced vp 1 once V doubles to 8
            with pytest.raises(Unavailable) as ei:
                view.check(fence.epoch, [("a", vp)])
            assert ei.value.code == "stale_map" and ei.value.details["moving"] is True
        await view.stop()
    finally:
        await md.stop()


async def test_view_newer_than_the_nodes_map_refuses_everything_without_a_fence(redis_url, key_prefix) -> None:
    """A plain map change (no fence at all) still makes a node whose map lags refuse."""
    md = await start_md(redis_url, key_prefix)
    try:
        m = await create_queue(md, "a", [0, 1])
        view = FenceView(FenceStore(md.client, md.keys))
        await view.start()
        newer = await create_queue(md, "b", [1])
        await view.refresh_to(newer["epoch"])
        assert view.fence is None and view.epoch == newer["epoch"] > m["epoch"]
        for pairs in ([("a", 0)], [("b", 0)], []):
            with pytest.raises(Unavailable) as ei:
                view.check(m["epoch"], pairs)
            assert ei.value.code == "stale_map" and "moving" not in ei.value.details
        view.check(newer["epoch"], [("a", 0), ("a", 1), ("b", 0)])
        await view.stop()
    finally:
        await md.stop()


async def test_view_past_a_removed_fence_refuses_a_map_from_before_the_removal(redis_url, key_prefix) -> None:
    """Fence published at E+1, removed at E+2: the view (E+2) has no fence, but a node
    still on map E checked placement against a map that predates the fence, so its
    appends are refused until its map catches up."""
    md = await start_md(redis_url, key_prefix)
    try:
        m = await create_queue(md, "a", [0, 1])
        store = FenceStore(md.client, md.keys)
        view = FenceView(store)
        await view.start()
        e1, e2 = m["epoch"] + 1, m["epoch"] + 2
        fence = fence_of("f", e1, TTL_MS, {"a": 2}, [("a", 0, 0, 1)])
        assert await store.publish_fenced({**m, "epoch": e1}, m["epoch"], fence) == PUBLISHED
        moved = {**m, "epoch": e2, "queues": {"a": {"virtual_partitions": 2, "placement": [1, 1]}}}
        assert await store.publish_unfenced(moved, e1, "f") == PUBLISHED
        await view.refresh_to(e2)
        assert view.epoch == e2 and view.fence is None
        for epoch in (m["epoch"], e1):
            with pytest.raises(Unavailable) as ei:
                view.check(epoch, [("a", 0)])
            assert ei.value.code == "stale_map"
        view.check(e2, [("a", 0)])
        await view.stop()
    finally:
        await md.stop()


async def test_endpoint_waits_for_in_flight_appends(redis_url, key_prefix, tmp_path) -> None:
    """A real write node (w0 of 1, owning pp 0 and 1) on a disk whose flushes the test
    holds (``GatedStorage``): the fence answers only once the append admitted before it
    is durable, with the end offset past it."""
    storage = GatedStorage()
    cluster = WriteCluster(redis_url, key_prefix, tmp_path / "data", write_nodes=1, partitions=2, storage=storage)
    await cluster.start()
    try:
        md = cluster.md
        assert md is not None
        m = await create_queue(md, "a", [0, 1])
        address = cluster.nodes[0].address
        for i in range(3):
            await cluster.append(0, "a", 0, [b"%d" % i], m["epoch"])
        log = cluster.nodes[0].ownership.serving(0).log
        storage.gate.clear()  # the next append is admitted, not durable
        in_flight = asyncio.create_task(cluster.append(0, "a", 0, [b"3"], m["epoch"]))
        for _ in range(500):
            if log.end_offset == 4:
                break
            await asyncio.sleep(0.01)
        assert log.end_offset == 4 and log.durable_end_offset == 3
        store = FenceStore(md.client, md.keys)
        e1 = m["epoch"] + 1
        assert await store.publish_fenced({**m, "epoch": e1}, m["epoch"], fence_of("f", e1, TTL_MS, {"a": 2}, [("a", 0, 0, 1)])) == PUBLISHED
        async with aiohttp.ClientSession() as s:
            status, body = await post_fence(s, address, 0, {"epoch": e1, "timeout_ms": 50})
            assert status == 503 and body["error"]["code"] == "fence_timeout"
            answer = asyncio.create_task(post_fence(s, address, 0, {"epoch": e1}))
            await asyncio.sleep(0.05)
            assert not answer.done()
            storage.gate.set()
            assert await answer == (200, {"partition": 0, "epoch": e1, "end_offset": 4})
            assert await in_flight == 3
            with pytest.raises(Unavailable, match="is moving") as ei:
                await cluster.append(0, "a", 0, [b"4"], e1)
            assert ei.value.code == "stale_map"
            assert await cluster.append(1, "a", 1, [b"0"], e1) == 0  # vp 1 is not fenced
            assert (await post_fence(s, address, 1, {"epoch": e1}))[1]["end_offset"] == 1
            status, body = await post_fence(s, address, 0, {"epoch": e1 + 5})
            assert status == 503 and body["error"]["code"] == "fence_pending"
            status, body = await post_fence(s, address, 7, {"epoch": e1})
            assert status == 503 and body["error"]["code"] == "not_owner"
            status, body = await post_fence(s, address, 0, {"epoch": "x"})
            assert status == 400 and body["error"]["code"] == "invalid_request"
    finally:
        await cluster.stop()


async def test_fence_store_is_atomic_with_the_map(redis_url, key_prefix) -> None:
    md = await start_md(redis_url, key_prefix)
    try:
        m = await create_queue(md, "a", [0, 1])
        store = FenceStore(md.client, md.keys)
        e = m["epoch"]
        f1 = fence_of("f1", e + 1, TTL_MS, {"a": 2}, [("a", 0, 0, 1)])
        f0 = fence_of("f0", e + 6, TTL_MS, {"a": 2}, [("a", 0, 0, 1)])
        assert await store.publish_fenced({**m, "epoch": e + 6}, e + 5, f0) == 0  # stale expectation
        with pytest.raises(ValueError):
            await store.publish_fenced({**m, "epoch": e + 1}, e, f0)  # the fence must carry the new epoch
        assert await store.publish_fenced({**m, "epoch": e + 1}, e, f1) == PUBLISHED
        assert await store.publish_fenced({**m, "epoch": e + 1}, e, f1) == PUBLISHED  # a retry
        f2 = fence_of("f2", e + 2, TTL_MS, {"a": 2}, [("a", 1, 1, 0)])
        assert await store.publish_fenced({**m, "epoch": e + 2}, e + 1, f2) == -1  # busy
        snap = await store.snapshot()
        assert snap.map_epoch == e + 1 and snap.fence == f1 and not snap.expired and snap.age_ms is not None
        assert await store.publish_unfenced({**m, "epoch": e + 2}, e + 1, "other") == -1
        assert await store.publish_unfenced({**m, "epoch": e + 1}, e, "f1") == 0  # the epoch moved on
        assert await store.publish_unfenced({**m, "epoch": e + 2}, e + 1, "f1") == PUBLISHED
        assert await store.publish_unfenced({**m, "epoch": e + 2}, e + 1, "f1") == PUBLISHED  # a retry
        snap = await store.snapshot()
        assert snap.map_epoch == e + 2 and snap.fence is None
        assert await md.maps.epoch() == e + 2
    finally:
        await md.stop()
