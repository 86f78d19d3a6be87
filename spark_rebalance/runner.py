"""One remap run: Spark job -> planner -> ``RebalanceOutcome`` (what ``vpq
rebalance`` prints and, unless dry-run, publishes).

``rebalance_once`` never raises for bad statistics: stale or incomplete
statistics give a refused plan (``plan.refused`` says why) that changes
nothing. It does not publish: the caller compare-and-swaps
``plan.placement.next_epoch()`` against the epoch it read (metadata layer).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import SparkSession

from vpq.config.settings import QueueDefaults, RebalanceSettings
from vpq.spark_rebalance.job import JobOptions, JobResult, StatisticsError, run_job
from vpq.spark_rebalance.plan_model import Plan, PlannerOptions
from vpq.spark_rebalance.planner import plan as make_plan
from vpq.virtual_partitions.placement import PlacementMap

STATS_SUBDIR = "stats"


def default_stats_uri(data_dir: str | Path, settings: RebalanceSettings) -> str:
    """``settings.stats_uri`` when set, else ``<data_dir>/stats`` (absolute)."""
    if settings.stats_uri:
        return settings.stats_uri
    return str((Path(data_dir) / STATS_SUBDIR).resolve())


@dataclass(frozen=True)
class RebalanceOutcome:
    """The plan, the job result it came from (None when refused) and timings."""

    plan: Plan
    job: JobResult | None
    job_ms: float
    plan_ms: float


def rebalance_once(
    spark: SparkSession,
    current: PlacementMap,
    physical_partitions: Sequence[int],
    now_ms: int,
    settings: RebalanceSettings,
    *,
    stats_uri: str,
    queue_defaults: QueueDefaults | None = None,
    expected_nodes: Collection[str] | None = None,
    job_options: JobOptions | None = None,
    planner_options: PlannerOptions | None = None,
    progress: Callable[[str], None] | None = None,
) -> RebalanceOutcome:
    """Read and smooth the statistics, then plan against ``current``. ``progress``
    (optional) is called with each stage's name as it starts (``job.run_job``'s, then
    planning)."""
    t0 = time.perf_counter()
    try:
        job = run_job(
            spark,
            stats_uri,
            now_ms,
            settings,
            current_vps={q: qp.virtual_partitions for q, qp in current.queues.items()},
            expected_nodes=expected_nodes,
            options=job_options,
            progress=progress,
        )
    except StatisticsError as e:
        job_ms = (time.perf_counter() - t0) * 1000.0
        refused = Plan.refusal(current, len(set(physical_partitions)), e.reason)
        return RebalanceOutcome(refused, None, job_ms, 0.0)
    t1 = time.perf_counter()
    if progress is not None:
        progress("planning moves")
    opts = planner_options or PlannerOptions.from_settings(settings, queue_defaults)
    plan = make_plan(current, job.loads, physical_partitions, opts)
    t2 = time.perf_counter()
    notes = [
        f"statistics: {len(job.windows)} complete window(s) from {len(job.nodes)} node(s), newest ending at "
        f"{job.horizon_ms} ms; {job.dropped_windows} incomplete window(s) left out"
    ]
    if job.dropped_queues:
        notes.append(f"statistics of {len(job.dropped_queues)} queue(s) not in the map ignored")
    plan = dataclasses.replace(plan, reasons=tuple(notes) + plan.reasons)
    return RebalanceOutcome(plan, job, (t1 - t0) * 1000.0, (t2 - t1) * 1000.0)
