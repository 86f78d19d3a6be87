"""Pure cut-over planning (``spark_rebalance.cutover``) and the fence value type."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpq.metadata.fences import Fence, FencedQueue, fence_of
from vpq.metadata.maps import LineageRange as R
from vpq.spark_rebalance.cutover import (
    LineageState,
    apply_splits,
    classify,
    descendants,
    final_queues,
    lineage_fill_steps,
    rebase_moves,
    resolve_lineage,
)
from vpq.spark_rebalance.plan_model import Split
from vpq.virtual_partitions.placement import VpMove

QUEUES = {
    "a": {"virtual_partitions": 2, "placement": [0, 1]},
    "b": {"virtual_partitions": 4, "placement": [0, 1, 2, 3]},
}


def test_apply_splits_doubles_only_what_is_still_needed() -> None:
    before = copy.deepcopy(QUEUES)
    out, steps = apply_splits(QUEUES, [Split("a", 2, 8), Split("b", 2, 4), Split("gone", 1, 2)])
    assert QUEUES == before  # not mutated
    assert out["a"] == {"virtual_partitions": 8, "placement": [0, 1] * 4}
    assert out["b"] == QUEUES["b"]
    assert [(s.queue, s.old_vs, s.to_vps) for s in steps] == [("a", (2, 4), 8)]


def test_rebase_moves_gives_reasons() -> None:
    moves = [VpMove("a", 0, 0, 2), VpMove("a", 1, 0, 2), VpMove("b", 0, 0, 1), VpMove("c", 0, 0, 1)]
    kept, skipped = rebase_moves(QUEUES, moves, {"a": 2, "b": 8, "c": 1})
    assert kept == [VpMove("a", 0, 0, 2)]
    assert [(m.queue, m.vp) for m, _ in skipped] == [("a", 1), ("b", 0), ("c", 0)]
    assert "now on pp 1" in skipped[0][1] and "4 vps, the plan 8" in skipped[1][1] and "no longer" in skipped[2][1]


def test_descendants() -> None:
    assert list(descendants(1, 4, 16)) == [1, 5, 9, 13]
    assert list(descendants(1, 4, 4)) == [1]
    assert list(descendants(1, 4, 2)) == []


@settings(max_examples=100, deadline=None)
@given(
    fenced_log=st.integers(0, 3), grow=st.integers(0, 2), data=st.data(),
)
def test_final_queues_moves_exactly_the_moved_descendants(fenced_log: int, grow: int, data: st.DataObject) -> None:
    v_f = 1 << fenced_log
    v_now = v_f << grow
    placement = data.draw(st.lists(st.integers(0, 3), min_size=v_f, max_size=v_f))
    queues = {"q": {"virtual_partitions": v_now, "placement": placement * (v_now // v_f)}, "other": QUEUES["a"]}
    roots = data.draw(st.sets(st.integers(0, v_f - 1)))
    fence = fence_of("f", 5, 1000, {"q": v_f}, [("q", r, placement[r], (placement[r] + 1) % 4) for r in roots])
    moved = data.draw(st.sets(st.integers(0, v_now - 1)))
    before = copy.deepcopy(queues)
    out = final_queues(queues, fence, {("q", vp) for vp in moved})
    assert queues == before and out["other"] == queues["other"]
    for vp in range(v_now):
        root = vp % v_f
        expect = (placement[root] + 1) % 4 if root in roots and vp in moved else placement[root]
        assert out["q"]["placement"][vp] == expect
        assert fence.fenced("q", vp) == (root in roots)


@settings(max_examples=100, deadline=None)
@given(v0_log=st.integers(0, 3), grow=st.integers(0, 3), data=st.data())
def test_lineage_fill_steps_complete_a_split_queue(v0_log: int, grow: int, data: st.DataObject) -> None:
    v0, v = 1 << v0_log, 1 << (v0_log + grow)
    copied = data.draw(st.sets(st.integers(v0, max(v0, v - 1)))) if v > v0 else set()
    present = set(range(v0)) | {j for j in copied if j < v}
    have = set(present)
    for w in lineage_fill_steps(present, v):  # what split_lineage does: HSETNX i -> i + w for i < w
        have |= {i + w for i in range(w) if i in have}
    assert have >= set(range(v))
    assert (lineage_fill_steps(present, v) == []) == (present >= set(range(v)))


def test_classify_and_resolve() -> None:
    assert classify([R(0, 0, None)], 0, 2) is LineageState.IN_PLACE
    assert classify([R(0, 0, 5), R(2, 3, None)], 0, 2) is LineageState.MOVED
    assert classify([R(1, 0, 5), R(2, 3, None)], 0, 2) is LineageState.OTHER
    assert classify([R(0, 0, 5)], 0, 2) is LineageState.OTHER
    assert classify([], 0, 2) is LineageState.OTHER
    lineage = {0: [R(0, 0, None)], 1: [R(1, 0, None)], 5: [R(3, 0, None)]}
    assert resolve_lineage(lineage, 5, 8) == [R(3, 0, None)]
    assert resolve_lineage(lineage, 3, 8) == [R(1, 0, None)]  # 3 -> 3 mod 4 (none) -> 3 mod 2 = 1
    assert resolve_lineage({}, 3, 8) == ()


def test_fence_round_trips_and_validates() -> None:
    f = fence_of("id", 7, 500, {"a": 4, "b": 1}, [("a", 1, 0, 2), ("a", 3, 1, 2), ("b", 0, 2, 0)])
    assert Fence.from_json(f.to_json()) == f
    assert f.pps() == {0, 1, 2}
    assert f.fenced("a", 7) and not f.fenced("a", 6) and f.fenced("b", 3) and not f.fenced("c", 0)
    with pytest.raises(ValueError):
        FencedQueue(3, {})
    with pytest.raises(ValueError):
        FencedQueue(4, {4: (0, 1)})
