"""``vpq bench capacity``: vpq's server capacity under wrk against Redis Streams under
redis-benchmark, side by side (:mod:`load.capacity`).

Prints a line per round and system, a summary, and as the last line the summary as JSON;
writes every figure to ``DIR/capacity-<UTC stamp>.json``. Exits 1 when vpq or Redis
could not be measured (wrk or redis-benchmark missing), after saying why.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from vpq.cli.progress import Stages
from vpq.common import event_loop


def bench_capacity(
    rounds: int = typer.Option(3, min=1, help="rounds; the systems alternate, figures are medians"),
    seconds: float = typer.Option(5.0, min=1.0, help="seconds of each run"),
    batch: int = typer.Option(100, min=1, max=10_000, help="messages per wrk request"),
    connections: int = typer.Option(16, min=1, help="wrk connections and redis-benchmark clients"),
    pipeline: int = typer.Option(100, min=1, help="redis-benchmark commands in flight per client"),
    value_bytes: int = typer.Option(1024, min=1, help="bytes of each message's value"),
    physical_partitions: int = typer.Option(8, min=1, help="physical partitions of the vpq under test"),
    gateway_workers: int = typer.Option(1, min=1, max=64, help="gateway processes of the vpq under test"),
    install: bool = typer.Option(True, help="apt-get install wrk when it is missing"),
    data_dir: Path = typer.Option(Path(".vpq/bench"), help="where the results file and the servers' data go"),
) -> None:
    """Server capacity with native load generators: vpq (wrk) against Redis Streams
    (redis-benchmark, appendfsync always)."""
    from vpq.load.capacity import CapacityConfig, report_lines, run_capacity

    cfg = CapacityConfig(
        rounds=rounds, seconds=seconds, batch=batch, connections=connections, pipeline=pipeline,
        value_bytes=value_bytes, physical_partitions=physical_partitions, gateway_workers=gateway_workers,
        install=install, data_dir=data_dir,
    )  # fmt: skip
    with Stages() as stages:
        stages.stage(f"capacity: {rounds} round(s) of {seconds:g} s per system")
        result = event_loop.run(run_capacity(cfg, echo=stages.follow))
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / f"capacity-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    path.write_text(json.dumps(result, indent=1))
    typer.echo("")
    for line in report_lines(result["summary"]):
        typer.echo(line)
    typer.echo(f"results: {path}")
    typer.echo(json.dumps({"bench": "capacity", **result["summary"]}))
    if {"vpq", "redis"} & set(result["summary"]["skipped"]):
        raise typer.Exit(1)  # the figure the command exists for could not be measured
