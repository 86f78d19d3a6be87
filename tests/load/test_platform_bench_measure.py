"""The pure figures of ``vpq bench produce|latency|drain`` (load.platform_bench.measure)
and the benchmarks' configuration checks."""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpq.load.platform_bench.drain import DrainConfig
from vpq.load.platform_bench.latency import LatencyConfig
from vpq.load.platform_bench.measure import (
    RequestRecord,
    median,
    median_of_runs,
    message_identity,
    owner_of_key,
    requests_in_window,
    speedup_and_efficiency,
    spread,
    window_rate,
)
from vpq.load.platform_bench.produce import ProduceConfig


def test_window_rate_ignores_ramp_up_and_stragglers() -> None:
    steady = [1.0 + i * 0.01 for i in range(81)]  # 100/s for 0.8 s
    times = [0.0] * 10 + steady + [50.0] * 10  # a burst at 0 and stragglers at 50 s
    assert window_rate(times) == pytest.approx(100.0, rel=0.05)


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=2, max_value=500), st.floats(min_value=0.5, max_value=5000.0), st.randoms())
def test_window_rate_of_an_even_stream_is_its_rate(count: int, rate: float, rnd) -> None:
    times = [10.0 + i / rate for i in range(count)]
    rnd.shuffle(times)
    assert window_rate(times, 0.0, 1.0) == pytest.approx(rate, rel=1e-6)
    assert window_rate(times) == pytest.approx(rate, rel=1e-6)


def test_window_rate_degenerate_inputs() -> None:
    assert window_rate([]) == 0.0
    assert window_rate([3.0]) == 0.0
    assert window_rate([2.0, 2.0, 2.0]) == 0.0
    with pytest.raises(ValueError):
        window_rate([1.0, 2.0], 0.9, 0.1)


def test_requests_in_window_counts_completions_and_whole_requests_latency() -> None:
    records = [
        RequestRecord(0.5, 1.5, 100),  # straddles the start: counted, latency left out
        RequestRecord(2.0, 2.25, 100),
        RequestRecord(3.0, 3.5, 100, ok=False),  # failed: an error, no messages
        RequestRecord(4.0, 6.5, 100),  # completes after the window: not counted
        RequestRecord(0.0, 0.9, 100),  # before the window
    ]
    fig = requests_in_window(records, 1.0, 5.0)
    assert (fig.messages, fig.requests, fig.errors, fig.seconds) == (200, 2, 1, 4.0)
    assert fig.latencies == [0.25]
    assert fig.messages_per_s == 50.0
    with pytest.raises(ValueError):
        requests_in_window(records, 2.0, 2.0)


@settings(max_examples=50, deadline=None)
@given(st.integers(min_value=1, max_value=400), st.integers(min_value=1, max_value=40), st.integers(1, 9))
def test_message_identities_number_each_key_densely_with_one_owner(count: int, keys: int, workers: int) -> None:
    seqs: dict[str, list[int]] = defaultdict(list)
    owners: dict[str, set[int]] = defaultdict(set)
    for i in range(count):
        key, seq = message_identity(i, keys)
        seqs[key].append(seq)
        owners[key].add(owner_of_key(i, keys, workers))
    assert all(s == list(range(len(s))) for s in seqs.values())  # 0, 1, 2, ... in index order
    assert all(len(o) == 1 for o in owners.values())
    assert len(seqs) == min(count, keys)


def test_speedup_efficiency_spread_and_medians() -> None:
    assert speedup_and_efficiency(100.0, 5120.0, 64) == pytest.approx((51.2, 0.8))
    assert speedup_and_efficiency(0.0, 10.0, 4) == (0.0, 0.0)
    with pytest.raises(ValueError):
        speedup_and_efficiency(1.0, 1.0, 0)
    assert spread([3, 1, 2]) == {"min": 1, "max": 3, "mean": 2.0}
    assert spread([]) == {"min": 0, "max": 0, "mean": 0.0}
    assert median([5.0, 1.0, 3.0]) == 3.0 and median([4.0, 1.0, 2.0, 3.0]) == 2.5
    with pytest.raises(ValueError):
        median([])
    runs = [{"a": 1, "b": None, "c": True}, {"a": 9}, {"a": 4, "b": 2.0}]
    assert median_of_runs(runs, ["a", "b", "c", "d"]) == {"a": 4.0, "b": 2.0, "c": None, "d": None}


def test_configs_reject_impossible_settings() -> None:
    with pytest.raises(ValueError):
        ProduceConfig(batch=0)
    with pytest.raises(ValueError):
        ProduceConfig(seconds=0)
    with pytest.raises(ValueError):
        LatencyConfig(rate=0)
    with pytest.raises(ValueError):
        DrainConfig(consumers=0)
    with pytest.raises(ValueError):
        DrainConfig(message_bytes=8)
    assert LatencyConfig(rate=1000, batch=5).interval_s == pytest.approx(0.005)
