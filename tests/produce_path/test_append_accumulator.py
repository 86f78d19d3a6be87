"""``produce_path.append_accumulator``: natural batching of appends per write node, one
magic-2 batch per partition per request (a fake client that records each request, decodes
its batches and answers when the test says so)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpq.codec.columnar import ColumnarRecords, build_columnar_batch
from vpq.codec.records import BatchView
from vpq.common.errors import Unavailable, VpqError
from vpq.node_rpc.append_frames import Frame
from vpq.produce_path.append_accumulator import AppendAccumulator, PartitionPart, build_frames, merge_parts, part_size


class GatedClient:
    """Answers a request only when ``release()`` is called; frame i of request n gets base
    offset ``1000 * n + 100 * i``."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, list[Frame], int]] = []
        self._gates: list[asyncio.Future[VpqError | list[VpqError | None] | None]] = []

    async def append_many(self, address: str, items: Sequence[Frame], map_epoch: int) -> list[tuple[int, int] | VpqError]:
        n = len(self.requests)
        self.requests.append((address, list(items), map_epoch))
        gate: asyncio.Future[VpqError | list[VpqError | None] | None] = asyncio.get_running_loop().create_future()
        self._gates.append(gate)
        outcome = await gate
        if isinstance(outcome, VpqError):
            raise outcome
        out: list[tuple[int, int] | VpqError] = []
        for i, frame in enumerate(items):
            err = outcome[i] if isinstance(outcome, list) else None
            count = BatchView(frame.batch).record_count
            out.append(err if err is not None else (1000 * n + 100 * i, 1000 * n + 100 * i + count - 1))
        return out

    def release(self, n: int, outcome: VpqError | list[VpqError | None] | None = None) -> None:
        self._gates[n].set_result(outcome)

    def values(self, n: int) -> list[tuple[int, list[bytes]]]:
        """(pp, values) of each frame of request ``n``."""
        return [(f.pp, [r.value for r in BatchView(f.batch).records()]) for f in self.requests[n][1]]


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def cols(*values: bytes, queue_id: int = 7) -> ColumnarRecords:
    n = len(values)
    return ColumnarRecords([queue_id] * n, [0] * n, [1] * n, [2] * n, [b"k"] * n, list(values), b"\x01" * n)


def part(pp: int, *values: bytes, ts: int = 1000) -> PartitionPart:
    c = cols(*values)
    return PartitionPart(pp, ts, c, part_size(c))


async def test_an_idle_node_gets_the_call_at_once() -> None:
    client = GatedClient()
    acc = AppendAccumulator(client)
    call = asyncio.create_task(acc.append("w0", [part(0, b"a1", b"a2"), part(1, b"a3")], 3))
    await settle()
    assert [(a, len(f), e) for a, f, e in client.requests] == [("w0", 2, 3)]
    assert client.values(0) == [(0, [b"a1", b"a2"]), (1, [b"a3"])]
    client.release(0)
    assert await call == [(0, 1), (100, 100)]
    await acc.stop()


async def test_waiting_calls_leave_together_in_one_batch_per_partition() -> None:
    client = GatedClient()
    acc = AppendAccumulator(client, max_in_flight=1)
    first = asyncio.create_task(acc.append("w0", [part(0, b"a")], 1))
    await settle()
    waiting = [
        asyncio.create_task(acc.append("w0", [part(0, b"b1", b"b2"), part(1, b"b3")], 2)),
        asyncio.create_task(acc.append("w0", [part(0, b"c1")], 5)),
        asyncio.create_task(acc.append("w0", [part(1, b"d1"), part(2, b"d2")], 4)),
    ]
    await settle()
    assert len(client.requests) == 1  # they wait for the request in flight
    client.release(0)
    await settle()
    assert await first == [(0, 0)]
    assert len(client.requests) == 2
    _, merged, epoch = client.requests[1]
    assert epoch == 5  # the highest epoch of the merged calls
    # one batch per partition, each caller's records together and in call order
    assert client.values(1) == [(0, [b"b1", b"b2", b"c1"]), (1, [b"b3", b"d1"]), (2, [b"d2"])]
    assert [f.continues for f in merged] == [False, False, False]
    client.release(1)
    # each caller gets its own records' offsets inside the shared batches
    assert [await w for w in waiting] == [[(1000, 1001), (1100, 1100)], [(1002, 1002)], [(1101, 1101), (1200, 1200)]]
    assert acc.stats.requests == 2 and acc.stats.merged_calls == 3 and acc.stats.batches == 4
    await acc.stop()


async def test_a_partition_past_the_batch_limit_is_one_chain_and_a_refusal_fails_its_parts() -> None:
    client = GatedClient()
    acc = AppendAccumulator(client, max_in_flight=1, max_batch_bytes=200)
    first = asyncio.create_task(acc.append("w0", [part(9, b"a")], 1))
    await settle()
    waiting = [asyncio.create_task(acc.append("w0", [part(0, bytes([65 + i]) * 60)], 1)) for i in range(4)]
    await settle()
    client.release(0)
    await first
    await settle()
    frames = client.requests[1][1]
    assert len(frames) > 1 and {f.pp for f in frames} == {0}
    assert [f.continues for f in frames] == [False] + [True] * (len(frames) - 1)
    assert all(len(f.batch) <= 200 for f in frames)
    refusal = Unavailable("stale_map", "moved")
    client.release(1, [None, refusal] + [refusal] * (len(frames) - 2))  # the node refuses the rest of the chain
    answers = [await w for w in waiting]
    assert isinstance(answers[-1][0], VpqError) and not isinstance(answers[0][0], VpqError)
    await acc.stop()


