"""``PendingOffsets`` behaves as a ``SortedList`` of distinct ints for what the ack
tracker uses, whatever the operations (a property test against the reference)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sortedcontainers import SortedList

from vpq.read_nodes import pending_offsets
from vpq.read_nodes.pending_offsets import PendingOffsets

ops = st.lists(
    st.tuples(st.sampled_from(["add", "discard", "discard_many", "first", "last"]), st.integers(0, 300)),
    max_size=400,
)


@settings(max_examples=300, deadline=None)
@given(ops, st.integers(0, 4))
def test_same_as_a_sorted_list(operations: list[tuple[str, int]], slack: int) -> None:
    saved = pending_offsets.REBUILD_SLACK
    pending_offsets.REBUILD_SLACK = slack  # small slack: rebuilds happen often
    try:
        s, ref = PendingOffsets(), SortedList()
        for op, v in operations:
            if op == "add":
                s.add(v)
                if v not in ref:
                    ref.add(v)
            elif op == "discard":
                s.discard(v)
                ref.discard(v)
            elif op == "discard_many":
                many = [v, v + 1, v + 7, v]
                s.discard_many(many)
                for x in set(many):
                    ref.discard(x)
            elif ref:  # the ends, asked for in between (they drop removed offsets)
                assert s[0 if op == "first" else -1] == ref[0 if op == "first" else -1]
            assert len(s) == len(ref) and bool(s) == bool(ref)
        assert list(s) == list(ref)
        for v in range(-1, 310):
            assert (v in s) == (v in ref)
        if ref:
            assert s[0] == ref[0] and s[-1] == ref[-1]
        for lo, hi in ((None, 150), (100, None), (50, 200), (None, None)):
            for inc in ((True, True), (True, False), (False, True), (False, False)):
                assert list(s.irange(lo, hi, inc)) == list(ref.irange(lo, hi, inc))
    finally:
        pending_offsets.REBUILD_SLACK = saved


def test_removed_offsets_do_not_pile_up() -> None:
    s = PendingOffsets(range(10_000))
    for v in range(0, 10_000, 2):  # acks spread over the stream, not from its oldest end
        s.discard(v)
    assert len(s) == 5_000 and s[0] == 1 and s[-1] == 9_999
    assert len(s._heap) <= 2 * len(s) + pending_offsets.REBUILD_SLACK  # noqa: SLF001 - the bound itself


def test_only_the_ends_can_be_indexed() -> None:
    s = PendingOffsets([3, 1, 2])
    assert (s[0], s[-1]) == (1, 3)
    with pytest.raises(IndexError):
        s[1]  # noqa: B018
    with pytest.raises(IndexError):
        PendingOffsets()[0]  # noqa: B018
