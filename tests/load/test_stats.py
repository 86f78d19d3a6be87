"""Percentile math and open-loop latency (measured from the scheduled send time)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpq.load.stats import OpenLoopSchedule, latencies_from_schedule, percentile, rate, summarize_ms


def test_percentile_interpolates_between_ranks() -> None:
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([10], 99) == 10
    assert percentile([5, 1, 3], 0) == 1 and percentile([5, 1, 3], 100) == 5
    assert percentile(list(range(101)), 99) == 99


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=60),
    st.floats(0, 100, allow_nan=False),
)
def test_percentile_agrees_with_numpy(values: list[float], q: float) -> None:
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-9, abs=1e-6)


def test_percentile_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_summary_is_in_milliseconds() -> None:
    s = summarize_ms([0.001, 0.002, 0.003, 0.004])
    assert s["count"] == 4 and s["p50_ms"] == 2.5 and s["max_ms"] == 4.0 and s["mean_ms"] == 2.5
    assert summarize_ms([]) == {"count": 0}


def test_schedule_offsets() -> None:
    sched = OpenLoopSchedule(rate_per_s=4, duration_s=1.5)
    assert sched.count == 6
    assert sched.offsets() == [0.0, 0.25, 0.5, 0.75, 1.0, 1.25]
    assert sched.offset(5) == 1.25
    with pytest.raises(IndexError):
        sched.offset(6)
    with pytest.raises(ValueError):
        OpenLoopSchedule(0, 1)


def _fifo_server(scheduled: list[float], service: list[float]) -> list[float]:
    """Completion times of a single FIFO server that starts a request at its scheduled
    time or when the previous one finished, whichever is later."""
    done, free = [], 0.0
    for s, d in zip(scheduled, service):
        free = max(s, free) + d
        done.append(free)
    return done


def test_a_stall_shows_in_every_request_scheduled_during_it() -> None:
    # 100 requests at 100/s, each served in 1 ms, but request 10 takes 500 ms (a stall).
    sched = OpenLoopSchedule(100, 1.0)
    scheduled = sched.offsets()
    service = [0.001] * sched.count
    service[10] = 0.5
    lat = latencies_from_schedule(scheduled, _fifo_server(scheduled, service))
    # A closed-loop sender would have seen one slow request. From the schedule, request i
    # (due at 0.01 i) is done at 0.6 + (i - 10) * 0.001 until the backlog is gone, so its
    # latency 0.59 - 0.009 i exceeds 10 ms for i = 10 .. 64: 55 requests.
    slow = sum(1 for x in lat if x > 0.010)
    assert slow == 55
    assert percentile(lat, 50) > 0.010  # the stall dominates the median
    assert max(lat) == pytest.approx(0.5)


def test_latencies_reject_mismatched_or_impossible_times() -> None:
    with pytest.raises(ValueError):
        latencies_from_schedule([0.0, 1.0], [0.5])
    with pytest.raises(ValueError):
        latencies_from_schedule([1.0], [0.5])


def test_rate() -> None:
    assert rate(100, 2.0) == 50.0
    assert rate(0, 1.0) == 0.0 and rate(5, 0.0) == 0.0
