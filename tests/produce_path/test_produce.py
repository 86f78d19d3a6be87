"""The produce path (produce_path/produce.py): routing, batch building, grouping, order of
results, retries. Real Redis for the metadata (map cache, router); write nodes in memory."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpq.codec.batch_common import VALUE_JSON, VALUE_RAW
from vpq.codec.message_id import encode_message_id
from vpq.codec.records import Record, decode_batches
from vpq.common.errors import BadRequest, InternalError, NotFound, Unavailable, VpqError
from vpq.gateway.backend import ResolvedMessage
from vpq.isolation.context import IsolationContext
from vpq.metadata.map_cache import MapCache
from vpq.metadata.store import MetadataStore
from vpq.node_rpc.append_frames import ChainGate, Frame
from vpq.node_rpc.node_directory import NodeRef
from vpq.produce_path.append_accumulator import AppendAccumulator
from vpq.produce_path.outgoing import OutgoingBatch
from vpq.produce_path.produce import (
    Appender,
    AppendPolicy,
    PlainMessage,
    _chunk_columns,
    _part_columns,
    group_by_partition,
    split_chunks,
)
from vpq.virtual_partitions.hashing import key_hash, vp_of_hash
from vpq.virtual_partitions.router import ProduceRouter, RoutedBatch

# ---------------------------------------------------------------- pure helpers


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=30), st.booleans(), st.booleans(), st.integers(1, 4))
def test_chunk_columns_are_the_columns_of_each_chunk(pps: list[int], headers: bool, one_ctx: bool, cut: int) -> None:
    n = len(pps)
    batch = OutgoingBatch(
        [None if i % 3 == 0 else b"k%d" % i for i in range(n)],
        [b"v%d" % i for i in range(n)],
        bytes(i % 2 for i in range(n)),
        context=("prod", "", ""),
        headers=[b"" if i % 2 else b"\x01\x01h\x01%d" % (i % 10) for i in range(n)] if headers else None,
        header_bytes=[0 if i % 2 else 2 for i in range(n)] if headers else None,
    )
    routed = RoutedBatch(7, 1, [i * 11 for i in range(n)], [i % 5 for i in range(n)], pps, 3 if one_ctx else list(range(n)))
    groups = group_by_partition(pps)
    assert sorted(i for g in groups.values() for i in g) == list(range(n))
    chunks = [g[k : k + cut] for g in groups.values() for k in range(0, len(g), cut)]
    got = _chunk_columns(batch, routed, chunks)
    want = [_part_columns(batch, routed, chunk, False) for chunk in chunks]
    assert [[list(c) if c is not None else None for c in cols] for cols in got] == [
        [list(c) if c is not None else None for c in cols] for cols in want
    ]


def test_group_by_partition_keeps_request_order() -> None:
    assert group_by_partition([2, 0, 2, 1, 0]) == {2: [0, 2], 0: [1, 4], 1: [3]}
    assert list(group_by_partition([3, 1, 3])) == [3, 1]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 50), max_size=40), st.integers(1, 120))
def test_split_chunks_covers_in_order_within_the_limit(sizes: list[int], limit: int) -> None:
    positions = list(range(len(sizes)))
    chunks = split_chunks(positions, sizes, limit)
    assert [p for c in chunks for p in c] == positions
    for c in chunks:
        assert c
        assert len(c) == 1 or sum(sizes[p] for p in c) <= limit


# ---------------------------------------------------------------- fakes


@dataclass
class Append:
    address: str
    pp: int
    epoch: int
    records: list[Record]
    size: int


@dataclass
class MemoryWriteNodes:
    """``WriteNodeClient.append_many`` in memory: offsets per pp, injected errors, an optional
    node-side map (``placement(queue_id, vp) -> pp``) answering ``stale_map``."""

    fail: dict[int, list[VpqError]] = field(default_factory=dict)
    placement: Callable[[int, int], int] | None = None
    appends: list[Append] = field(default_factory=list)
    ends: dict[int, int] = field(default_factory=dict)
    in_flight: int = 0
    max_in_flight: int = 0

    requests: list[tuple[str, list[int]]] = field(default_factory=list)  # (address, pps) per request
    fail_request: list[VpqError] = field(default_factory=list)

    async def append_many(
        self, address: str, items: list[Frame], map_epoch: int
    ) -> list[tuple[int, int] | VpqError]:
        """As the write node: frames in order, a chain stops at its first refused frame."""
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.01)
            self.requests.append((address, [f.pp for f in items]))
            if self.fail_request:
                raise self.fail_request.pop(0)
            out: list[tuple[int, int] | VpqError] = []
            gate = ChainGate()
            for frame in items:
                try:
                    refused = gate.refused(frame)
                    if refused is not None:
                        raise refused
                    out.append(self._append_one(address, frame.pp, frame.batch, map_epoch))
                except VpqError as err:
                    gate.record(frame, err)
                    out.append(err)
            return out
        finally:
            self.in_flight -= 1

    def _append_one(self, address: str, pp: int, batch: bytes, map_epoch: int) -> tuple[int, int]:
        if self.fail.get(pp):
            raise self.fail[pp].pop(0)
        records = decode_batches(batch)
        if self.placement is not None and any(self.placement(r.queue_id, r.virtual_partition) != pp for r in records):
            raise Unavailable("stale_map", "moved", epoch=99)
        base = self.ends.get(pp, 0)
        self.ends[pp] = base + len(records)
        self.appends.append(Append(address, pp, map_epoch, records, len(batch)))
        return base, base + len(records) - 1

    def stored(self, pp: int) -> list[Record]:
        return [r for a in self.appends if a.pp == pp for r in a.records]


@dataclass
class Locator:
    """Partition ``pp`` lives on node ``node-{pp}``, or on ``node-{pp % nodes}`` when
    ``nodes`` is set."""

    invalidated: list[int] = field(default_factory=list)
    nodes: int = 0

    async def owner(self, pp: int) -> NodeRef:
        n = pp % self.nodes if self.nodes else pp
        return NodeRef(f"w{n}", f"node-{n}")

    def invalidate(self, pp: int) -> None:
        self.invalidated.append(pp)


async def place(md: MetadataStore, name: str, placement: list[int]) -> int:
    """Register ``name`` and publish it with ``placement``; returns the queue id."""
    rec, _ = await md.queues.create_or_update(name, {"virtual_partitions": len(placement)})

    def fn(m: dict[str, Any]) -> dict[str, Any]:
        m["queues"][name] = {"virtual_partitions": len(placement), "placement": placement}
        return m

    await md.maps.update(fn)
    return rec.id


@dataclass
class Rig:
    md: MetadataStore
    cache: MapCache
    nodes: MemoryWriteNodes
    locator: Locator
    appender: Appender


@pytest.fixture
async def rig(md: MetadataStore) -> AsyncIterator[Callable[..., Any]]:
    caches: list[MapCache] = []

    async def make(policy: AppendPolicy | None = None) -> Rig:
        # the listener is never started: the cache changes only when the appender refreshes it
        cache = MapCache(md.queues, md.maps, md.event_listener())
        await cache.start()
        caches.append(cache)
        nodes, locator = MemoryWriteNodes(), Locator()
        policy = policy or AppendPolicy(budget_s=2.0)
        parts = AppendAccumulator(nodes, max_batch_bytes=policy.max_batch_bytes)
        appender = Appender(cache, ProduceRouter(cache, md.contexts), locator, parts, policy, clock_ms=lambda: 5000)
        return Rig(md, cache, nodes, locator, appender)

    yield make
    for c in caches:
        await c.stop()


def msg(key: str | None, value: Any = None, raw: bytes | None = None, **kw: Any) -> ResolvedMessage:
    if raw is not None:
        return ResolvedMessage(key, raw, False, kw.pop("headers", {}), IsolationContext(**kw))
    return ResolvedMessage(key, orjson.dumps(value), True, kw.pop("headers", {}), IsolationContext(**kw))


# ---------------------------------------------------------------- behaviour


async def test_one_batch_per_partition_results_in_request_order(md, rig) -> None:
    qid = await place(md, "orders", [0, 1, 2, 3])
    r = await rig()
    keys = [f"k{i}" for i in range(40)]
    results = (await r.appender.append("orders", [msg(k, {"n": i}) for i, k in enumerate(keys)])).dicts()
    assert len(r.nodes.appends) == len({vp_of_hash(key_hash(k), 4) for k in keys})  # one append per pp
    assert r.nodes.max_in_flight > 1  # the partitions were appended in parallel
    seen: dict[str, dict[str, Any]] = {}
    for i, (k, res) in enumerate(zip(keys, results, strict=True)):
        vp = vp_of_hash(key_hash(k), 4)
        assert res["virtual_partition"] == vp and res["partition"] == vp  # placement[vp] == vp
        assert res["id"] == encode_message_id(res["partition"], res["offset"])
        rec = r.nodes.stored(res["partition"])[res["offset"]]
        assert rec.value == orjson.dumps({"n": i}) and rec.key == k.encode()
        assert (rec.queue_id, rec.virtual_partition, rec.key_hash) == (qid, vp, key_hash(k))
        assert rec.value_encoding == VALUE_JSON and rec.timestamp_ms == 5000
        seen[res["id"]] = res
    assert len(seen) == len(keys)
    # within a partition, request order is offset order
    for pp in range(4):
        offsets = [res["offset"] for res in results if res["partition"] == pp]
        assert offsets == sorted(offsets)
    assert all(a.epoch == r.cache.epoch for a in r.nodes.appends)


async def test_fields_of_records(md, rig) -> None:
    await place(md, "q", [0])
    r = await rig()
    ctx_id = await md.contexts.intern("test", "eu", "feat-a")
    plain = PlainMessage(b"\x00\x01", headers={"x-original-id": "0-5", "bin": b"\xff"}, context=("prod", "", ""), timestamp_ms=42)
    await r.appender.append("q", [msg("a", raw=b"bytes", env="test", set="eu", lane="feat-a", headers={"h": "v"}), plain])
    first, second = r.nodes.stored(0)
    assert first.value_encoding == VALUE_RAW and first.value == b"bytes"
    assert first.context_id == ctx_id and first.headers == (("h", b"v"),)
    assert second.key is None and second.timestamp_ms == 42
    assert second.headers == (("x-original-id", b"0-5"), ("bin", b"\xff"))


async def test_keyless_messages_spread_round_robin(md, rig) -> None:
    await place(md, "spread", [0, 1, 0, 1])
    r = await rig()
    results = (await r.appender.append("spread", [msg(None, i) for i in range(8)])).dicts()
    vps = [res["virtual_partition"] for res in results]
    assert sorted(vps) == [0, 0, 1, 1, 2, 2, 3, 3]
    hashes = [r.nodes.stored(res["partition"])[res["offset"]].key_hash for res in results]
    assert [(h - hashes[0]) % (1 << 32) for h in hashes] == list(range(8))  # the spreader's hashes
    assert all(vp_of_hash(h, 4) == vp for h, vp in zip(hashes, vps, strict=True))


async def test_large_partition_batches_are_split_in_order(md, rig) -> None:
    await place(md, "big", [0])
    r = await rig(AppendPolicy(max_batch_bytes=2000))
    results = (await r.appender.append("big", [msg("same-key", raw=bytes([i]) * 300) for i in range(10)])).dicts()
    assert len(r.nodes.appends) >= 2
    assert all(a.size <= 2000 for a in r.nodes.appends)
    assert [res["offset"] for res in results] == list(range(10))
    assert [rec.value[0] for rec in r.nodes.stored(0)] == list(range(10))


async def test_stale_map_refreshes_the_cache_and_reroutes(md, rig) -> None:
    qid = await place(md, "moving", [0, 0])
    r = await rig()
    await r.cache.refresh(["moving"], sync=False)  # the queue is in use here
    old_epoch = r.cache.epoch
    # another process moves vp 1 to pp 5; this cache has not heard about it yet
    await md.maps.update(lambda m: {"queues": {**m["queues"], "moving": {"virtual_partitions": 2, "placement": [0, 5]}}})
    r.nodes.placement = lambda queue_id, vp: [0, 5][vp] if queue_id == qid else -1
    keys = [f"k{i}" for i in range(20)]
    results = (await r.appender.append("moving", [msg(k, 1) for k in keys])).dicts()
    assert r.cache.epoch == old_epoch + 1
    for k, res in zip(keys, results, strict=True):
        assert res["partition"] == [0, 5][vp_of_hash(key_hash(k), 2)]
    assert r.appender.stats.retries.get("stale_map", 0) >= 1


async def test_not_owner_forgets_the_owner_and_retries(md, rig) -> None:
    await place(md, "q", [0, 1])
    r = await rig()
    r.nodes.fail[1] = [Unavailable("not_owner", "moved away"), Unavailable("node_unreachable", "down")]
    results = (await r.appender.append("q", [msg(f"k{i}", i) for i in range(10)])).dicts()
    assert r.locator.invalidated == [1, 1]
    assert len(results) == 10 and all(res is not None for res in results)
    assert len(r.nodes.stored(0)) + len(r.nodes.stored(1)) == 10  # nothing duplicated


async def test_gives_up_with_retryable_503_after_the_budget(md, rig) -> None:
    await place(md, "q", [0, 1])
    r = await rig(AppendPolicy(budget_s=0.15, backoff_initial_s=0.01))
    r.nodes.fail[1] = [Unavailable("partition_offline", "disk") for _ in range(1000)]
    keys = [f"k{i}" for i in range(10)]
    with pytest.raises(Unavailable) as info:
        await r.appender.append("q", [msg(k, 1) for k in keys])
    assert info.value.code == "produce_unavailable" and info.value.details["cause"] == "partition_offline"
    assert info.value.headers()["Retry-After"] == "1"
    # pp 0 was appended exactly once, never again while pp 1 was retried
    assert len([a for a in r.nodes.appends if a.pp == 0]) == 1
    assert r.appender.stats.failures == 1


async def test_non_retryable_node_answer_is_an_internal_error(md, rig) -> None:
    await place(md, "q", [0])
    r = await rig()
    r.nodes.fail[0] = [BadRequest("corrupt_batch", "crc")]
    with pytest.raises(InternalError) as info:
        await r.appender.append("q", [msg("k", 1)])
    assert info.value.code == "write_node_rejected" and "corrupt_batch" in info.value.message


async def test_unknown_queue_is_looked_up_once_then_404(md, rig) -> None:
    r = await rig()
    with pytest.raises(NotFound) as info:
        await r.appender.append("ghost", [msg("k", 1)])
    assert info.value.code == "queue_not_found"
    await place(md, "late", [0])  # created after the cache loaded
    results = (await r.appender.append("late", [msg("k", 1)])).dicts()
    assert results[0]["partition"] == 0


async def test_registered_but_unplaced_queue_is_retried_until_placed(md, rig) -> None:
    await md.queues.create_or_update("pending", {"virtual_partitions": 1})
    r = await rig(AppendPolicy(budget_s=3.0, backoff_initial_s=0.02))

    async def place_later() -> None:
        await asyncio.sleep(0.1)
        await md.maps.update(lambda m: {"queues": {**m["queues"], "pending": {"virtual_partitions": 1, "placement": [2]}}})

    placer = asyncio.create_task(place_later())
    results = (await r.appender.append("pending", [msg("k", 1)])).dicts()
    await placer
    assert results[0]["partition"] == 2


async def test_hot_path_makes_no_redis_round_trip(md, rig) -> None:
    await place(md, "hot", [0, 1])
    r = await rig()
    await r.appender.append("hot", [msg("warm", 1, env="test")])  # interns the context once

    async def processed() -> int:
        return int((await md.client.info("stats"))["total_commands_processed"])

    a = await processed()
    b = await processed()
    per_info = b - a
    await r.appender.append("hot", [msg(f"k{i}", i, env="test") for i in range(50)] + [msg(None, 0, env="test")])
    c = await processed()
    assert c - b == per_info


# ------------------------------------------------- one request per write node


async def test_partitions_of_one_node_share_one_request(md, rig) -> None:
    await place(md, "q", list(range(8)))
    r = await rig()
    r.locator.nodes = 2  # pps 0,2,4,6 on node-0 and 1,3,5,7 on node-1
    keys = [f"k{i}" for i in range(200)]
    results = (await r.appender.append("q", [msg(k, i) for i, k in enumerate(keys)])).dicts()
    assert sorted(addr for addr, _ in r.nodes.requests) == ["node-0", "node-1"]
    for addr, pps in r.nodes.requests:
        assert sorted(pps) == [pp for pp in range(8) if f"node-{pp % 2}" == addr]
    assert r.nodes.max_in_flight == 2  # the two nodes were called concurrently
    for i, res in enumerate(results):
        assert r.nodes.stored(res["partition"])[res["offset"]].value == orjson.dumps(i)


async def test_a_refused_partition_does_not_fail_its_neighbours_in_the_request(md, rig) -> None:
    await place(md, "q", [0, 1, 2, 3])
    r = await rig()
    r.locator.nodes = 1
    r.nodes.fail[2] = [Unavailable("not_owner", "moved away")]
    results = (await r.appender.append("q", [msg(f"k{i}", i) for i in range(40)])).dicts()
    assert r.locator.invalidated == [2]
    assert len(r.nodes.requests) == 2
    assert sorted(r.nodes.requests[0][1]) == [0, 1, 2, 3] and r.nodes.requests[1][1] == [2]  # only pp 2 again
    assert sum(len(r.nodes.stored(pp)) for pp in range(4)) == 40  # nothing lost or duplicated
    assert {res["id"] for res in results} == {encode_message_id(res["partition"], res["offset"]) for res in results}


async def test_a_failed_request_retries_every_partition_it_carried(md, rig) -> None:
    await place(md, "q", [0, 1, 2, 3])
    r = await rig()
    r.locator.nodes = 2
    r.nodes.fail_request.append(Unavailable("node_unreachable", "reset"))
    results = (await r.appender.append("q", [msg(f"k{i}", i) for i in range(40)])).dicts()
    failed_node = r.nodes.requests[0][1]
    assert sorted(r.locator.invalidated) == sorted(failed_node)  # every pp of the failed request
    assert len(results) == 40 and sum(len(r.nodes.stored(pp)) for pp in range(4)) == 40


async def test_a_partition_past_the_batch_limit_is_one_chain_and_keeps_request_order(md, rig) -> None:
    await place(md, "q", [0, 1])
    r = await rig(AppendPolicy(budget_s=2.0, max_batch_bytes=1500))
    r.locator.nodes = 1
    r.nodes.fail[1] = [VpqError.from_dict({}, 503)]  # pp 1's first batch is refused: its later batches must wait
    values = [b"x" * 400 + str(i).encode() for i in range(30)]
    results = (await r.appender.append("q", [msg("same-key" if i % 2 else f"k{i}", raw=v) for i, v in enumerate(values)])).dicts()
    first = r.nodes.requests[0][1]
    assert len(first) > 2 and len(set(first)) == 2  # several batches per partition in one request
    assert r.nodes.max_in_flight == 1  # one node: its requests never overlap
    assert all(a.size <= 1500 for a in r.nodes.appends)
    for pp in (0, 1):  # each partition holds its messages in request order, once
        stored = [rec.value for rec in r.nodes.stored(pp)]
        assert stored == sorted(stored, key=values.index) and len(stored) == len(set(stored))
    assert sum(len(r.nodes.stored(pp)) for pp in (0, 1)) == 30
    assert all(r.nodes.stored(res["partition"])[res["offset"]].value == values[i] for i, res in enumerate(results))
