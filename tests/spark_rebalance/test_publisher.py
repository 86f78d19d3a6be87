"""``spark_rebalance.publisher`` against a real Redis, with the fence calls going over
HTTP to real write nodes (``write_cluster.WriteCluster``: two nodes, w0 homing pp 0 and
2, w1 pp 1 and 3, each behind a recording proxy)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.recording_proxy import Recorded
from tests.spark_rebalance.write_cluster import WriteCluster, create_queue
from vpq.metadata.fences import PUBLISHED, FenceStore, fence_of
from vpq.metadata.maps import LineageRange as R
from vpq.metadata.store import MetadataStore
from vpq.spark_rebalance.fence_client import HttpFenceClient
from vpq.spark_rebalance.plan_model import Imbalance, Plan, Split
from vpq.spark_rebalance.publisher import Publisher, PublisherOptions
from vpq.virtual_partitions.placement import PlacementMap, VpMove

OPTS = PublisherOptions(fence_budget_s=0.5, fence_call_timeout_s=0.3, retry_backoff_s=0.02)


def make_plan(current: PlacementMap, moves: Sequence[VpMove] = (), splits: Sequence[Split] = ()) -> Plan:
    pm = current
    for s in splits:
        while pm.queue(s.queue).virtual_partitions < s.to_vps:
            pm = pm.split(s.queue)
    for m in moves:
        pm = pm.move(m.queue, m.vp, m.to_pp)
    before, after = Imbalance(1.5, 1.5, 1.5), Imbalance(1.0, 1.0, 1.0)
    return Plan(pm, tuple(moves), tuple(splits), (), (), before, after, 0, 0, 4, 4)


@dataclass
class Cluster:
    md: MetadataStore
    nodes: WriteCluster
    publisher: Publisher

    async def current(self) -> PlacementMap:
        return PlacementMap.from_dict(await self.md.maps.current())

    async def append(self, pp: int, queue: str, vp: int, n: int) -> None:
        epoch = await self.md.maps.epoch()
        await self.nodes.append(pp, queue, vp, [b"%d" % i for i in range(n)], epoch)


@contextlib.asynccontextmanager
async def cluster(redis_url: str, key_prefix: str, data_dir: Path, running: Sequence[int] | None = None,
                  write_nodes: int = 2, opts: PublisherOptions = OPTS) -> AsyncIterator[Cluster]:
    """Real write nodes ``running`` (default all) of ``write_nodes``, 4 partitions."""
    nodes = WriteCluster(redis_url, key_prefix, data_dir, write_nodes=write_nodes, running=running)
    await nodes.start()
    assert nodes.md is not None
    try:
        async with aiohttp.ClientSession() as session:
            yield Cluster(nodes.md, nodes, Publisher(nodes.md, HttpFenceClient(session, nodes.md.leases, nodes.md.nodes), opts))
    finally:
        await nodes.stop()


def calls(c: Cluster) -> set[tuple[int, int]]:
    return set(c.nodes.fence_calls())


async def test_moves_fence_seal_lineage_and_publish_two_epochs(redis_url, key_prefix, tmp_path) -> None:
    async with cluster(redis_url, key_prefix, tmp_path) as c:
        await create_queue(c.md, "a", [0, 1, 2, 3])
        await create_queue(c.md, "b", [0, 0])
        await c.append(0, "a", 0, 3)
        await c.append(0, "b", 1, 2)
        await c.append(2, "a", 2, 4)
        cur = await c.current()
        e0 = cur.epoch
        plan = make_plan(cur, [VpMove("a", 0, 0, 2), VpMove("b", 1, 0, 3)])
        res = await c.publisher.apply(plan)
        assert res.status == "published" and res.epochs == [e0 + 1, e0 + 2]
        assert res.moved == [VpMove("a", 0, 0, 2), VpMove("b", 1, 0, 3)] and not res.rolled_back
        assert res.fenced_ms is not None and res.fenced_ms >= 0
        assert calls(c) == {(0, e0 + 1), (2, e0 + 1), (3, e0 + 1)}
        assert res.seals == {0: 5, 2: 4, 3: 0}
        after = await c.current()
        assert after.epoch == e0 + 2
        assert after.queue("a").placement == (2, 1, 2, 3) and after.queue("b").placement == (0, 3)
        assert await c.md.maps.lineage("a", 0) == [R(0, 0, 5), R(2, 4, None)]
        assert await c.md.maps.lineage("b", 1) == [R(0, 0, 5), R(3, 0, None)]
        assert await c.md.maps.lineage("a", 1) == [R(1, 0, None)]
        assert await c.md.maps.lineage("b", 0) == [R(0, 0, None)]
        assert (await c.publisher.fences.snapshot()).fence is None
        fenced, final = (await c.md.maps.history(2))[::-1]
        assert (fenced["epoch"], fenced["kind"], fenced["stage"], fenced["fenced"]) == (e0 + 1, "remap", "fence", 2)
        assert fenced["moves"] == [] and fenced["imbalance_after"] is None
        assert (final["epoch"], final["stage"], final["moves_total"], final["rolled_back"]) == (e0 + 2, "final", 2, 0)
        assert final["moves"] == [{"queue": "a", "vp": 0, "from_pp": 0, "to_pp": 2}, {"queue": "b", "vp": 1, "from_pp": 0, "to_pp": 3}]
        assert (final["imbalance_before"], final["imbalance_after"]) == (1.5, 1.0)
        assert final["time_ms"] >= fenced["time_ms"] > 0


async def test_splits_only_publish_one_epoch_and_no_fence(redis_url, key_prefix, tmp_path) -> None:
    async with cluster(redis_url, key_prefix, tmp_path) as c:
        await create_queue(c.md, "b", [0, 2])
        cur = await c.current()
        res = await c.publisher.apply(make_plan(cur, splits=[Split("b", 2, 8)]))
        assert res.status == "published" and res.epochs == [cur.epoch + 1]
        assert [(s.queue, s.old_vs) for s in res.splits] == [("b", (2, 4))]
        (entry,) = await c.md.maps.history(1)
        assert (entry["epoch"], entry["stage"], entry["splits"]) == (cur.epoch + 1, "split", [{"queue": "b", "from_vps": 2, "to_vps": 8}])
        assert (entry["imbalance_before"], entry["imbalance_after"], entry["moves"]) == (1.5, 1.0, [])
        assert calls(c) == set() and res.fenced_ms is None
        after = await c.current()
        assert after.queue("b").placement == (0, 2) * 4
        lineage = await c.md.maps.lineage_all("b")
        assert lineage == {vp: [R(0 if vp % 2 == 0 else 2, 0, None)] for vp in range(8)}


async def test_split_then_move_of_a_child_vp(redis_url, key_prefix, tmp_path) -> None:
    async with cluster(redis_url, key_prefix, tmp_path) as c:
        await create_queue(c.md, "a", [0, 1, 2, 3])
        await c.append(1, "a", 1, 2)
        cur = await c.current()
        e0 = cur.epoch
        res = await c.publisher.apply(make_plan(cur, [VpMove("a", 5, 1, 0)], [Split("a", 4, 8)]))
        assert res.epochs == [e0 + 1, e0 + 2, e0 + 3] and res.moved == [VpMove("a", 5, 1, 0)]
        after = await c.current()
        assert after.queue("a").placement == (0, 1, 2, 3, 0, 0, 2, 3)
        assert await c.md.maps.lineage("a", 5) == [R(1, 0, 2), R(0, 0, None)]
        assert await c.md.maps.lineage("a", 1) == [R(1, 0, None)]


async def test_concurrent_publishes_during_the_cutover_are_kept(redis_url, key_prefix, tmp_path) -> None:
    async with cluster(redis_url, key_prefix, tmp_path) as c:
        await create_queue(c.md, "a", [0, 1, 2, 3])
        await c.append(0, "a", 0, 3)
        cur = await c.current()
        e0 = cur.epoch
        seen: list[int] = []

        async def admin_meanwhile(fence_call: Recorded) -> None:
            if seen:
                return
            seen.append(fence_call.body["epoch"])
            await create_queue(c.md, "c", [1])  # a queue created: epoch e0 + 2

            def grow(m: dict[str, Any]) -> dict[str, Any]:  # "a" grown to 8 vps: epoch e0 + 3
                q = m["queues"]["a"]
                m["queues"]["a"] = {"virtual_partitions": 8, "placement": q["placement"] * 2}
                return m

            grown = await c.md.maps.update(grow)
            await c.md.maps.split_lineage("a", 4, grown["epoch"])

        for proxy in c.nodes.proxies:
            proxy.before(r"/fence$", admin_meanwhile)
        res = await c.publisher.apply(make_plan(cur, [VpMove("a", 0, 0, 2)]))
        assert seen == [e0 + 1]
        assert res.status == "published" and res.epochs == [e0 + 1, e0 + 4]
        after = await c.current()
        assert after.epoch == e0 + 4 and after.queue("c").placement == (1,)
        assert after.queue("a").placement == (2, 1, 2, 3, 2, 1, 2, 3)  # vp 4 descends from vp 0
        for vp in (0, 4):
            assert await c.md.maps.lineage("a", vp) == [R(0, 0, 3), R(2, 0, None)]
        assert await c.md.maps.lineage("a", 5) == [R(1, 0, None)]


async def test_a_stale_plan_is_rebased_and_gone_queues_are_skipped(redis_url, key_prefix, tmp_path) -> None:
    async with cluster(redis_url, key_prefix, tmp_path) as c:
        await create_queue(c.md, "a", [0, 1])
        await create_queue(c.md, "b", [0, 1])
        cur = await c.current()
        plan = make_plan(cur, [VpMove("a", 0, 0, 2), VpMove("b", 1, 1, 3)])
        await c.md.maps.update(lambda m: {"queues": {"a": m["queues"]["a"]}})  # "b" deleted meanwhile
        res = await c.publisher.apply(plan)
        assert res.moved == [VpMove("a", 0, 0, 2)]
        assert res.skipped == [(VpMove("b", 1, 1, 3), "queue no longer placed")]
        assert res.epochs == [cur.epoch + 2, cur.epoch + 3]
        assert (await c.current()).queue("a").placement == (2, 1)


async def test_busy_while_another_cutover_holds_a_fresh_fence(redis_url, key_prefix, tmp_path) -> None:
    async with cluster(redis_url, key_prefix, tmp_path) as c:
        m = await create_queue(c.md, "a", [0, 1])
        store = FenceStore(c.md.client, c.md.keys)
        e1 = m["epoch"] + 1
        assert await store.publish_fenced({**m, "epoch": e1}, m["epoch"], fence_of("other", e1, 60_000, {"a": 2}, [("a", 1, 1, 0)])) == PUBLISHED
        res = await c.publisher.apply(make_plan(await c.current(), [VpMove("a", 0, 0, 2)]))
        assert res.status == "busy" and res.epochs == []
        assert await c.md.maps.epoch() == e1 and (await store.current()).id == "other"
        assert await c.publisher.recover() is None  # fresh: left alone


async def test_an_unowned_target_rolls_its_move_back_and_the_rest_proceeds(redis_url, key_prefix, tmp_path) -> None:
    async with cluster(redis_url, key_prefix, tmp_path, running=[0, 1, 2], write_nodes=4) as c:  # pp 3 unowned
        await create_queue(c.md, "a", [0, 1])
        await c.append(1, "a", 1, 2)
        cur = await c.current()
        res = await c.publisher.apply(make_plan(cur, [VpMove("a", 0, 0, 2), VpMove("a", 1, 1, 3)]))
        assert res.status == "published" and res.epochs == [cur.epoch + 1, cur.epoch + 2]
        assert res.moved == [VpMove("a", 0, 0, 2)]
        [(m, why)] = res.rolled_back
        assert m == VpMove("a", 1, 1, 3) and "partition_unowned" in why
        assert (await c.current()).queue("a").placement == (2, 1)
        assert await c.md.maps.lineage("a", 1) == [R(1, 0, None)]
        assert (await c.publisher.fences.snapshot()).fence is None
        await c.append(1, "a", 1, 1)  # vp 1 is writable again where it was


async def test_a_failing_publisher_resolves_its_own_fence(redis_url, key_prefix, tmp_path) -> None:
    class Broken:
        async def fence(self, pp: int, epoch: int, timeout_s: float) -> int:
            raise RuntimeError("boom")

    async with cluster(redis_url, key_prefix, tmp_path) as c:
        await create_queue(c.md, "a", [0, 1])
        cur = await c.current()
        publisher = Publisher(c.md, Broken(), OPTS)
        with pytest.raises(RuntimeError, match="boom"):
            await publisher.apply(make_plan(cur, [VpMove("a", 0, 0, 2)]))
        snap = await publisher.fences.snapshot()
        assert snap.fence is None and snap.map_epoch == cur.epoch + 2
        assert (await c.current()).queue("a").placement == (0, 1)
        assert await c.md.maps.lineage("a", 0) == [R(0, 0, None)]


async def test_recovery_of_a_dead_publishers_fence_follows_the_lineage(redis_url, key_prefix, tmp_path) -> None:
    async with cluster(redis_url, key_prefix, tmp_path) as c:
        m = await create_queue(c.md, "a", [0, 1, 2, 3])
        store = FenceStore(c.md.client, c.md.keys)
        e1 = m["epoch"] + 1
        fence = fence_of("dead", e1, 1, {"a": 4}, [("a", 0, 0, 2), ("a", 1, 1, 3)])
        assert await store.publish_fenced({**m, "epoch": e1}, m["epoch"], fence) == PUBLISHED
        assert await c.md.maps.move_range("a", 0, 0, 2, 0, e1)  # it died after moving vp 0's lineage
        await asyncio.sleep(0.01)
        assert (await store.snapshot()).expired
        res = await c.publisher.apply(make_plan(await c.current(), [VpMove("a", 2, 2, 0)]))
        assert res.recovered is not None and res.recovered.fence_id == "dead"
        assert res.recovered.forward == (VpMove("a", 0, 0, 2),) and res.recovered.back == (VpMove("a", 1, 1, 3),)
        assert res.recovered.epoch == e1 + 1 and res.epochs == [e1 + 2, e1 + 3]
        assert (await c.current()).queue("a").placement == (2, 1, 0, 3)
        assert await c.md.maps.lineage("a", 1) == [R(1, 0, None)]


async def test_producers_lose_and_reorder_nothing_across_a_swap(redis_url, key_prefix, tmp_path) -> None:
    """Two sequential producers (one per vp) keep appending before, during and after the
    cut-over of a swap (vp 0: pp 0 -> 2, vp 2: pp 2 -> 0). Reading each vp's lineage
    range by range must give every sequence number exactly once, in order."""
    async with cluster(redis_url, key_prefix, tmp_path) as c:
        await create_queue(c.md, "a", [0, 1, 2, 3])
        qid = (await c.md.queues.require("a")).id
        progress = {0: 0, 2: 0}
        done = asyncio.Event()

        async def produce(vp: int) -> None:
            m = await c.md.maps.current()
            seq = 0
            while not done.is_set() or progress[vp] < 30 + after[vp]:
                pp = m["queues"]["a"]["placement"][vp]
                try:
                    await c.nodes.append(pp, "a", vp, [b"%d" % seq], m["epoch"])
                except Exception as exc:  # noqa: BLE001 - only stale_map is expected
                    assert getattr(exc, "code", None) == "stale_map", exc
                    await asyncio.sleep(0.001)
                    m = await c.md.maps.current()
                    continue
                seq += 1
                progress[vp] = seq
                await asyncio.sleep(0)

        after: dict[int, int] = {0: 0, 2: 0}
        tasks = [asyncio.create_task(produce(vp)) for vp in (0, 2)]
        while min(progress.values()) < 30:
            await asyncio.sleep(0.001)
        res = await c.publisher.apply(make_plan(await c.current(), [VpMove("a", 0, 0, 2), VpMove("a", 2, 2, 0)]))
        after.update(progress)
        done.set()
        await asyncio.gather(*tasks)
        assert res.status == "published" and len(res.moved) == 2
        for vp, (a, b) in {0: (0, 2), 2: (2, 0)}.items():
            ranges = await c.md.maps.lineage("a", vp)
            assert [r.pp for r in ranges] == [a, b]
            seqs = []
            for r in ranges:
                recs = await c.nodes.records(r.pp)
                end = len(recs) if r.to_offset is None else r.to_offset
                seqs += [int(x.value) for x in recs if r.from_offset <= x.offset < end and (x.queue_id, x.virtual_partition) == (qid, vp)]
            assert seqs == list(range(progress[vp])) and len(seqs) >= after[vp] + 30
