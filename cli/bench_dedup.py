"""``vpq bench dedup``: produce throughput at batch 100 with a ``dedup_id`` on every
message against without, alternating rounds, medians (:mod:`load.dedup_bench`).

Prints a line per round and variant, the medians and their ratio, and as the last line
the summary as JSON; writes every figure to ``DIR/dedup-<UTC stamp>.json``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from vpq.cli.progress import Stages
from vpq.common import event_loop


def bench_dedup(
    rounds: int = typer.Option(5, min=1, help="rounds; each runs both variants (order alternates), figures are medians"),
    seconds: float = typer.Option(5.0, min=0.1, help="seconds of each variant's run in a round"),
    batch: int = typer.Option(100, min=1, max=1000, help="messages per request"),
    producers: int = typer.Option(16, min=1, help="closed-loop producer tasks"),
    data_dir: Path = typer.Option(Path(".vpq/bench"), help="where the results file and the platform's data go"),
) -> None:
    """What a dedup_id on every message costs produce throughput."""
    from vpq.load.ceiling import CeilingConfig
    from vpq.load.dedup_bench import run_dedup_bench

    cfg = CeilingConfig(systems=("vpq",), rounds=rounds, seconds=seconds, batch=batch, producers=producers, data_dir=data_dir)
    with Stages() as stages:
        stages.stage(f"dedup: 2 variants x {rounds} round(s) of {seconds:g} s")
        result = event_loop.run(run_dedup_bench(cfg, echo=stages.follow))
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / f"dedup-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    path.write_text(json.dumps(result, indent=1))
    s = result["summary"]
    typer.echo("")
    typer.echo(f"{'variant':<8} {'median msg/s':>13}  rounds")
    for name in ("dedup", "plain"):
        typer.echo(f"{name:<8} {s[name]['msgs_per_s'] or 0:>13,.0f}  {s[name]['round_msgs_per_s']}")
    typer.echo(f"dedup / plain: {s['ratio']} (goal >= {s['goal']}: {'met' if s['met'] else 'NOT met'})")
    typer.echo(f"results: {path}")
    typer.echo(json.dumps({"bench": "dedup", **s}))
