"""``OffsetSet`` behaves as a ``SortedList`` of distinct ints for what the ack tracker
uses, whatever the operations (a property test against the reference), in 8 bytes a
value."""

from __future__ import annotations

import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st
from sortedcontainers import SortedList

from vpq.read_nodes import offset_set
from vpq.read_nodes.offset_set import OffsetSet

ops = st.lists(st.tuples(st.sampled_from(["add", "discard"]), st.integers(0, 300)), max_size=400)


@settings(max_examples=300, deadline=None)
@given(ops, st.integers(2, 8))
def test_same_as_a_sorted_list(operations: list[tuple[str, int]], chunk: int) -> None:
    saved = offset_set.CHUNK
    offset_set.CHUNK = chunk  # small chunks: splits and empty chunks happen often
    try:
        s, ref = OffsetSet(), SortedList()
        for op, v in operations:
            if op == "add":
                s.add(v)
                if v not in ref:
                    ref.add(v)
            else:
                s.discard(v)
                ref.discard(v)
            assert len(s) == len(ref) and bool(s) == bool(ref)
        assert list(s) == list(ref)
        for v in range(-1, 302):
            assert (v in s) == (v in ref)
        if ref:
            assert s[0] == ref[0] and s[-1] == ref[-1] and s[len(ref) // 2] == ref[len(ref) // 2]
        for lo, hi in ((None, 150), (100, None), (50, 200), (None, None)):
            for inc in ((True, True), (True, False), (False, True), (False, False)):
                assert list(s.irange(lo, hi, inc)) == list(ref.irange(lo, hi, inc))
    finally:
        offset_set.CHUNK = saved


def test_offsets_take_about_8_bytes_each() -> None:
    # 200,000 offsets (195 chunks) show the per-offset cost as a million would; tracing
    # every allocation of a million took 25 to 50 s of the suite
    tracemalloc.start()
    s = OffsetSet(range(0, 4_000_000, 20))  # in order, as deferrals mostly come
    used, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(s) == 200_000 and s[0] == 0 and 3_999_980 in s
    assert used < 12 * 200_000
