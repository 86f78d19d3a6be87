"""The PySpark part of the remap: stats windows -> smoothed load per (queue, vp).

``run_job(spark, stats_uri, now_ms, settings, ...)`` reads the Parquet files
written by ``StatsWriter`` (any Spark-readable URI), checks them, aggregates
in Spark and collects one small row per (queue, vp) to the driver.

Which statistics are used, and when the job refuses (``StatisticsError``):

- *Expected nodes*: ``expected_nodes`` when given (the write nodes of the
  registry), else every node that reported a window ending within the last
  ``lookback_windows * window_ms + max_stats_age_ms`` before ``now_ms``.
- ``IncompleteStatistics`` when there are no statistics at all under the URI,
  or an expected node has none in that period.
- The *horizon* is the end of the newest window every expected node has
  reported (the slowest node's newest). ``StaleStatistics`` when the horizon is
  older than ``max_stats_age_ms`` (naming the lagging nodes), so a node that
  stops reporting blocks planning until it leaves the expected set.
- A window is *complete* when every expected node reported it (idle nodes
  write heartbeat rows); only complete windows within ``lookback_windows``
  before the horizon are used, and ``IncompleteStatistics`` is raised when
  there are fewer than ``min_windows`` of them. Incomplete windows are dropped,
  never read as zero traffic.

Smoothing: rows become rates (count * 1000 / window_ms), are summed per
(queue, vp, window) over nodes, lanes and envs (groupBy), then reduced per
(queue, vp) to an exponentially weighted mean over the complete windows:
weight ``(1 - ema_alpha) ** ((newest - start) / window_ms)``, divided by the sum
of the weights of ALL complete windows (a vp absent from a window had no
traffic in it). For evenly spaced windows this is the EMA of the series.

Old V: a row written under ``V_row`` smaller than the queue's current V
(``current_vps``, else the largest V seen for the queue) is spread evenly over
its children ``vp + k * V_row`` (a load hint); a row under a larger V folds
onto ``vp mod V``. Queues absent from ``current_vps`` are dropped (and listed).
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, MapType, StringType

from vpq.config.settings import RebalanceSettings
from vpq.spark_rebalance.plan_model import VpLoad
from vpq.traffic.stats_schema import DATE_PARTITION, HEARTBEAT_QUEUE, spark_schema


class StatisticsError(Exception):
    """The statistics cannot be planned on; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class StaleStatistics(StatisticsError):
    """The newest complete statistics are older than ``max_stats_age_ms``."""


class IncompleteStatistics(StatisticsError):
    """Statistics are missing: none at all, a node without any, or too few complete windows."""


@dataclass(frozen=True, slots=True)
class JobOptions:
    """Knobs of ``run_job``; ``window_ms`` and ``max_stats_age_ms`` come from settings."""

    window_ms: int = 10_000
    max_stats_age_ms: int = 300_000
    ema_alpha: float = 0.3
    lookback_windows: int = 30
    min_windows: int = 3

    def __post_init__(self) -> None:
        if self.window_ms < 1 or self.max_stats_age_ms < 1:
            raise ValueError("window_ms and max_stats_age_ms must be >= 1")
        if not 0.0 < self.ema_alpha <= 1.0:
            raise ValueError("ema_alpha must be in (0, 1]")
        if not 1 <= self.min_windows <= self.lookback_windows:
            raise ValueError("need 1 <= min_windows <= lookback_windows")

    @classmethod
    def from_settings(cls, rebalance: RebalanceSettings, **overrides: Any) -> JobOptions:
        unknown = set(overrides) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown job options: {sorted(unknown)}")
        values: dict[str, Any] = {"window_ms": rebalance.window_ms, "max_stats_age_ms": rebalance.max_stats_age_ms}
        values.update(overrides)
        return cls(**values)


@dataclass(frozen=True)
class JobResult:
    """Smoothed loads and what they were computed from."""

    loads: dict[tuple[str, int], VpLoad]
    windows: tuple[int, ...]  # starts of the complete windows used, oldest first
    horizon_ms: int  # end of the newest complete window
    nodes: tuple[str, ...]  # expected nodes
    dropped_windows: int  # incomplete windows in the lookback that were left out
    dropped_queues: tuple[str, ...]  # queues with statistics but absent from current_vps


def _date(ms: int) -> str:
    return dt.datetime.fromtimestamp(max(ms, 0) / 1000.0, tz=dt.timezone.utc).strftime("%Y-%m-%d")


def _local_path(uri: str) -> str | None:
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return parsed.path if parsed.scheme else uri
    return None


