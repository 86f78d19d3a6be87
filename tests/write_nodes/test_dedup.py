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
    qids, vps, ids = [1, 1, 1, 2], [0, 1, 2, 3], [b"a", b"b", None, b"a"]
    plan = idx.plan(qids, ids, 100, window)
    assert plan.keep == [0, 1, 2, 3] and not plan.has_duplicates
    idx.register(plan, qids, vps, ids, 50, 100, window)
    assert len(idx) == 2  # queue 2 does not deduplicate, None is never indexed
    assert idx.lookup(1, b"a", 100, WINDOW) == (50, 0)
    assert idx.lookup(1, b"b", 100, WINDOW) == (51, 1)
    assert idx.lookup(2, b"a", 100, WINDOW) is None
    # a retry of the same batch: every id'd record of queue 1 is a duplicate
    again = idx.plan(qids, ids, 200, window)
    assert again.keep == [2, 3] and again.stored == {0: (50, 0), 1: (51, 1)}
    offsets, out_vps = resolve(again, 90, vps)
    assert offsets == [50, 51, 90, 91] and out_vps == [0, 1, 2, 3]


def test_duplicates_inside_one_batch_point_at_the_first_copy() -> None:
    idx = DedupIndex()
    qids, vps, ids = [1, 1, 1, 1], [3, 5, 3, 7], [b"x", b"y", b"x", b"x"]
    plan = idx.plan(qids, ids, 0, window)
    assert plan.keep == [0, 1] and plan.earlier == {2: 0, 3: 0}
    idx.register(plan, qids, vps, ids, 10, 0, window)
    assert resolve(plan, 10, vps) == ([10, 11, 10, 10], [3, 5, 3, 3])
    assert idx.lookup(1, b"x", 1, WINDOW) == (10, 3)


def test_window_expiry_and_reuse_after_it() -> None:
    idx = DedupIndex(expire_every_ms=0)
    plan = idx.plan([1], [b"a"], 0, window)
    idx.register(plan, [1], [0], [b"a"], 0, 0, window)
    assert idx.plan([1], [b"a"], WINDOW - 1, window).stored == {0: (0, 0)}
    late = idx.plan([1], [b"a"], WINDOW, window)  # out of the window: stored again
    assert late.keep == [0] and not late.has_duplicates
    idx.register(late, [1], [0], [b"a"], 7, WINDOW, window)
    assert idx.lookup(1, b"a", WINDOW, WINDOW) == (7, 0) and len(idx) == 1
    assert idx.expire(3 * WINDOW, window, force=True) == 1 and len(idx) == 0


def test_a_smaller_window_applies_at_once() -> None:
    windows = {1: WINDOW}
    idx = DedupIndex()
    idx.register(idx.plan([1], [b"a"], 0, windows.__getitem__), [1], [0], [b"a"], 0, 0, windows.__getitem__)
    windows[1] = 10
    assert not idx.plan([1], [b"a"], 20, windows.__getitem__).has_duplicates


def test_max_ids_evicts_the_oldest_first() -> None:
    idx = DedupIndex(max_ids=100)
    for t in range(150):
        plan = idx.plan([1 + t % 3], [f"id{t}".encode()], t, lambda q: 10**9)
        idx.register(plan, [1 + t % 3], [0], [f"id{t}".encode()], t, t, lambda q: 10**9)
    assert len(idx) <= 100 and idx.evicted_early >= 50
    assert idx.lookup(1 + 149 % 3, b"id149", 150, 10**9) == (149, 0)  # the youngest stay
    assert idx.lookup(1, b"id0", 150, 10**9) is None


def test_add_stored_keeps_the_first_copy_within_the_window() -> None:
    idx = DedupIndex()
    idx.add_stored(1, b"a", 5, 2, 100, WINDOW)
    idx.add_stored(1, b"a", 9, 3, 200, WINDOW)  # a later copy inside the window: the first stands
    assert idx.lookup(1, b"a", 300, WINDOW) == (5, 2)
    idx.add_stored(1, b"a", 20, 4, 100 + WINDOW, WINDOW)  # stored after the first expired
    assert idx.lookup(1, b"a", 200 + WINDOW, WINDOW) == (20, 4)
    idx.add_stored(2, b"b", 1, 1, 0, 0)  # window 0: not indexed
    assert len(idx) == 1


def _batch(records: list[Record]) -> BatchView:
    return BatchView(build_columnar_batch(0, 1000, columns_of(records, 1000)))


def test_dedup_ids_reads_the_reserved_header() -> None:
    recs = [
        Record(value=b"v0", queue_id=4, virtual_partition=1, key=b"k"),
        Record(value=b"v1", queue_id=4, virtual_partition=2, headers=attribute_headers(None, 3, "id-1") + (("h", b"x"),)),
        Record(value=b"v2", queue_id=5, virtual_partition=3, headers=(("h", b"y"), (":dedup", "é-2".encode()))),
        Record(value=b"v3", queue_id=5, virtual_partition=0, headers=(("only", b"user"),)),
        Record(value=b"v4", queue_id=5, virtual_partition=0, headers=(("long", b"z" * 300), (":dedup", b"after-long"))),
        Record(value=b"v5", queue_id=5, virtual_partition=0, headers=((":dedup", b"i" * 128),)),
    ]
    view = _batch(recs)
    assert dedup_ids(view) == [None, b"id-1", "é-2".encode(), None, b"after-long", b"i" * 128]
    qids, vps = routes(view)
    assert list(qids) == [4, 4, 5, 5, 5, 5] and list(vps) == [1, 2, 3, 0, 0, 0]
    assert dedup_ids(_batch([Record(value=b"v", queue_id=1, virtual_partition=0)])) is None
    assert dedup_ids(_batch([Record(value=b"v", queue_id=1, virtual_partition=0, headers=(("a", b"b"),))])) is None


def test_the_same_id_in_two_queues_is_two_messages() -> None:
    idx = DedupIndex()
    qids, vps, ids = [1, 3, 1, 3], [0, 1, 2, 3], [b"a", b"a", b"a", b"b"]
    plan = idx.plan(qids, ids, 0, window)
    assert plan.keep == [0, 1, 3] and plan.earlier == {2: 0}
    idx.register(plan, qids, vps, ids, 0, 0, window)
    assert idx.lookup(1, b"a", 1, WINDOW) == (0, 0) and idx.lookup(3, b"a", 1, WINDOW) == (1, 1)


def test_memory_per_indexed_id() -> None:
    """What the module docstring says an entry costs: about 100 bytes besides the id's own
    bytes object (which the record's header parsing made anyway)."""
    import tracemalloc

    ids = [f"{i:032x}-{i}".encode() for i in range(50_000)]  # the SDK's shape: 32 hex digits, '-', a sequence
    idx = DedupIndex()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for k in range(0, len(ids), 100):
        chunk = ids[k : k + 100]
        now = 1_800_000_000_000 + k
        idx.register(idx.plan([1] * 100, chunk, now, lambda q: 10**9), [1] * 100, [7] * 100, chunk, k, now, lambda q: 10**9)
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    per_entry = used / len(idx)  # the id bytes themselves were allocated before: not counted
    assert len(idx) == 50_000 and per_entry < 110, per_entry
