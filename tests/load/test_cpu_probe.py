"""The machine's CPU probe that goes with benchmark results (``load.cpu_probe``)."""

from __future__ import annotations

import pytest

from vpq.load.cpu_probe import STALL_FACTOR, machine_line, probe_cpu, summarize_units


def test_summary_counts_units_slower_than_the_stall_factor_times_the_median() -> None:
    units = [1.0] * 97 + [STALL_FACTOR * 1.0 + 0.1, 10.0, 2.9]
    s = summarize_units(units, 30.0)
    assert s["units"] == 100 and s["unit_p50_ms"] == 1.0
    assert s["stalls"] == 2  # 3.1 and 10.0; 2.9 is under 3x the median
    assert s["stalls_per_min"] == 4.0 and s["worst_ms"] == 10.0 and s["unit_p99_ms"] == 10.0


def test_an_empty_probe_says_so() -> None:
    assert summarize_units([], 0.0) == {"units": 0, "seconds": 0.0}


def test_probe_runs_for_its_time_on_a_fake_clock() -> None:
    now = [0.0]

    def clock() -> float:
        now[0] += 0.001  # every reading advances 1 ms
        return now[0]

    slept: list[float] = []
    s = probe_cpu(0.02, clock=clock, sleep=slept.append)
    assert s["units"] == len(slept) > 0 and s["unit_p50_ms"] == pytest.approx(1.0)
    with pytest.raises(ValueError):
        probe_cpu(-1)


def test_a_real_probe_measures_the_machine() -> None:
    s = probe_cpu(0.2)
    assert s["units"] > 0 and s["unit_p50_ms"] > 0 and s["worst_ms"] >= s["unit_p50_ms"]


def test_machine_line_gives_both_probes() -> None:
    line = machine_line(summarize_units([1.0, 1.0, 5.0], 60.0), {"units": 0})
    assert "unit 1.00 ms, 1 stalls/min (worst 5.0 ms)" in line and "after: not measured" in line
