"""``vpq bench queues``: control-plane scale, creating queues up to ``--queues``
(:mod:`load.queue_scale`) on a platform of its own (``vpq up`` with
``--physical-partitions``, fresh data dir, removed afterwards; ``--vpq`` starts another
checkout's ``vpq`` instead, to compare).

Prints one line per step (queues so far, create ms per queue, first-produce p99, RSS of
gateway / write node / read node, Redis ``used_memory``), then the summary, then one JSON
line; writes every figure to ``DIR/queues-<UTC stamp>.json``.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import typer

from vpq.common import event_loop

_MB = 2**20


def _step_line(s: dict[str, Any]) -> str:
    rss = s["rss"]
    return (
        f"{s['queues']:>9,} queues  create {s['create_ms_per_queue']:7.3f} ms/queue "
        f"({s['create_cpu_ms_per_queue']:6.3f} CPU ms)  "
        f"first produce p99 {s['first_produce_p99_ms']:7.2f} ms  RSS gateway/write/read "
        f"{rss.get('gateway', 0) / _MB:6.1f} / {rss.get('write', 0) / _MB:6.1f} / {rss.get('read', 0) / _MB:6.1f} MB  "
        f"redis {s['redis_used'] / _MB:7.1f} MB  load {s['load1']:5.2f}"
    )


async def _run(
    queues: int, step: int, concurrency: int, vps: int, probes: int, partitions: int, data_root: Path,
    binary: Path | None,
) -> dict[str, Any]:
    from vpq.common.runfiles import read_redis_url
    from vpq.load.peers.vpq_process import VpqProcess
    from vpq.load.queue_scale import run_queue_scale

    data_root.mkdir(parents=True, exist_ok=True)
    data_dir = Path(tempfile.mkdtemp(prefix="vpq-bench-queues-", dir=data_root))
    proc = VpqProcess(data_dir, physical_partitions=partitions, binary=binary)
    try:
        await proc.start(timeout_s=90.0)
        redis_url = read_redis_url(data_dir)
        assert redis_url is not None and proc.pid is not None
        return await run_queue_scale(
            proc.url, redis_url, proc.pid, total=queues, step=step, concurrency=concurrency, vps=vps, probes=probes,
            on_step=lambda s: typer.echo(_step_line(s)),
        )
    finally:
        proc.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def bench_queues(
    queues: int = typer.Option(100_000, min=1, help="queues to create in all (1,000,000 for the full run)"),
    step: int = typer.Option(0, min=0, help="queues per step (0: queues / 50, at least 1,000)"),
    concurrency: int = typer.Option(64, min=1, help="queue PUTs in flight"),
    vps: int = typer.Option(4, min=1, help="virtual partitions per queue"),
    probes: int = typer.Option(20, min=0, help="queues per step created and produced to at once (first-produce latency)"),
    partitions: int = typer.Option(8, min=1, help="physical partitions of the platform"),
    data_dir: Path = typer.Option(Path(".vpq/bench"), help="where the results file and the platform's data go"),
    vpq: Path | None = typer.Option(None, help="the `vpq` command to start (another checkout's, to compare); "
                                    "default: this one's"),
) -> None:
    """Create queues up to --queues: create time per step, first produce, memory per queue."""
    step = step or max(1_000, queues // 50)
    typer.echo(f"vpq bench queues: {queues:,} queues of {vps} vps in steps of {step:,}, {concurrency} PUTs in flight, "
               f"{probes} first-produce probes per step, {partitions} physical partitions")
    result = event_loop.run(_run(queues, step, concurrency, vps, probes, partitions, data_dir, vpq))
    s = result["summary"]
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / f"queues-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    path.write_text(json.dumps(result, indent=1))
    typer.echo("")
    typer.echo(f"create ms/queue: first 10 % {s['create_ms_per_queue_first_10pct']}, last 10 % "
               f"{s['create_ms_per_queue_last_10pct']}, ratio {s['create_ratio']} (goal <= 1.2)")
    typer.echo(f"create CPU ms/queue (platform processes): first 10 % {s['create_cpu_ms_per_queue_first_10pct']}, "
               f"last 10 % {s['create_cpu_ms_per_queue_last_10pct']}, ratio {s['create_cpu_ratio']}; "
               f"load average {s['load1_min_max'][0]} to {s['load1_min_max'][1]}")
    typer.echo(f"first produce to a new queue: p50 {s['first_produce_p50_ms']} ms, p99 {s['first_produce_p99_ms']} ms "
               f"over {s['first_produce_samples']} queues (goal p99 < 50 ms)")
    kb = s["kb_per_queue"]
    typer.echo("RSS per queue: " + ", ".join(f"{r} {kb[r]} KB" for r in ("gateway", "write", "read") if r in kb)
               + " (goal < 0.5 KB)")
    typer.echo(f"redis: {s['redis_bytes_per_queue']} bytes per queue, used_memory {s['redis_used_mb']} MB")
    typer.echo(f"GET /v1/maps/current: {s['map_read']['queues']:,} queues in {s['map_read']['seconds']} s")
    typer.echo(f"results: {path}")
    typer.echo(json.dumps({"bench": "queues", **s}))