def spark_uri(stats_uri: str) -> str:
    """The URI Spark is given for ``stats_uri``: a plain path (where write nodes write)
    becomes an absolute ``file:`` URI, so a cluster whose default file system is not the
    local one (``fs.defaultFS`` = hdfs://...) still reads the local or mounted directory;
    any URI is passed as is."""
    if urlparse(stats_uri).scheme == "":
        return "file://" + str(Path(stats_uri).resolve())  # not as_uri(): Hadoop's Path does its own escaping
    return stats_uri


def read_stats(spark: SparkSession, stats_uri: str) -> DataFrame:
    """The stats files under ``stats_uri`` as a DataFrame (``date`` partition column
    included when the directory layout has one). IncompleteStatistics when the
    location does not exist. A local path or ``file:`` URI is checked on the driver
    (Spark lists the files there; executors read them at the same path); any other URI
    is left to Spark and its Hadoop connector."""
    local = _local_path(stats_uri)
    if local is not None and not os.path.isdir(local):
        raise IncompleteStatistics(f"no statistics: {stats_uri} does not exist")
    try:
        return spark.read.schema(spark_schema()).option("pathGlobFilter", "*.parquet").parquet(spark_uri(stats_uri))
    except Exception as e:  # AnalysisException on remote URIs; keep the message
        if "PATH_NOT_FOUND" in str(e):
            raise IncompleteStatistics(f"no statistics: {stats_uri} does not exist") from None
        raise


def _since(df: DataFrame, start_ms: int) -> DataFrame:
    """Rows of windows starting at or after ``start_ms`` (with date-partition pruning)."""
    out = df.where(F.col("window_start_ms") >= F.lit(start_ms))
    if DATE_PARTITION in df.columns:
        out = out.where(F.col(DATE_PARTITION) >= F.lit(_date(start_ms)).cast("date"))
    return out


def complete_windows(
    by_node: Mapping[str, Mapping[int, int]], expected: Collection[str], horizon: int, lookback_ms: int
) -> tuple[list[int], list[int]]:
    """(every window start in the lookback, the complete ones), both ascending. A window
    counts when it starts at or after ``horizon - lookback_ms`` and ends by ``horizon``;
    it is complete when every ``expected`` node reported it. ``by_node``: node ->
    {window start: window length} of the windows it reported."""
    lo = horizon - lookback_ms
    starts = sorted({s for n in expected for s, w in by_node.get(n, {}).items() if s >= lo and s + w <= horizon})
    complete = [s for s in starts if all(s in by_node.get(n, {}) for n in expected)]
    return starts, complete


def _check_windows(
    df: DataFrame, now_ms: int, opts: JobOptions, expected_nodes: Collection[str] | None, uri: str
) -> tuple[list[int], int, tuple[str, ...], int]:
    """(complete window starts, horizon end, expected nodes, dropped windows) or StatisticsError."""
    lookback_ms = opts.lookback_windows * opts.window_ms
    since = now_ms - lookback_ms - opts.max_stats_age_ms
    seen = _since(df, since).select("node_id", "window_start_ms", "window_ms").distinct().collect()
    by_node: dict[str, dict[int, int]] = {}
    for r in seen:
        by_node.setdefault(r["node_id"], {})[r["window_start_ms"]] = r["window_ms"]
    if not by_node:
        if df.limit(1).count() == 0:
            raise IncompleteStatistics(f"no statistics under {uri}")
        raise StaleStatistics(
            f"statistics are stale: no window under {uri} ended in the last "
            f"{(lookback_ms + opts.max_stats_age_ms) / 1000:.0f} s"
        )
    expected = tuple(sorted(expected_nodes)) if expected_nodes is not None else tuple(sorted(by_node))
    missing = [n for n in expected if n not in by_node]
    if missing:
        raise IncompleteStatistics(
            f"no statistics from node(s) {', '.join(missing)} in the last "
            f"{(lookback_ms + opts.max_stats_age_ms) / 1000:.0f} s"
        )
    ends = {n: max(s + w for s, w in by_node[n].items()) for n in expected}
    horizon = min(ends.values())
    age = now_ms - horizon
    if age > opts.max_stats_age_ms:
        lagging = [n for n in expected if ends[n] == horizon]
        raise StaleStatistics(
            f"statistics are stale: node(s) {', '.join(lagging)} last reported a window ending "
            f"{age / 1000:.0f} s ago (limit {opts.max_stats_age_ms / 1000:.0f} s)"
        )
    starts, complete = complete_windows(by_node, expected, horizon, lookback_ms)
    if len(complete) < opts.min_windows:
        gaps = {n: sum(1 for s in starts if s not in by_node[n]) for n in expected}
        detail = ", ".join(f"{n} misses {g}" for n, g in gaps.items() if g)
        raise IncompleteStatistics(
            f"only {len(complete)} complete window(s) in the {lookback_ms / 1000:.0f} s before the newest "
            f"common window, need {opts.min_windows}" + (f" ({detail})" if detail else "")
        )
    return complete, horizon, expected, len(starts) - len(complete)


