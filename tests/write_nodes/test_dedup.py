"""DedupIndex and dedup_ids: pure logic of the write node's producer deduplication."""

from __future__ import annotations

from vpq.codec.batch_common import Record
from vpq.codec.columnar import build_columnar_batch, columns_of
from vpq.codec.records import BatchView
from vpq.codec.system_headers import attribute_headers
from vpq.write_nodes.dedup import DedupIndex, dedup_ids, resolve, routes

WINDOW = 1000


def window(qid: int) -> int:
    return {1: WINDOW, 2: 0}.get(qid, WINDOW)


def test_plan_register_and_lookup() -> None:
    idx = DedupIndex()
    qids, vps, ids = [1, 1, 1, 2], [0, 1, 2, 3], ["a", "b", None, "a"]
    plan = idx.plan(qids, ids, 100, window)
    assert plan.keep == [0, 1, 2, 3] and not plan.has_duplicates
    idx.register(plan, qids, vps, ids, 50, 100, window)
    assert len(idx) == 2  # queue 2 does not deduplicate, None is never indexed
    assert idx.lookup(1, "a", 100, WINDOW) == (50, 0)
    assert idx.lookup(1, "b", 100, WINDOW) == (51, 1)
    assert idx.lookup(2, "a", 100, WINDOW) is None
    # a retry of the same batch: every id'd record of queue 1 is a duplicate
    again = idx.plan(qids, ids, 200, window)
    assert again.keep == [2, 3] and again.stored == {0: (50, 0), 1: (51, 1)}
    offsets, out_vps = resolve(again, 90, vps)
    assert offsets == [50, 51, 90, 91] and out_vps == [0, 1, 2, 3]


def test_duplicates_inside_one_batch_point_at_the_first_copy() -> None:
    idx = DedupIndex()
    qids, vps, ids = [1, 1, 1, 1], [3, 5, 3, 7], ["x", "y", "x", "x"]
    plan = idx.plan(qids, ids, 0, window)
    assert plan.keep == [0, 1] and plan.earlier == {2: 0, 3: 0}
    idx.register(plan, qids, vps, ids, 10, 0, window)
    assert resolve(plan, 10, vps) == ([10, 11, 10, 10], [3, 5, 3, 3])
    assert idx.lookup(1, "x", 1, WINDOW) == (10, 3)


def test_window_expiry_and_reuse_after_it() -> None:
    idx = DedupIndex(expire_every_ms=0)
    plan = idx.plan([1], ["a"], 0, window)
    idx.register(plan, [1], [0], ["a"], 0, 0, window)
    assert idx.plan([1], ["a"], WINDOW - 1, window).stored == {0: (0, 0)}
    late = idx.plan([1], ["a"], WINDOW, window)  # out of the window: stored again
    assert late.keep == [0] and not late.has_duplicates
    idx.register(late, [1], [0], ["a"], 7, WINDOW, window)
    assert idx.lookup(1, "a", WINDOW, WINDOW) == (7, 0) and len(idx) == 1
    assert idx.expire(3 * WINDOW, window, force=True) == 1 and len(idx) == 0


def test_a_smaller_window_applies_at_once() -> None:
    windows = {1: WINDOW}
    idx = DedupIndex()
    idx.register(idx.plan([1], ["a"], 0, windows.__getitem__), [1], [0], ["a"], 0, 0, windows.__getitem__)
    windows[1] = 10
    assert not idx.plan([1], ["a"], 20, windows.__getitem__).has_duplicates


def test_max_ids_evicts_the_oldest_first() -> None:
    idx = DedupIndex(max_ids=100)
    for t in range(150):
        plan = idx.plan([1 + t % 3], [f"id{t}"], t, lambda q: 10**9)
        idx.register(plan, [1 + t % 3], [0], [f"id{t}"], t, t, lambda q: 10**9)
    assert len(idx) <= 100 and idx.evicted_early >= 50
    assert idx.lookup(1 + 149 % 3, "id149", 150, 10**9) == (149, 0)  # the youngest stay
    assert idx.lookup(1, "id0", 150, 10**9) is None


def test_add_stored_keeps_the_first_copy_within_the_window() -> None:
    idx = DedupIndex()
    idx.add_stored(1, "a", 5, 2, 100, WINDOW)
    idx.add_stored(1, "a", 9, 3, 200, WINDOW)  # a later copy inside the window: the first stands
    assert idx.lookup(1, "a", 300, WINDOW) == (5, 2)
    idx.add_stored(1, "a", 20, 4, 100 + WINDOW, WINDOW)  # stored after the first expired
    assert idx.lookup(1, "a", 200 + WINDOW, WINDOW) == (20, 4)
    idx.add_stored(2, "b", 1, 1, 0, 0)  # window 0: not indexed
    assert len(idx) == 1


def _batch(records: list[Record]) -> BatchView:
    return BatchView(build_columnar_batch(0, 1000, columns_of(records, 1000)))


def test_dedup_ids_reads_the_reserved_header() -> None:
    recs = [
        Record(value=b"v0", queue_id=4, virtual_partition=1, key=b"k"),
        Record(value=b"v1", queue_id=4, virtual_partition=2, headers=attribute_headers(None, 3, "id-1") + (("h", b"x"),)),
        Record(value=b"v2", queue_id=5, virtual_partition=3, headers=(("h", b"y"), (":dedup", "é-2".encode()))),
        Record(value=b"v3", queue_id=5, virtual_partition=0, headers=(("only", b"user"),)),
    ]
    view = _batch(recs)
    assert dedup_ids(view) == [None, "id-1", "é-2", None]
    qids, vps = routes(view)
    assert list(qids) == [4, 4, 5, 5] and list(vps) == [1, 2, 3, 0]
    assert dedup_ids(_batch([Record(value=b"v", queue_id=1, virtual_partition=0)])) is None
    assert dedup_ids(_batch([Record(value=b"v", queue_id=1, virtual_partition=0, headers=(("a", b"b"),))])) is None
