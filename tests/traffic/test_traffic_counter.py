"""TrafficCounter: aligned windows, idle windows, late records."""

from __future__ import annotations

import pytest

from vpq.traffic.stats_schema import TrafficRow
from vpq.traffic.traffic_counter import TrafficCounter

W = 1000


def test_counts_are_summed_per_key_and_window() -> None:
    c = TrafficCounter(W, start_ms=10_250)
    c.record(10_300, "q", 1, 4, 2, 200)
    c.record(10_900, "q", 1, 4, 3, 300)
    c.record(10_950, "q", 1, 4, 1, 10, lane="feat-a")
    c.record(11_100, "r", 0, 1, 5, 50)
    assert c.drain(10_999) == []
    assert c.drain(11_000) == [
        (10_000, [TrafficRow("q", 1, 4, "", "prod", 5, 500), TrafficRow("q", 1, 4, "feat-a", "prod", 1, 10)])
    ]
    assert c.drain(11_000) == []
    assert c.drain(12_500) == [(11_000, [TrafficRow("r", 0, 1, "", "prod", 5, 50)])]


def test_idle_windows_are_drained_empty() -> None:
    c = TrafficCounter(W, start_ms=0)
    assert c.drain(3_000) == [(0, []), (1_000, []), (2_000, [])]


def test_late_record_goes_to_oldest_open_window() -> None:
    c = TrafficCounter(W, start_ms=0)
    c.drain(2_000)
    c.record(500, "q", 0, 1, 1, 1)
    assert c.drain(3_000) == [(2_000, [TrafficRow("q", 0, 1, "", "prod", 1, 1)])]


def test_bad_records_are_rejected_at_once() -> None:
    c = TrafficCounter(W, start_ms=0)
    with pytest.raises(ValueError):
        c.record(0, "bad name", 0, 1, 1, 1)
    with pytest.raises(ValueError):
        c.record(0, "q", 0, 1, -1, 1)
    assert c.drain(1_000) == [(0, [])]


def test_keys_are_checked_with_names_seen_before() -> None:
    c = TrafficCounter(W, start_ms=0)
    c.record(0, "q", 0, 4, 1, 1, lane="feat-a")
    for bad in ((0, "q", 4, 4), (0, "q", -1, 4), (0, "q", 0, 3), (0, "q", 1.0, 4)):
        with pytest.raises(ValueError):
            c.record(bad[0], bad[1], bad[2], bad[3], 1, 1, lane="feat-a")
    with pytest.raises(ValueError):
        c.record(0, "q", 0, 4, 1, 1, lane="Bad Lane")
    c.record(0, "q", 3, 4, 2, 2, lane="feat-a")
    assert c.drain(1_000) == [(0, [TrafficRow("q", 0, 4, "feat-a", "prod", 1, 1), TrafficRow("q", 3, 4, "feat-a", "prod", 2, 2)])]


def test_record_many_counts_like_record_and_skips_only_the_bad_rows() -> None:
    one, many = TrafficCounter(W, start_ms=0), TrafficCounter(W, start_ms=0)
    rows = [
        ("q", 1, 4, "", "prod", 2, 200),
        ("q", 1, 4, "feat-a", "test", 1, 10),
        ("q", 1, 4, "", "prod", 3, 300),  # same key again in one call: summed
        ("r", 0, 1, "", "prod", 5, 50),
    ]
    for q, vp, v, lane, env, n, b in rows:
        one.record(500, q, vp, v, n, b, lane=lane, env=env)
    assert many.record_many(500, rows) == []
    bad = [("bad name", 0, 1, "", "prod", 1, 1), ("q", 4, 4, "", "prod", 1, 1), ("q", 0, 4, "", "prod", -1, 1)]
    refused = many.record_many(600, [bad[0], ("q", 1, 4, "", "prod", 1, 1), bad[1], bad[2]])
    one.record(600, "q", 1, 4, 1, 1)
    assert len(refused) == 3 and "bad name" in refused[0] and "vp 4" in refused[1]
    assert many.drain(1_000) == one.drain(1_000)