async def test_a_failed_merged_request_fails_every_caller_in_it() -> None:
    client = GatedClient()
    acc = AppendAccumulator(client, max_in_flight=1)
    first = asyncio.create_task(acc.append("w0", [part(0, b"a")], 1))
    await settle()
    waiting = [asyncio.create_task(acc.append("w0", [part(1, t)], 1)) for t in (b"b", b"c")]
    await settle()
    client.release(0)
    await first
    await settle()
    client.release(1, Unavailable("node_unreachable", "reset"))
    for w in waiting:
        with pytest.raises(Unavailable, match="reset"):
            await w
    nxt = asyncio.create_task(acc.append("w0", [part(0, b"e")], 1))  # the node is free again
    await settle()
    client.release(2)
    assert await nxt == [(2000, 2000)]
    await acc.stop()


async def test_a_cancelled_waiter_is_not_sent_and_other_nodes_do_not_wait() -> None:
    client = GatedClient()
    acc = AppendAccumulator(client, max_in_flight=1)
    first = asyncio.create_task(acc.append("w0", [part(0, b"a")], 1))
    await settle()
    gone = asyncio.create_task(acc.append("w0", [part(0, b"gone")], 1))
    stays = asyncio.create_task(acc.append("w0", [part(0, b"stays")], 1))
    other = asyncio.create_task(acc.append("w1", [part(3, b"x")], 1))
    await settle()
    assert [a for a, _, _ in client.requests] == ["w0", "w1"]  # w1 is not behind w0
    gone.cancel()
    await settle()
    client.release(0)
    await first
    await settle()
    assert client.values(2) == [(0, [b"stays"])]
    client.release(1)
    client.release(2)
    assert await stays == [(2000, 2000)] and await other == [(1000, 1000)]
    await acc.stop()


async def test_waiting_calls_are_cut_at_the_request_size_limit() -> None:
    client = GatedClient()
    acc = AppendAccumulator(client, max_in_flight=1, max_request_bytes=150)
    first = asyncio.create_task(acc.append("w0", [part(0, b"a")], 1))
    await settle()
    waiting = [asyncio.create_task(acc.append("w0", [part(0, b"x" * 40)], 1)) for _ in range(3)]
    await settle()
    client.release(0)
    await first
    await settle()
    assert client.values(1) == [(0, [b"x" * 40])]  # about 130 bytes each: one fits in 150
    for n in (1, 2, 3):
        client.release(n)
        await settle()
    assert [await w for w in waiting] == [[(1000, 1000)], [(2000, 2000)], [(3000, 3000)]]
    await acc.stop()


async def test_waiting_calls_that_reach_the_bulk_bytes_leave_beside_the_one_in_flight() -> None:
    client = GatedClient()
    acc = AppendAccumulator(client, max_in_flight=1, bulk_in_flight=2, bulk_bytes=200)
    first = asyncio.create_task(acc.append("w0", [part(0, b"a")], 1))
    await settle()
    small = asyncio.create_task(acc.append("w0", [part(0, b"s")], 1))
    await settle()
    assert len(client.requests) == 1  # under the bulk bytes: it waits, as without the rule
    big = asyncio.create_task(acc.append("w0", [part(1, b"x" * 150)], 2))
    await settle()
    assert len(client.requests) == 2  # the waiting calls reach 200 bytes: they leave together
    assert client.values(1) == [(0, [b"s"]), (1, [b"x" * 150])] and client.requests[1][2] == 2
    third = asyncio.create_task(acc.append("w0", [part(2, b"y" * 250)], 1))
    await settle()
    assert len(client.requests) == 2  # two out: the bulk limit
    client.release(0)
    await settle()
    assert await first == [(0, 0)]
    assert client.values(2) == [(2, [b"y" * 250])]  # one out and 250 bytes waiting: it leaves
    client.release(2)
    client.release(1)
    assert await small == [(1000, 1000)] and await big == [(1100, 1100)] and await third == [(2000, 2000)]
    assert acc.stats.bulk_requests == 2 and acc.stats.requests == 3
    await acc.stop()
    assert not acc._tasks  # noqa: SLF001


async def test_small_calls_never_exceed_max_in_flight_under_the_bulk_rule() -> None:
    client = GatedClient()
    acc = AppendAccumulator(client, max_in_flight=1, bulk_in_flight=4, bulk_bytes=10_000)
    first = asyncio.create_task(acc.append("w0", [part(0, b"a")], 1))
    await settle()
    waiting = [asyncio.create_task(acc.append("w0", [part(0, b"b%d" % i)], 1)) for i in range(20)]
    await settle()
    assert len(client.requests) == 1
    client.release(0)
    await settle()
    await first
    assert len(client.requests) == 2 and len(client.values(1)[0][1]) == 20  # one merged request
    client.release(1)
    assert [await w for w in waiting] == [[(1000 + i, 1000 + i)] for i in range(20)]
    assert acc.stats.bulk_requests == 0
    await acc.stop()


