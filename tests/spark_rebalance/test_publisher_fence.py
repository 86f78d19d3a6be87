"""The write node's side of a cut-over (``write_nodes/fence.py``) against a real Redis,
plus ``FakeWriteNode``: an in-test write node (aiohttp, real ``FenceView`` and
``FenceEndpoint``, in-memory partition logs whose durability the test controls) that
the publisher tests use. Its ``append`` applies the documented checks in the
documented order: refresh the map when the sender's is newer, placement check,
fence check, offset assignment without an await in between, then durability."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from vpq.common.errors import Unavailable
from vpq.config.settings import RedisSettings
from vpq.metadata.fences import PUBLISHED, FenceStore, fence_of
from vpq.metadata.leases import pp_resource
from vpq.metadata.store import MetadataStore
from vpq.write_nodes.fence import FENCE_ROUTE, FenceEndpoint, FenceView

TTL_MS = 60_000


class FakeLog:
    """Offsets are assigned at ``submit``; durability follows in offset order when
    ``gate`` is open."""

    def __init__(self) -> None:
        self.records: list[tuple[str, int, Any]] = []
        self.durable = 0
        self.gate = asyncio.Event()
        self.gate.set()
        self._done: set[int] = set()
        self._advanced = asyncio.Event()
        self.online = True

    @property
    def end_offset(self) -> int:
        return len(self.records)

    @property
    def durable_end_offset(self) -> int:
        return self.durable

    def submit(self, queue: str, vp: int, payload: Any) -> int:
        self.records.append((queue, vp, payload))
        return len(self.records) - 1

    async def make_durable(self, offset: int) -> None:
        await self.gate.wait()
        self._done.add(offset)
        while self.durable in self._done:
            self.durable += 1
        self._advanced.set()
        self._advanced = asyncio.Event()

    async def wait_for(self, offset: int, timeout_s: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.durable <= offset:
            left = deadline - loop.time()
            if left <= 0:
                return False
            try:
                await asyncio.wait_for(self._advanced.wait(), left)
            except asyncio.TimeoutError:
                return self.durable > offset
        return True


class _Part:
    def __init__(self, log: FakeLog) -> None:
        self.log = log


class FakeWriteNode:
    """See the module docstring. ``on_fence(pp, epoch)`` runs before each fence answer."""

    def __init__(self, md: MetadataStore, node_id: str, pps: Sequence[int]) -> None:
        self.md = md
        self.node_id = node_id
        self.logs = {pp: FakeLog() for pp in pps}
        self.listener = md.event_listener()
        self.view = FenceView(FenceStore(md.client, md.keys), self.listener)
        self.map_epoch = 0
        self.placement: dict[str, list[int]] = {}
        self.fence_calls: list[tuple[int, int]] = []
        self.on_fence: Callable[[int, int], Awaitable[None]] | None = None
        self.endpoint = FenceEndpoint(self.view, self, self.refresh_map)
        self._runner: web.AppRunner | None = None
        self.address = ""

    def serving(self, pp: int) -> _Part:
        if pp not in self.logs:
            raise Unavailable("not_owner", f"{self.node_id} does not own partition {pp}", partition=pp)
        return _Part(self.logs[pp])

    async def refresh_map(self, min_epoch: int = 0) -> None:
        m = await self.md.maps.current() or {"epoch": 0, "queues": {}}
        if m["epoch"] >= self.map_epoch:
            self.map_epoch = m["epoch"]
            self.placement = {q: list(v["placement"]) for q, v in m["queues"].items()}

    async def _on_event(self, event: dict[str, Any]) -> None:
        if event.get("type") in ("map", "resync"):
            await self.refresh_map()

    async def _fence(self, request: web.Request) -> web.StreamResponse:
        epoch = (await request.json()).get("epoch")
        pp = int(request.match_info["pp"])
        if isinstance(epoch, int):
            self.fence_calls.append((pp, epoch))
            if self.on_fence is not None:
                await self.on_fence(pp, epoch)
        return await self.endpoint.handle(request)

    async def start(self) -> None:
        await self.listener.start()
        self.listener.add_callback(self._on_event)  # before the view's: the map refreshes first
        await self.refresh_map()
        await self.view.start()
        app = web.Application()
        app.router.add_post(FENCE_ROUTE, self._fence)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.address = f"127.0.0.1:{port}"
        await self.md.nodes.register_node(self.node_id, "write", self.address, TTL_MS)
        for pp in self.logs:
            assert await self.md.leases.acquire(pp_resource(pp), self.node_id, TTL_MS) is not None

    async def stop(self) -> None:
        await self.view.stop()
        await self.listener.stop()
        if self._runner is not None:
            await self._runner.cleanup()

    async def append(self, pp: int, queue: str, vp: int, sender_epoch: int, payload: Any) -> int:
        """Append one record; ``Unavailable`` (``stale_map``) as the real node would."""
        if sender_epoch > self.map_epoch:
            await self.refresh_map()
        placed = self.placement.get(queue)
        if placed is None or vp >= len(placed) or placed[vp] != pp:
            raise Unavailable("stale_map", f"{queue} vp {vp} not on {pp}", epoch=self.map_epoch)
        self.view.check(self.map_epoch, [(queue, vp)])
        log = self.logs[pp]
        offset = log.submit(queue, vp, payload)  # same stretch as the checks: no await between
        await log.make_durable(offset)
        return offset


async def start_md(redis_url: str, key_prefix: str) -> MetadataStore:
    md = MetadataStore(RedisSettings(key_prefix=key_prefix), url=redis_url)
    await md.start()
    return md


async def create_queue(md: MetadataStore, name: str, placement: Sequence[int]) -> dict[str, Any]:
    """What the queue admin does: lineage (pp, 0) for every vp, then the map (CAS)."""
    epoch = await md.maps.epoch()
    for vp, pp in enumerate(placement):
        assert await md.maps.open_range(name, vp, pp, 0, epoch)

    def add(m: dict[str, Any]) -> dict[str, Any]:
        m["queues"][name] = {"virtual_partitions": len(placement), "placement": list(placement)}
        return m

    return await md.maps.update(add)


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


async def test_endpoint_waits_for_in_flight_appends(redis_url, key_prefix) -> None:
    md = await start_md(redis_url, key_prefix)
    node = FakeWriteNode(md, "w0", [0, 1])
    await node.start()
    try:
        m = await create_queue(md, "a", [0, 1])
        await node.refresh_map()
        for i in range(3):
            await node.append(0, "a", 0, m["epoch"], i)
        log = node.logs[0]
        log.gate.clear()  # the next append is admitted, not durable
        in_flight = asyncio.create_task(node.append(0, "a", 0, m["epoch"], 3))
        await asyncio.sleep(0.01)
        assert log.end_offset == 4 and log.durable_end_offset == 3
        store = FenceStore(md.client, md.keys)
        e1 = m["epoch"] + 1
        assert await store.publish_fenced({**m, "epoch": e1}, m["epoch"], fence_of("f", e1, TTL_MS, {"a": 2}, [("a", 0, 0, 1)])) == PUBLISHED
        async with aiohttp.ClientSession() as s:
            status, body = await post_fence(s, node.address, 0, {"epoch": e1, "timeout_ms": 50})
            assert status == 503 and body["error"]["code"] == "fence_timeout"
            answer = asyncio.create_task(post_fence(s, node.address, 0, {"epoch": e1}))
            await asyncio.sleep(0.05)
            assert not answer.done()
            log.gate.set()
            assert await answer == (200, {"partition": 0, "epoch": e1, "end_offset": 4})
            await in_flight
            with pytest.raises(Unavailable, match="is moving"):
                await node.append(0, "a", 0, e1, 4)
            await node.append(1, "a", 1, e1, 0)  # vp 1 is not fenced
            assert (await post_fence(s, node.address, 1, {"epoch": e1}))[1]["end_offset"] == 1
            status, body = await post_fence(s, node.address, 0, {"epoch": e1 + 5})
            assert status == 503 and body["error"]["code"] == "fence_pending"
            status, body = await post_fence(s, node.address, 7, {"epoch": e1})
            assert status == 503 and body["error"]["code"] == "not_owner"
            status, body = await post_fence(s, node.address, 0, {"epoch": "x"})
            assert status == 400 and body["error"]["code"] == "invalid_request"
    finally:
        await node.stop()
        await md.stop()


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