def _target_vps(rows: DataFrame, current_vps: Mapping[str, int] | None) -> DataFrame:
    """``rows`` with a ``target_v`` column: the queue's current V, else its largest V seen.
    ``current_vps`` travels as one JSON literal parsed in the JVM: a DataFrame built from
    a Python list would start Python workers on the executors."""
    widest = F.max("virtual_partitions").over(Window.partitionBy("queue"))
    if current_vps is None:
        return rows.withColumn("target_v", widest)
    text = json.dumps({q: int(v) for q, v in sorted(current_vps.items())})
    current = F.from_json(F.lit(text), MapType(StringType(), LongType()))
    return rows.withColumn("target_v", F.coalesce(F.try_element_at(current, F.col("queue")), widest))


def run_job(
    spark: SparkSession,
    stats_uri: str,
    now_ms: int,
    settings: RebalanceSettings,
    *,
    current_vps: Mapping[str, int] | None = None,
    expected_nodes: Collection[str] | None = None,
    options: JobOptions | None = None,
    progress: Callable[[str], None] | None = None,
) -> JobResult:
    """Smoothed bytes/s and msgs/s per (queue, vp under the current V); see the
    module docstring. Raises ``StaleStatistics`` / ``IncompleteStatistics``.
    ``progress`` (optional) is called with each stage's name as it starts: reading
    statistics, then aggregating and smoothing."""
    stage = progress or (lambda _name: None)
    opts = options or JobOptions.from_settings(settings)
    stage("reading statistics")
    df = read_stats(spark, stats_uri)
    complete, horizon, nodes, dropped = _check_windows(df, now_ms, opts, expected_nodes, stats_uri)
    newest = complete[-1]
    decay = 1.0 - opts.ema_alpha
    total_weight = sum(decay ** ((newest - s) / opts.window_ms) for s in complete)

    rows = (
        _since(df, complete[0])
        .where(F.col("window_start_ms").isin(complete) & (F.col("queue") != F.lit(HEARTBEAT_QUEUE)))
        .withColumn("rate_b", F.col("bytes") * F.lit(1000.0) / F.col("window_ms"))
        .withColumn("rate_m", F.col("messages") * F.lit(1000.0) / F.col("window_ms"))
    )
    rows = _target_vps(rows, current_vps)
    v_row, v_new = F.col("virtual_partitions"), F.col("target_v")
    ratio = F.greatest(F.floor(v_new / v_row).cast("long"), F.lit(1).cast("long"))
    mapped = (
        rows.withColumn("ratio", ratio)
        .withColumn("k", F.explode(F.sequence(F.lit(0).cast("long"), F.col("ratio") - 1)))
        .withColumn("vp_new", F.when(v_row <= v_new, F.col("vp") + F.col("k") * v_row).otherwise(F.pmod(F.col("vp"), v_new)))
    )
    per_window = mapped.groupBy("queue", "vp_new", "window_start_ms").agg(
        F.sum(F.col("rate_b") / F.col("ratio")).alias("b"),
        F.sum(F.col("rate_m") / F.col("ratio")).alias("m"),
    )
    weight = F.pow(F.lit(decay), (F.lit(newest) - F.col("window_start_ms")) / F.lit(float(opts.window_ms)))
    smoothed = per_window.groupBy("queue", "vp_new").agg(
        (F.sum(weight * F.col("b")) / F.lit(total_weight)).alias("bytes_per_s"),
        (F.sum(weight * F.col("m")) / F.lit(total_weight)).alias("msgs_per_s"),
    )
    loads: dict[tuple[str, int], VpLoad] = {}
    dropped_queues: set[str] = set()
    stage(f"aggregating and smoothing {len(complete)} window(s) per virtual partition")
    for r in smoothed.collect():
        q = r["queue"]
        if current_vps is not None and q not in current_vps:
            dropped_queues.add(q)
            continue
        loads[(q, int(r["vp_new"]))] = VpLoad(max(float(r["bytes_per_s"]), 0.0), max(float(r["msgs_per_s"]), 0.0))
    return JobResult(
        loads=loads,
        windows=tuple(complete),
        horizon_ms=horizon,
        nodes=nodes,
        dropped_windows=dropped,
        dropped_queues=tuple(sorted(dropped_queues)),
    )