async def test_a_cancelled_waiter_no_longer_counts_toward_the_bulk_bytes() -> None:
    client = GatedClient()
    acc = AppendAccumulator(client, max_in_flight=1, bulk_in_flight=2, bulk_bytes=300)
    first = asyncio.create_task(acc.append("w0", [part(0, b"a")], 1))
    await settle()
    gone = asyncio.create_task(acc.append("w0", [part(0, b"g" * 120)], 1))
    await settle()
    gone.cancel()
    await settle()
    late = asyncio.create_task(acc.append("w0", [part(0, b"l" * 40)], 1))
    await settle()
    assert len(client.requests) == 1  # 129 bytes waiting; with the cancelled call's 209, 300 was reached
    client.release(0)
    await first
    await settle()
    assert client.values(1) == [(0, [b"l" * 40])]
    client.release(1)
    assert await late == [(1000, 1000)]
    await acc.stop()


async def test_stop_fails_the_waiting_calls_and_leaves_no_task() -> None:
    client = GatedClient()
    acc = AppendAccumulator(client, max_in_flight=1)
    first = asyncio.create_task(acc.append("w0", [part(0, b"a")], 1))
    await settle()
    waiting = asyncio.create_task(acc.append("w0", [part(0, b"b")], 1))
    await settle()
    await acc.stop()
    with pytest.raises(Unavailable) as info:
        await waiting
    assert info.value.retryable
    client.release(0)
    await first  # the direct call belongs to its caller and completes
    assert len(client.requests) == 1
    with pytest.raises(Unavailable):
        await acc.append("w0", [part(0, b"c")], 1)


def make_part(pp: int, values: list[bytes], ts: int, delta: int, headers: bool) -> PartitionPart:
    n = len(values)
    c = ColumnarRecords(
        queue_ids=[pp + 1] * n,
        vps=list(range(n)),
        key_hashes=[5] * n,
        context_ids=[pp] * n,
        keys=[None if i % 3 == 0 else b"k%d" % i for i in range(n)],
        values=values,
        encodings=b"\x00" * n,
        headers=[b"\x01\x01h\x01v" if i % 2 else b"" for i in range(n)] if headers else None,
        ts_deltas=[delta * i for i in range(n)] if delta else None,
    )
    return PartitionPart(pp, ts, c, part_size(c))


parts_st = st.lists(
    st.builds(
        make_part,
        st.integers(0, 3),
        st.lists(st.binary(max_size=30), min_size=1, max_size=5),
        st.integers(1_000, 2_000),
        st.integers(-5, 5),
        st.booleans(),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(st.lists(parts_st, min_size=1, max_size=4), st.integers(150, 2000))
def test_merged_batches_hold_each_part_exactly_in_its_slot(calls: list[list[PartitionPart]], limit: int) -> None:
    frames, slots = build_frames(calls, limit)
    for call, call_slots in zip(calls, slots, strict=True):
        for p, slot in zip(call, call_slots, strict=True):
            frame = frames[slot.frame]
            assert frame.pp == p.pp
            records = BatchView(frame.batch).records()[slot.start : slot.start + slot.count]
            alone = BatchView(build_columnar_batch(0, p.timestamp_ms, p.cols)).records()
            strip = lambda rs: [(r.value, r.key, r.queue_id, r.virtual_partition, r.headers, r.timestamp_ms) for r in rs]  # noqa: E731
            assert strip(records) == strip(alone)
    for pp in {f.pp for f in frames}:  # one chain per partition, parts in call order
        chain = [f for f in frames if f.pp == pp]
        assert [f.continues for f in chain] == [False] + [True] * (len(chain) - 1)


def test_merge_parts_of_one_part_is_the_part_itself() -> None:
    p = part(0, b"a", b"b")
    assert merge_parts([p]) == (p.timestamp_ms, p.cols)


def test_a_deduplicated_frame_answers_each_merged_part_its_own_records() -> None:
    from vpq.node_rpc.append_frames import Deduplicated
    from vpq.produce_path.append_accumulator import answers_for

    calls = [[part(0, b"a1", b"a2"), part(1, b"x")], [part(0, b"b1", b"b2", b"b3")]]
    frames, slots = build_frames(calls, 1 << 20)
    assert [f.pp for f in frames] == [0, 1]
    # partition 0's frame: records a1 a2 b1 b2 b3; a2 and b3 were duplicates of stored ones
    answers = [Deduplicated([10, 3, 11, 12, 4], [1, 5, 1, 2, 6]), (7, 7)]
    assert answers_for(slots[0], answers) == [Deduplicated([10, 3], [1, 5]), (7, 7)]
    assert answers_for(slots[1], answers) == [Deduplicated([11, 12, 4], [1, 2, 6])]
