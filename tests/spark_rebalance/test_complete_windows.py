"""The complete-window rule of the remap job, on its pure part: a window is used only
when every expected node reported it (``spark_rebalance.job.complete_windows``)."""

from __future__ import annotations

from vpq.spark_rebalance.job import complete_windows

W = 10_000
T = 1_800_000_000_000 // W * W


def test_a_window_one_expected_node_did_not_report_is_not_complete() -> None:
    by_node = {"w0": {T: W, T + W: W, T + 2 * W: W}, "w1": {T: W, T + 2 * W: W}}
    starts, complete = complete_windows(by_node, ("w0", "w1"), T + 3 * W, 3 * W)
    assert starts == [T, T + W, T + 2 * W]
    assert complete == [T, T + 2 * W]


def test_an_expected_node_without_any_window_leaves_no_window_complete() -> None:
    by_node = {"w0": {T: W, T + W: W}, "w1": {T: W, T + W: W}}
    _, complete = complete_windows(by_node, ("w0", "w1", "w2"), T + 2 * W, 2 * W)
    assert complete == []
    # the same windows are complete for the nodes that did report them
    _, complete = complete_windows(by_node, ("w0", "w1"), T + 2 * W, 2 * W)
    assert complete == [T, T + W]


def test_windows_outside_the_lookback_or_past_the_horizon_are_left_out() -> None:
    by_node = {"w0": {T: W, T + W: W, T + 2 * W: W, T + 3 * W: W}, "w1": {T: W, T + W: W, T + 2 * W: W, T + 3 * W: W}}
    starts, complete = complete_windows(by_node, ("w0", "w1"), T + 3 * W, 2 * W)
    assert starts == complete == [T + W, T + 2 * W]
