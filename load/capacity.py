"""``vpq bench capacity``: server capacity measured with native load generators, so no
Python client sets the pace.

* vpq: ``vpq up`` (own data directory, ``physical_partitions`` partitions,
  ``gateway_workers`` gateway processes, durable acks)
  driven by ``wrk``: ``connections`` connections POST batch-``batch`` JSON bodies of
  ``value_bytes`` values; messages per second = 2xx answers x batch / duration.
* Redis Streams: its own ``redis-server`` with AOF ``appendfsync always`` driven by
  ``redis-benchmark``: ``connections`` clients, pipeline ``pipeline``, ``XADD`` of a
  ``value_bytes`` field; messages per second = its requests per second.
* NATS JetStream: ``nats bench`` when natscli is on PATH; otherwise reported as skipped
  with the reason (Debian ships no natscli).

Rounds alternate the order of the systems; each figure is the median of its rounds, and
the ratio ``vpq / redis`` is set against the goal (2.0). :func:`summarise` is pure.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vpq.common.redis_server import RedisServer, RedisServerError
from vpq.load import native_tools
from vpq.load.peers.vpq_process import VpqProcess
from vpq.sdk.client import AsyncClient

GOAL_RATIO = 2.0
QUEUE = "capacity"
WRK_THREADS = 2


@dataclass(frozen=True)
class CapacityConfig:
    rounds: int = 3
    seconds: float = 5.0
    batch: int = 100
    connections: int = 16
    pipeline: int = 100
    value_bytes: int = 1024
    physical_partitions: int = 8
    gateway_workers: int = 1
    install: bool = True
    data_dir: Path = Path(".vpq/bench")


@dataclass
class Run:
    system: str
    round: int
    msgs_per_s: float
    seconds: float
    detail: dict[str, Any] = field(default_factory=dict)


async def _run(argv: list[str], timeout_s: float) -> str:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, stdin=asyncio.subprocess.DEVNULL
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise RuntimeError(f"{argv[0]} did not finish within {timeout_s:g}s") from None
    if proc.returncode != 0:
        raise RuntimeError(f"{Path(argv[0]).name} exited with {proc.returncode}: {out.decode(errors='replace')[-300:]}")
    return out.decode(errors="replace")


async def run_wrk(wrk: str, url: str, cfg: CapacityConfig, round_no: int, script: Path) -> Run:
    argv = native_tools.wrk_command(wrk, url, str(script), cfg.connections, WRK_THREADS, cfg.seconds)
    out = await _run(argv, cfg.seconds + 60)
    stats = native_tools.parse_wrk(out)
    seconds = stats["duration_us"] / 1e6
    rate = stats["ok"] * cfg.batch / seconds if seconds > 0 else 0.0
    return Run("vpq", round_no, rate, seconds, stats)


async def run_redis_benchmark(tool: str, port: int, cfg: CapacityConfig, round_no: int, requests: int) -> Run:
    argv = native_tools.redis_benchmark_command(tool, port, cfg.connections, cfg.pipeline, requests, cfg.value_bytes)
    started = time.monotonic()
    out = await _run(argv, cfg.seconds * 20 + 120)
    elapsed = time.monotonic() - started
    rate = native_tools.parse_redis_benchmark_csv(out)
    return Run("redis", round_no, rate, elapsed, {"requests": requests})


def summarise(runs: list[Run], skipped: dict[str, str]) -> dict[str, Any]:
    """Medians per system and the vpq / redis ratio against the goal."""
    by: dict[str, list[float]] = {}
    for r in runs:
        by.setdefault(r.system, []).append(r.msgs_per_s)
    medians = {name: statistics.median(rates) for name, rates in by.items()}
    out: dict[str, Any] = {"msgs_per_s": {k: round(v) for k, v in medians.items()}, "goal_ratio": GOAL_RATIO}
    for peer in ("redis", "nats"):
        if "vpq" in medians and medians.get(peer):
            ratio = medians["vpq"] / medians[peer]
            out[f"vpq_over_{peer}"] = round(ratio, 3)
            out[f"goal_met_{peer}"] = ratio >= GOAL_RATIO
    out["skipped"] = dict(skipped)
    return out


def report_lines(summary: dict[str, Any]) -> list[str]:
    lines = []
    if "gateway_workers" in summary:
        lines.append(f"vpq gateway workers: {summary['gateway_workers']}")
    lines.append("system   msg/s (median)")
    for name, rate in summary["msgs_per_s"].items():
        lines.append(f"{name:<8} {rate:>12,}")
    for peer in ("redis", "nats"):
        if f"vpq_over_{peer}" in summary:
            ok = "met" if summary[f"goal_met_{peer}"] else "NOT met"
            lines.append(f"vpq / {peer}: {summary[f'vpq_over_{peer}']:.2f} (goal >= {GOAL_RATIO:g}: {ok})")
    for name, why in summary["skipped"].items():
        lines.append(f"skipped {name}: {why}")
    return lines


async def run_capacity(cfg: CapacityConfig, echo: Callable[[str], None] = print) -> dict[str, Any]:
    skipped: dict[str, str] = {}
    wrk = native_tools.find("wrk")
    if wrk is None and cfg.install:
        ok, what = native_tools.install("wrk")
        echo(f"wrk: {what}")
        wrk = native_tools.find("wrk") if ok else None
    if wrk is None:
        skipped["vpq"] = "wrk is not installed (apt-get install wrk); vpq cannot be measured natively"
    redis_tool = native_tools.find("redis-benchmark")
    if redis_tool is None:
        skipped["redis"] = "redis-benchmark is not installed (it comes with redis-server: apt-get install redis-tools)"
    if native_tools.find("nats") is None:
        skipped["nats"] = "natscli ('nats bench') is not on PATH; Debian ships none, so NATS is not measured natively"
    runs: list[Run] = []
    cfg.data_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cfg.data_dir, prefix="capacity-") as tmp:
        work = Path(tmp)
        vpq: VpqProcess | None = None
        redis: RedisServer | None = None
        try:
            if wrk is not None:
                vpq = VpqProcess(
                    work / "vpq",
                    physical_partitions=cfg.physical_partitions,
                    extra_args=["--gateway-workers", str(cfg.gateway_workers)],
                )
                await vpq.start()
                async with AsyncClient(vpq.url, timeout=30.0) as client:
                    await client.put_queue(QUEUE, virtual_partitions=64)
                script = work / "produce.lua"
                script.write_text(native_tools.wrk_script(native_tools.produce_body(cfg.batch, cfg.value_bytes)))
                url = f"{vpq.url}/v1/queues/{QUEUE}/messages"
            if redis_tool is not None:
                redis = RedisServer(data_dir=work / "redis", appendonly=True, appendfsync="always")
                try:
                    redis.start()
                except RedisServerError as exc:
                    skipped["redis"] = f"cannot start redis-server: {exc}"
                    redis = None
            redis_requests = 20_000
            if redis is not None and redis_tool is not None:  # size the runs to about cfg.seconds
                probe = await run_redis_benchmark(redis_tool, redis.port, cfg, 0, redis_requests)
                redis_requests = max(10_000, int(probe.msgs_per_s * cfg.seconds))
            for round_no in range(1, cfg.rounds + 1):
                order = ["vpq", "redis"] if round_no % 2 else ["redis", "vpq"]
                for name in order:
                    if name == "vpq" and vpq is not None and wrk is not None:
                        run = await run_wrk(wrk, url, cfg, round_no, script)
                        runs.append(run)
                        d = run.detail
                        echo(
                            f"round {round_no} vpq   {run.msgs_per_s:>10,.0f} msg/s  p99 {d['p99_us'] / 1000:.1f} ms  "
                            f"non-2xx {d['bad_status']} socket errors {d['socket_errors']}"
                        )
                    elif name == "redis" and redis is not None and redis_tool is not None:
                        run = await run_redis_benchmark(redis_tool, redis.port, cfg, round_no, redis_requests)
                        runs.append(run)
                        echo(f"round {round_no} redis {run.msgs_per_s:>10,.0f} msg/s  ({redis_requests} XADD)")
        finally:
            if redis is not None:
                redis.stop()
            if vpq is not None:
                vpq.stop()
    summary = summarise(runs, skipped)
    summary["gateway_workers"] = cfg.gateway_workers
    return {
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in cfg.__dict__.items()},
        "runs": [r.__dict__ for r in runs],
        "summary": summary,
    }
