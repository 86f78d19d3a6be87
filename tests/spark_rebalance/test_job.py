"""The PySpark job on real Parquet stats, through ONE local[2] SparkSession:
smoothing, refusals (stale, incomplete), old-V mapping, and a whole run."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from vpq.config.settings import RebalanceSettings
from vpq.spark_rebalance.job import IncompleteStatistics, JobOptions, StaleStatistics, run_job, spark_uri
from vpq.spark_rebalance.runner import default_stats_uri, rebalance_once
from vpq.spark_rebalance.session import executor_python, make_spark, stop_spark
from vpq.spark_rebalance.synthetic import placement_for, queue_sizes, stats_windows, write_stats, zipf_loads
from vpq.traffic.stats_schema import TrafficRow
from vpq.traffic.stats_writer import StatsWriter

W = 10_000
T = 1_800_000_000_000 // W * W  # start of the first window
SETTINGS = RebalanceSettings(window_ms=W, max_stats_age_ms=60_000)
OPTS = JobOptions.from_settings(SETTINGS, ema_alpha=0.5, min_windows=3)


PYSPARK_PYTHON = os.environ.get("PYSPARK_PYTHON")  # before make_spark sets it


@pytest.fixture(scope="module")
def spark():
    s = make_spark("local[2]", app_name="vpq-test-rebalance", shuffle_partitions=2)
    yield s
    stop_spark(s)


def _writers(stats: Path, *nodes: str) -> dict[str, StatsWriter]:
    out = {}
    for n in nodes:
        out[n] = StatsWriter(stats, n)
        out[n].start()
    return out


def _basic_stats(stats: Path) -> None:
    """Two nodes, windows T, T+W, T+2W complete; T+3W only from w0 (incomplete)."""
    w = _writers(stats, "w0", "w1")
    w["w0"].write_window(T, W, [TrafficRow("a", 0, 4, messages=100, bytes=1000), TrafficRow("a", 1, 4, messages=70, bytes=70)])
    w["w0"].write_window(T + W, W, [TrafficRow("a", 0, 4, messages=200, bytes=2000)])
    w["w0"].write_window(T + 2 * W, W, [TrafficRow("a", 0, 4, messages=400, bytes=4000)])
    w["w0"].write_window(T + 3 * W, W, [TrafficRow("a", 0, 4, messages=99_999, bytes=99_999)])
    w["w1"].write_window(T, W, [])
    w["w1"].write_window(T + W, W, [])
    w["w1"].write_window(
        T + 2 * W, W,
        [TrafficRow("a", 0, 4, "feat-x", "test", messages=100, bytes=1000), TrafficRow("gone", 0, 1, messages=5, bytes=5)],
    )


def test_smoothed_loads_are_the_ema_of_complete_windows(spark, tmp_path) -> None:
    stats = tmp_path / "stats"
    _basic_stats(stats)
    now = T + 4 * W + 500
    r = run_job(spark, str(stats), now, SETTINGS, current_vps={"a": 4}, options=OPTS)
    assert r.windows == (T, T + W, T + 2 * W)
    assert r.horizon_ms == T + 3 * W and r.nodes == ("w0", "w1")
    assert r.dropped_queues == ("gone",)
    # rates per window (msgs/s): 10, 20, 50 (w0 + w1's lane) with weights 0.25, 0.5, 1 over 1.75
    assert r.loads[("a", 0)].msgs_per_s == pytest.approx((0.25 * 10 + 0.5 * 20 + 50) / 1.75)
    assert r.loads[("a", 0)].bytes_per_s == pytest.approx(10 * (0.25 * 10 + 0.5 * 20 + 50) / 1.75)
    assert r.loads[("a", 1)].msgs_per_s == pytest.approx(0.25 * 7 / 1.75)
    assert set(r.loads) == {("a", 0), ("a", 1)}


def test_refusals(spark, tmp_path) -> None:
    stats = tmp_path / "stats"
    _basic_stats(stats)
    horizon = T + 3 * W
    with pytest.raises(StaleStatistics, match=r"node\(s\) w1 last reported"):
        run_job(spark, str(stats), horizon + 60_001, SETTINGS, options=OPTS)
    with pytest.raises(IncompleteStatistics, match=r"no statistics from node\(s\) w9"):
        run_job(spark, str(stats), horizon + 1, SETTINGS, expected_nodes=["w0", "w1", "w9"], options=OPTS)
    with pytest.raises(IncompleteStatistics, match="only 3 complete window"):
        run_job(spark, str(stats), horizon + 1, SETTINGS, options=JobOptions.from_settings(SETTINGS, min_windows=4))
    with pytest.raises(IncompleteStatistics, match="does not exist"):
        run_job(spark, str(tmp_path / "nowhere"), horizon, SETTINGS, options=OPTS)
    # far in the future: nothing recent at all
    with pytest.raises(StaleStatistics, match="no window"):
        run_job(spark, str(stats), horizon + 3_600_000, SETTINGS, options=OPTS)


def test_a_node_missing_a_window_makes_it_incomplete(spark, tmp_path) -> None:
    stats = tmp_path / "stats"
    w = _writers(stats, "w0", "w1")
    for i in range(3):
        w["w0"].write_window(T + i * W, W, [TrafficRow("a", 0, 1, messages=10, bytes=10)])
    w["w1"].write_window(T, W, [])
    w["w1"].write_window(T + 2 * W, W, [])  # w1 lost window T+W
    with pytest.raises(IncompleteStatistics, match="w1 misses 1"):
        run_job(spark, str(stats), T + 3 * W, SETTINGS, options=OPTS)
    ok = run_job(spark, str(stats), T + 3 * W, SETTINGS, options=JobOptions.from_settings(SETTINGS, min_windows=2))
    assert ok.windows == (T, T + 2 * W) and ok.dropped_windows == 1
    assert ok.loads[("a", 0)].msgs_per_s == pytest.approx(1.0)  # 1/s in every complete window


def test_traffic_of_an_incomplete_window_is_not_counted(spark, tmp_path) -> None:
    """A burst in the window one node missed must not reach the loads (nor count as zero)."""
    stats = tmp_path / "stats"
    w = _writers(stats, "w0", "w1")
    for i, messages in enumerate((10, 1_000_000, 10, 10)):
        w["w0"].write_window(T + i * W, W, [TrafficRow("a", 0, 1, messages=messages, bytes=messages)])
    for i in (0, 2, 3):  # w1 missed the burst window T+W
        w["w1"].write_window(T + i * W, W, [])
    r = run_job(spark, str(stats), T + 4 * W, SETTINGS, options=OPTS)
    assert r.windows == (T, T + 2 * W, T + 3 * W) and r.dropped_windows == 1
    assert r.loads[("a", 0)].msgs_per_s == pytest.approx(1.0)


def test_old_v_stats_are_mapped_onto_the_current_v(spark, tmp_path) -> None:
    stats = tmp_path / "stats"
    w = _writers(stats, "w0")
    # V=2 at first (vp 1: 40 msgs in 10 s), then split to V=4 (vp 3: 10 msgs per window)
    w["w0"].write_window(T, W, [TrafficRow("b", 1, 2, messages=40, bytes=400)])
    w["w0"].write_window(T + W, W, [TrafficRow("b", 3, 4, messages=10, bytes=100)])
    w["w0"].write_window(T + 2 * W, W, [TrafficRow("b", 3, 4, messages=10, bytes=100)])
    now = T + 3 * W
    opts = JobOptions.from_settings(SETTINGS, ema_alpha=1.0 - 1e-9, min_windows=1)  # ~ only the newest window
    even = JobOptions.from_settings(SETTINGS, ema_alpha=1e-9, min_windows=3)  # ~ plain mean of 3 windows
    r = run_job(spark, str(stats), now, SETTINGS, current_vps={"b": 4}, options=even)
    # window T: vp 1 of V=2 -> vps 1 and 3 of V=4, 2 msgs/s each
    assert r.loads[("b", 1)].msgs_per_s == pytest.approx(2 / 3, rel=1e-6)
    assert r.loads[("b", 3)].msgs_per_s == pytest.approx((2 + 1 + 1) / 3, rel=1e-6)
    assert r.loads[("b", 3)].bytes_per_s == pytest.approx((20 + 10 + 10) / 3, rel=1e-6)
    assert set(r.loads) == {("b", 1), ("b", 3)}
    # without current V: the widest V seen (4) is used
    assert run_job(spark, str(stats), now, SETTINGS, options=even).loads == r.loads
    # a map with a smaller V than the stats (V=2): V=4 rows fold onto vp mod 2
    folded = run_job(spark, str(stats), now, SETTINGS, current_vps={"b": 2}, options=opts)
    assert set(folded.loads) == {("b", 1)}
    assert folded.loads[("b", 1)].msgs_per_s == pytest.approx(1.0, rel=1e-6)


def test_rebalance_once_end_to_end(spark, tmp_path) -> None:
    stats = tmp_path / "stats"
    loads = zipf_loads(2_000, 16, exponent=1.0, seed=4)
    pps = list(range(8))
    current = placement_for(queue_sizes(loads), pps)
    starts = [T + i * W for i in range(4)]
    write_stats(stats, stats_windows(loads, current, starts, W, ["w0", "w1"], lanes=("", "feat-a")), W)
    now = T + 4 * W + 1_000
    out = rebalance_once(spark, current, pps, now, SETTINGS, stats_uri=str(stats))
    assert out.plan.refused is None and out.job is not None
    for key, load in loads.items():
        assert out.job.loads[key].msgs_per_s == pytest.approx(load.msgs_per_s, rel=0.02, abs=0.05)
    assert out.plan.imbalance_before.combined > 1.3
    assert out.plan.imbalance_after.combined <= 1.10
    assert out.plan.reasons[0].startswith("statistics: 4 complete window(s) from 2 node(s)")
    stale = rebalance_once(spark, current, pps, now + 3_600_000, SETTINGS, stats_uri=str(stats))
    assert stale.plan.refused and "stale" in stale.plan.refused
    assert stale.plan.placement == current and not stale.plan.moves


def test_default_stats_uri(tmp_path) -> None:
    assert default_stats_uri(tmp_path, RebalanceSettings()) == str((tmp_path / "stats").resolve())
    assert default_stats_uri(tmp_path, RebalanceSettings(stats_uri="s3a://b/stats")) == "s3a://b/stats"


def test_plain_stats_paths_reach_spark_as_file_uris(spark, tmp_path, monkeypatch) -> None:
    assert spark_uri("/shared/stats") == "file:///shared/stats"
    assert spark_uri("hdfs://nn:8020/vpq/stats") == "hdfs://nn:8020/vpq/stats"
    assert spark_uri("file:///shared/stats") == "file:///shared/stats"
    stats = tmp_path / "shared dir" / "stats"
    _basic_stats(stats)
    monkeypatch.chdir(tmp_path / "shared dir")
    now = T + 4 * W + 500
    for uri in ("stats", str(stats), f"file://{stats}"):  # relative to the driver's directory; absolute; file:
        assert run_job(spark, uri, now, SETTINGS, options=OPTS).windows == (T, T + W, T + 2 * W)


def test_executors_get_the_drivers_python(spark) -> None:
    assert spark.sparkContext.pythonExec == (PYSPARK_PYTHON or sys.executable)
    assert executor_python({}, {}) == sys.executable
    assert executor_python({"spark.pyspark.python": "/opt/py/bin/python3"}, {}) == "/opt/py/bin/python3"
    assert executor_python({"spark.pyspark.python": "/a"}, {"PYSPARK_PYTHON": "/b"}) == "/b"
