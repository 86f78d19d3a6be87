"""The in-process benchmarks of the read nodes' core run and report consistent figures."""

from __future__ import annotations

from vpq.load.platform_bench.delivery_state import run_bench


def test_delivery_state_bench_drains_everything_and_keeps_one_stuck_offset():
    r = run_bench(messages=600, keys=50, consumers=3, vps=16, batch=50)
    assert r["drained"] == 600
    assert r["min_per_consumer"] > 0
    assert r["ack_state_entries_one_stuck"] == 1 and r["ack_state_low_watermark"] == 0
