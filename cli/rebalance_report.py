"""What ``vpq rebalance`` prints for one run (the command itself is wired by the
platform: it finds Redis, reads the current map and live pps, calls
``spark_rebalance.runner.rebalance_once``, publishes unless ``--dry-run``, then
calls ``print_outcome``).

``print_outcome`` renders the plan (summary, moves, per-partition load before
and after), the timings, writes the before/after chart under
``<data_dir>/rebalance/`` (not for refused plans) and, last, one JSON line with
the plan summary (without the full placement). Returns the chart path.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from vpq.config.settings import RebalanceSettings
from vpq.spark_rebalance.report import chart_path, render_plan, write_chart

if TYPE_CHECKING:  # pyspark is loaded by the command that runs Spark, not with the CLI
    from vpq.spark_rebalance.runner import RebalanceOutcome


def print_outcome(
    outcome: RebalanceOutcome,
    console: Console,
    data_dir: str | Path,
    now_ms: int,
    settings: RebalanceSettings,
    dry_run: bool,
) -> Path | None:
    """Print one run's report; see the module docstring."""
    plan = outcome.plan
    if dry_run:
        console.print("[bold]dry run[/]: the proposal below is not published")
    render_plan(plan, console, target=settings.target_imbalance)
    console.print(f"timings: job {outcome.job_ms / 1000:.2f} s, planning {outcome.plan_ms / 1000:.2f} s")
    chart: Path | None = None
    if plan.refused is None:
        chart = write_chart(plan, chart_path(data_dir, now_ms), target=settings.target_imbalance)
        console.print(f"chart: {chart}")
    summary = plan.to_dict()
    summary.pop("placement")
    summary.update({"dry_run": dry_run, "chart": str(chart) if chart else None,
                    "job_ms": round(outcome.job_ms, 1), "plan_ms": round(outcome.plan_ms, 1)})
    console.print(json.dumps(summary), soft_wrap=True, markup=False, highlight=False)
    return chart
