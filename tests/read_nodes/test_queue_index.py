"""QueueIndex: per-queue offsets in a shared, interleaved physical partition."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpq.read_nodes.queue_index import NO_REF, QueueIndex


def test_interleaved_multi_queue_partition() -> None:
    idx = QueueIndex(chunk_size=4)
    # pp 7 holds a busy queue 1 and a small queue 2; pp 8 holds queue 2 too
    for off in range(100):
        idx.add(7, off, 2 if off % 25 == 3 else 1, ref=off // 10)
    idx.add(8, 5, 2)
    assert idx.offsets_from(7, 2, 0, 10) == [3, 28, 53, 78]
    assert idx.entries_from(7, 2, 29, 10) == [(53, 5), (78, 7)]
    assert idx.offsets_from(7, 2, 78, 1) == [78] and idx.offsets_from(7, 2, 79, 5) == []
    assert idx.count_from(7, 2, 4) == 3 and idx.count_from(7, 1, 0) == 96
    assert idx.entries_from(8, 2, 0, 5) == [(5, NO_REF)]
    assert idx.offsets_from(7, 3, 0, 5) == [] and idx.count_from(9, 1, 0) == 0
    assert idx.end_offset(7) == 100 and idx.end_offset(8) == 6
    assert idx.queues(7) == [1, 2] and idx.partitions() == [7, 8]
    assert idx.bounds(7, 2) == (3, 78) and idx.bounds(7, 9) is None
    assert idx.entries() == 101 and idx.memory_bytes() >= 101 * 16


def test_offsets_must_increase_per_partition() -> None:
    idx = QueueIndex()
    idx.add(0, 10, 1)
    with pytest.raises(ValueError, match="increase"):
        idx.add(0, 10, 2)
    idx.add(1, 3, 1)  # other partitions are independent
    idx.advance(0, 50)
    with pytest.raises(ValueError):
        idx.add(0, 20, 1)
    idx.advance(0, 30)  # never moves back
    assert idx.end_offset(0) == 50
    for bad in [(0, -1, 1), (0, 60, -1), (-1, 0, 0)]:
        with pytest.raises(ValueError):
            idx.add(*bad)
    with pytest.raises(ValueError):
        idx.add(0, 61, 1, ref=-2)


def test_add_many_is_add_in_turn() -> None:
    one, many = QueueIndex(chunk_size=3), QueueIndex(chunk_size=3)
    entries = [(off, 1 + (off % 3 == 0), off * 7, off % 2) for off in range(5, 40)]
    for off, q, ref, ctx in entries:
        one.add(4, off, q, ref, ctx)
    many.add_many(4, entries[:10])
    many.add_many(4, [])
    many.add_many(4, entries[10:])
    for q in (1, 2):
        for ctx in (0, 1):
            assert many.entries_from(4, q, 0, 100, ctx) == one.entries_from(4, q, 0, 100, ctx)
    assert many.end_offset(4) == one.end_offset(4) == 40 and many.entries() == one.entries()
    with pytest.raises(ValueError, match="increase"):
        many.add_many(4, [(40, 1, 0, 0), (39, 1, 0, 0)])
    assert many.end_offset(4) == 41  # the entries before the bad one were added
    with pytest.raises(ValueError):
        many.add_many(-1, [(0, 1, 0, 0)])


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 8))
def test_add_columns_is_add_many(seed: int, chunk: int) -> None:
    """Runs of one queue and context at consecutive offsets (the fast path), mixed
    queues, gaps and truncations: the same index as ``add_many`` of the same rows."""
    rng = random.Random(seed)
    cols, many = QueueIndex(chunk_size=chunk), QueueIndex(chunk_size=chunk)
    off = rng.randint(0, 5)
    for _ in range(rng.randint(0, 12)):
        n = rng.randint(0, 2 * chunk + 3)
        offsets = list(range(off, off + n)) if rng.random() < 0.7 else sorted(rng.sample(range(off, off + 3 * n + 1), n))
        one_run = rng.random() < 0.6
        queue_ids = [1 if one_run else rng.choice([1, 2]) for _ in offsets]
        context_ids = [0 if one_run else rng.choice([0, 3]) for _ in offsets]
        refs = [o * 7 for o in offsets]
        cols.add_columns(0, offsets, queue_ids, refs, context_ids)
        many.add_many(0, zip(offsets, queue_ids, refs, context_ids))
        off = (offsets[-1] + 1 if offsets else off) + rng.randint(0, 2)
        if rng.random() < 0.2:
            cut = rng.randint(0, off)
            assert cols.truncate_below(0, cut) == many.truncate_below(0, cut)
    for q in (1, 2):
        for ctx in (0, 3):
            assert cols.entries_from(0, q, 0, 10_000, ctx) == many.entries_from(0, q, 0, 10_000, ctx)
            frm = rng.randint(0, off)
            assert cols.count_from(0, q, frm, ctx) == many.count_from(0, q, frm, ctx)
            assert cols.entries_from(0, q, frm, 5, ctx) == many.entries_from(0, q, frm, 5, ctx)
    assert cols.end_offset(0) == many.end_offset(0) and cols.entries() == many.entries()


def test_add_columns_refuses_offsets_below_the_end() -> None:
    idx = QueueIndex(chunk_size=4)
    idx.add_columns(0, [0, 1, 2], [1, 1, 1], [0, 0, 0], [0, 0, 0])
    with pytest.raises(ValueError, match="increase"):
        idx.add_columns(0, [2, 3], [1, 1], [0, 0], [0, 0])
    with pytest.raises(ValueError, match="increase"):
        idx.add_columns(0, [5, 4], [1, 1], [0, 0], [0, 0])
    assert idx.offsets_from(0, 1, 0, 10) == [0, 1, 2, 5]  # the entries before the bad one were added


def test_truncate_below() -> None:
    idx = QueueIndex(chunk_size=3)
    for off in range(0, 40, 2):
        idx.add(0, off, off % 4 // 2)  # queue 0 at 0,4,8..; queue 1 at 2,6,10..
    assert idx.truncate_below(0, 11) == 6
    assert idx.offsets_from(0, 0, 0, 100) == list(range(12, 40, 4))
    assert idx.offsets_from(0, 1, 0, 100) == list(range(14, 40, 4))
    assert idx.start_offset(0) == 11 and idx.count_from(0, 0, 0) == 7
    assert idx.truncate_below(0, 100) == 14
    assert idx.queues(0) == [] and idx.entries() == 0 and idx.end_offset(0) == 100
    idx.add(0, 100, 1)
    assert idx.offsets_from(0, 1, 0, 5) == [100]


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 8))
def test_matches_naive_model(seed: int, chunk: int) -> None:
    rng = random.Random(seed)
    idx = QueueIndex(chunk_size=chunk)
    model: list[tuple[int, int, int]] = []  # (offset, queue, ref)
    off = 0
    for _ in range(rng.randint(0, 120)):
        off += rng.randint(1, 3)
        q = rng.choice([0, 0, 0, 1, 2])
        model.append((off, q, off * 10))
        idx.add(0, off, q, off * 10)
        if rng.random() < 0.05:
            cut = rng.randint(0, off + 2)
            idx.truncate_below(0, cut)
            model = [m for m in model if m[0] >= cut]
            off = max(off, cut - 1)  # the index end moved up to the cut
    for _ in range(20):
        q = rng.choice([0, 1, 2, 3])
        frm = rng.randint(0, off + 2)
        lim = rng.randint(0, 10)
        want = [(o, r) for o, qq, r in model if qq == q and o >= frm]
        assert idx.entries_from(0, q, frm, lim) == want[:lim]
        assert idx.offsets_from(0, q, frm, lim) == [o for o, _ in want[:lim]]
        assert idx.count_from(0, q, frm) == len(want)
    assert idx.entries() == len(model)
