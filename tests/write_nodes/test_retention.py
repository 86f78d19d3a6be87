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
