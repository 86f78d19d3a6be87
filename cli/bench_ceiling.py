"""``vpq bench ceiling``: scenario 1 at batch 100 against the floor of vpq's own shape
(stand-in servers that do no work) and Redis Streams, side by side (:mod:`load.ceiling`).

Prints a line per round and system, a summary table, and as the last line the summary
as JSON; writes every figure to ``DIR/ceiling-<UTC stamp>.json``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from vpq.cli.progress import Stages
from vpq.common import event_loop


def bench_ceiling(
    systems: str = typer.Option("null-1hop,null-2hop,redis,vpq", help="comma-separated: null-1hop,null-2hop,redis,vpq"),
    rounds: int = typer.Option(3, min=1, help="rounds; every system runs once per round, figures are medians"),
    seconds: float = typer.Option(3.0, min=0.1, help="seconds of each system's run in a round"),
    batch: int = typer.Option(100, min=1, max=1000, help="messages per request"),
    producers: int = typer.Option(16, min=1, help="closed-loop producer tasks"),
    gateway_workers: int = typer.Option(1, min=1, max=64, help="gateway processes of the vpq under test"),
    data_dir: Path = typer.Option(Path(".vpq/bench"), help="where the results file and owned servers' data go"),
) -> None:
    """How far vpq is from the floor of its two HTTP hops, next to Redis (scenario 1)."""
    from vpq.load.ceiling import CeilingConfig, parse_systems, report_lines, run_ceiling

    try:
        chosen = parse_systems(systems)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    cfg = CeilingConfig(
        systems=chosen, rounds=rounds, seconds=seconds, batch=batch, producers=producers, data_dir=data_dir,
        gateway_workers=gateway_workers,
    )  # fmt: skip
    with Stages() as stages:  # the live line shows the step running now, on stderr
        stages.stage(f"ceiling: {len(chosen)} system(s) x {rounds} round(s) of {seconds:g} s")
        result = event_loop.run(run_ceiling(cfg, echo=stages.follow))
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / f"ceiling-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    path.write_text(json.dumps(result, indent=1))
    typer.echo("")
    for line in report_lines(result["summary"]):
        typer.echo(line)
    typer.echo(f"results: {path}")
    typer.echo(json.dumps({"bench": "ceiling", **result["summary"], "skipped": result["skipped"]}))
