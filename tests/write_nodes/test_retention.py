"""Retention planning (pure)."""

from __future__ import annotations

from vpq.write_nodes.retention import SegmentInfo, segments_to_delete


def _segs(*specs: tuple[int, int, bool]) -> list[SegmentInfo]:
    return [SegmentInfo(i * 100, size, ts, deletable) for i, (size, ts, deletable) in enumerate(specs)]


def test_unlimited_retention_deletes_nothing() -> None:
    assert segments_to_delete(_segs((10, 0, True), (10, 0, False)), 10**12, -1, -1) == 0


def test_by_age_stops_at_first_young_segment() -> None:
    segs = _segs((10, 100, True), (10, 500, True), (10, 200, True), (10, 900, False))
    assert segments_to_delete(segs, now_ms=1000, retention_bytes=-1, retention_ms=900) == 0
    assert segments_to_delete(segs, now_ms=1000, retention_bytes=-1, retention_ms=600) == 1
    assert segments_to_delete(segs, now_ms=1000, retention_bytes=-1, retention_ms=400) == 3


def test_by_size_keeps_at_least_the_limit() -> None:
    segs = _segs((100, 0, True), (100, 0, True), (100, 0, True), (50, 0, False))
    # 350 bytes, limit 200: deleting one leaves 250 >= 200, deleting two would leave 150
    assert segments_to_delete(segs, 0, retention_bytes=200, retention_ms=-1) == 1
    assert segments_to_delete(segs, 0, retention_bytes=150, retention_ms=-1) == 2
    assert segments_to_delete(segs, 0, retention_bytes=0, retention_ms=-1) == 3


def test_never_past_an_undeletable_segment() -> None:
    segs = _segs((100, 0, True), (100, 0, False), (100, 0, True), (10, 0, False))
    assert segments_to_delete(segs, 10**9, retention_bytes=0, retention_ms=1) == 1


def test_queue_policy_dead_records_and_segments() -> None:
    from vpq.write_nodes.retention import DELETED, FOREVER, QueuePolicy

    p = QueuePolicy({1: -1, 2: 1000}, known_below=5, log_retention_ms=10_000)
    assert p.retention_of(1) == FOREVER and p.retention_of(2) == 1000
    assert p.retention_of(3) == DELETED  # below the last id given and not listed
    assert p.retention_of(9) == FOREVER  # created after the snapshot
    now = 100_000
    assert p.dead(3, now, now)
    assert not p.dead(2, now - 1000, now) and p.dead(2, now - 1001, now)
    assert not p.dead(1, now - 10_000, now) and p.dead(1, now - 10_001, now)  # the log's limit
    assert not QueuePolicy({1: -1}, 5).dead(1, 0, now)  # no limit anywhere
    # a segment goes only when every queue in it is past its own retention
    assert not p.queues_past({1: 0, 2: now - 500, 3: 0}, now)
    assert p.queues_past({1: now, 2: now - 2000, 3: now}, now)


def test_queue_past_keeps_an_otherwise_deletable_segment() -> None:
    segs = [SegmentInfo(0, 100, 0, True, queues_past=False), SegmentInfo(100, 100, 0, True)]
    assert segments_to_delete(segs, 10**9, retention_bytes=0, retention_ms=1) == 0
    segs = [SegmentInfo(0, 0, -(1 << 63), True), SegmentInfo(100, 100, 10**9, False)]
    assert segments_to_delete(segs, 10**9, retention_bytes=-1, retention_ms=-1) == 1  # empty: compacted away
