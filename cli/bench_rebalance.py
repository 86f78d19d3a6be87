"""``vpq bench rebalance``: time the Spark remap job end to end on synthetic stats.

Generates ``--rows`` vp-window rows (Zipf-skewed traffic over ``--vps`` vps of
16-vp queues, as written by ``--nodes`` write nodes; ``rows / vps`` windows) as
Parquet in a temp dir, starts a SparkSession on ``--master``, then times
``rebalance_once`` (Spark read + checks + aggregation + EMA, then planning),
``--repeat`` times on the same session (the first run pays JVM warm-up); ``--conf``
sets Spark configuration (a standalone cluster's ``spark.executor.memory``...).
Prints figures, imbalance before/after, moves made vs the lower bound, and
last one JSON line.
"""

from __future__ import annotations

import contextlib
import json
import math
import tempfile
import time
from pathlib import Path
from typing import Optional

import typer

from vpq.cli.progress import SparkWatcher, Stages
from vpq.config.settings import RebalanceSettings

VPS_PER_QUEUE = 16


def run_bench(
    rows: int, master: str, vps: int, pps: int, nodes: int, exponent: float, repeat: int, chart: Path | None,
    stages: Stages | None = None, spark_conf: dict[str, str] | None = None,
) -> dict[str, object]:
    """Run the benchmark and return its figures; ``stages`` (optional) shows its steps
    and Spark's progress on stderr (the timed figures are measured the same way)."""
    stage = stages.stage if stages is not None else (lambda _name: None)
    # pyspark, pyarrow and matplotlib are loaded when the benchmark runs, not with the CLI
    from vpq.spark_rebalance.report import write_chart
    from vpq.spark_rebalance.runner import rebalance_once
    from vpq.spark_rebalance.session import make_spark, stop_spark
    from vpq.spark_rebalance.synthetic import placement_for, queue_sizes, stats_windows, write_stats, zipf_loads

    settings = RebalanceSettings()
    window_ms = settings.window_ms
    windows = max(1, math.ceil(rows / vps))
    loads = zipf_loads(vps, VPS_PER_QUEUE, exponent=exponent, seed=0)
    physical = list(range(pps))
    current = placement_for(queue_sizes(loads), physical)
    now_ms = int(time.time() * 1000) // window_ms * window_ms
    starts = [now_ms - (windows - i) * window_ms for i in range(windows)]
    node_ids = [f"w{i}" for i in range(nodes)]
    with tempfile.TemporaryDirectory(prefix="vpq-bench-rebalance-") as tmp:
        stats_dir = Path(tmp) / "stats"
        stage(f"writing {windows * vps} rows of synthetic statistics")
        t0 = time.perf_counter()
        written = write_stats(stats_dir, stats_windows(loads, current, starts, window_ms, node_ids, noise=0.05), window_ms)
        write_s = time.perf_counter() - t0
        stage(f"starting Spark ({master})")
        t0 = time.perf_counter()
        spark = make_spark(master, shuffle_partitions=4, extra_conf=spark_conf)
        spark_start_s = time.perf_counter() - t0
        try:
            runs: list[tuple[float, float]] = []
            outcome = None
            with SparkWatcher(spark, stages.detail) if stages is not None else contextlib.nullcontext():
                for i in range(repeat):
                    stage(f"job run {i + 1}/{repeat}: read + aggregate + EMA + plan")
                    t0 = time.perf_counter()
                    outcome = rebalance_once(spark, current, physical, now_ms, settings, stats_uri=str(stats_dir))
                    total = time.perf_counter() - t0
                    runs.append((total, outcome.plan_ms / 1000.0))
            stage("stopping Spark")
        finally:
            stop_spark(spark)
    assert outcome is not None
    plan = outcome.plan
    if plan.refused:
        raise RuntimeError(f"the job refused the synthetic statistics: {plan.refused}")
    if chart is not None:
        write_chart(plan, chart, target=settings.target_imbalance)
    return {
        "rows": written,
        "vps": vps,
        "windows": windows,
        "nodes": nodes,
        "physical_partitions": pps,
        "master": master,
        "write_stats_s": round(write_s, 3),
        "spark_start_s": round(spark_start_s, 3),
        "job_total_s_first": round(runs[0][0], 3),
        "job_total_s_best": round(min(r[0] for r in runs), 3),
        "plan_s_best": round(min(r[1] for r in runs), 3),
        "imbalance_before": round(plan.imbalance_before.combined, 4),
        "imbalance_after": round(plan.imbalance_after.combined, 4),
        "imbalance_after_bytes": round(plan.imbalance_after.bytes, 4),
        "imbalance_after_msgs": round(plan.imbalance_after.msgs, 4),
        "moves_made": len(plan.moves),
        "moves_min": plan.moves_min,
        "splits": len(plan.splits),
        "max_moves_per_run": settings.max_moves_per_run,
        "target_imbalance": settings.target_imbalance,
    }


def bench_rebalance(
    rows: int = typer.Option(100_000, min=1, help="vp-window rows of synthetic statistics"),
    master: str = typer.Option("local[2]", help="Spark master URL"),
    vps: int = typer.Option(10_000, min=VPS_PER_QUEUE, help="virtual partitions (multiple of 16)"),
    pps: int = typer.Option(8, min=1, help="physical partitions"),
    nodes: int = typer.Option(2, min=1, help="write nodes writing statistics"),
    exponent: float = typer.Option(1.0, min=0.0, help="Zipf exponent of the per-vp traffic"),
    repeat: int = typer.Option(2, min=1, help="runs on the same Spark session"),
    chart: Path | None = typer.Option(None, help="also write the before/after PNG chart here"),
    conf: Optional[list[str]] = typer.Option(
        None, "--conf", metavar="KEY=VALUE", help="Spark configuration, e.g. --conf spark.executor.memory=512m (repeatable)"
    ),
) -> None:
    """Time the Spark remap job (read + aggregate + EMA + plan) on synthetic statistics."""
    if vps % VPS_PER_QUEUE:
        raise typer.BadParameter(f"--vps must be a multiple of {VPS_PER_QUEUE}")
    spark_conf = {}
    for item in conf or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"--conf expects KEY=VALUE, got {item!r}")
        spark_conf[key.strip()] = value
    with Stages() as stages:  # progress on stderr; figures and the JSON line on stdout
        r = run_bench(rows, master, vps, pps, nodes, exponent, repeat, chart, stages, spark_conf)
    typer.echo(f"statistics: {r['rows']} rows ({r['vps']} vps x {r['windows']} windows, {nodes} nodes), written in {r['write_stats_s']} s")
    typer.echo(f"spark start ({master}): {r['spark_start_s']} s")
    typer.echo(f"job end to end (read + aggregate + EMA + plan): first {r['job_total_s_first']} s, best {r['job_total_s_best']} s (plan {r['plan_s_best']} s)")
    typer.echo(
        f"imbalance max/mean: {r['imbalance_before']} -> {r['imbalance_after']} "
        f"(bytes {r['imbalance_after_bytes']}, msgs {r['imbalance_after_msgs']}; target {r['target_imbalance']})"
    )
    typer.echo(f"moves: {r['moves_made']} made, lower bound {r['moves_min']} (cap {r['max_moves_per_run']}); splits: {r['splits']}")
    typer.echo(json.dumps(r))
