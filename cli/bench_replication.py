"""``vpq bench replication`` and ``vpq bench replication-faults``.

``replication`` (``load.replication_bench``): produce throughput and request p99 of
R = 2 against R = 1 in alternating rounds at batch ``--batch`` (two platforms started
side by side), then the time without produce on a partition after a SIGKILL of its
leader, over ``--kills`` kills. ``--quick``: 2 rounds of 2 s and 3 kills.

``replication-faults`` (``load.replication_faults``): ``--cycles`` of each fault kind
under a retrying per-key producer, then a checking consumer. ``--quick``: 2 cycles.
Exits 1 when an acknowledged message was lost or a key's order broken.

Both print one line per round / kill / cycle and, LAST, one JSON line with the figures.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path
from typing import Optional

import orjson
import typer

from vpq.load.replication_bench import run_failover, run_throughput
from vpq.load.replication_faults import FAULTS, FaultConfig, run_fault_campaign


def _work(data_dir: Optional[Path], prefix: str) -> Path:
    parent = data_dir if data_dir is not None else Path(tempfile.gettempdir())
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))


def bench_replication(
    rounds: int = typer.Option(6, help="alternating produce rounds per replication factor"),
    seconds: float = typer.Option(5.0, help="length of one produce round"),
    batch: int = typer.Option(100, help="messages per produce request"),
    concurrency: int = typer.Option(8, help="concurrent producers"),
    kills: int = typer.Option(20, help="leader kills of the failover figure (0: skip it)"),
    lease_ttl_ms: int = typer.Option(2000, help="lease TTL of the failover platform"),
    quick: bool = typer.Option(False, help="2 rounds of 2 s and 3 kills (CI)"),
    data_dir: Optional[Path] = typer.Option(None, help="parent of the temporary data directories"),
) -> None:
    """Produce cost of replication (R=2 vs R=1) and time without produce after a leader kill."""
    if quick:
        rounds, seconds, kills = 2, 2.0, 3
    work = _work(data_dir, "vpq-bench-replication-")
    try:
        out = {"throughput": asyncio.run(
            run_throughput(work, typer.echo, rounds=rounds, seconds=seconds, concurrency=concurrency, batch=batch)
        )}
        t = out["throughput"]
        typer.echo(f"R=1: {t['r1']['messages_per_s']:.0f} msg/s, p99 {t['r1']['request_p99_ms']} ms; "
                   f"R=2: {t['r2']['messages_per_s']:.0f} msg/s, p99 {t['r2']['request_p99_ms']} ms; "
                   f"R2/R1 throughput {t['throughput_ratio_r2_r1']} (goal >= 0.6), p99 {t['p99_ratio_r2_r1']}")
        if kills > 0:
            out["failover"] = asyncio.run(run_failover(work, typer.echo, kills=kills, lease_ttl_ms=lease_ttl_ms))
            f = out["failover"]
            typer.echo(f"time without produce after a leader kill over {kills} kills: p50 {f['no_produce_p50_s']} s, "
                       f"p99 {f['no_produce_p99_s']} s (goal < 5 s), max {f['no_produce_max_s']} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    typer.echo(orjson.dumps(out).decode())


def bench_replication_faults(
    cycles: int = typer.Option(20, help="cycles of each fault"),
    faults: str = typer.Option(",".join(FAULTS), help="comma-separated fault kinds"),
    seed: int = typer.Option(0, help="seed of the damage (cut points, flipped bits)"),
    quick: bool = typer.Option(False, help="2 cycles of each fault (CI)"),
    data_dir: Optional[Path] = typer.Option(None, help="parent of the temporary data directory"),
) -> None:
    """Faults of a replicated platform under load; no acknowledged message may be lost."""
    kinds = tuple(f.strip() for f in faults.split(",") if f.strip())
    unknown = [f for f in kinds if f not in FAULTS]
    if unknown:
        typer.echo(f"unknown fault(s) {unknown}; choose among {list(FAULTS)}", err=True)
        raise typer.Exit(2)
    if quick:
        cycles = 2
    work = _work(data_dir, "vpq-bench-faults-")
    try:
        result = asyncio.run(run_fault_campaign(FaultConfig(faults=kinds, cycles=cycles, seed=seed), work, typer.echo))
    except Exception:
        typer.echo(f"the campaign failed; its data and logs are kept in {work}", err=True)
        raise
    if result["lost"] or result["reordered"]:
        typer.echo(f"data and logs kept in {work}", err=True)
    else:
        shutil.rmtree(work, ignore_errors=True)
    typer.echo(f"acknowledged {result['acked']}, delivered {result['delivered']}, lost {result['lost']}, "
               f"reordered {result['reordered']}, duplicates {result['duplicates']}")
    typer.echo(orjson.dumps(result).decode())
    if result["lost"] or result["reordered"]:
        raise typer.Exit(1)
