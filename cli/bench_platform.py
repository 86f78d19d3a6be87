"""``vpq bench produce|latency|drain``: the whole platform measured through its gateway.

Each command measures a running platform (``--url``) or starts its own ``vpq up`` on a
fresh temporary data directory and a free port (``--physical-partitions``, default 4)
and stops it afterwards. The logic lives in :mod:`load.platform_bench`; this module
parses options, runs ``--runs`` repetitions on one platform, prints readable figures
and, as the LAST line, one JSON object: the median of each headline figure over the
runs (failure counts: the worst run's), the platform, the host's CPU count and load
average before and after (a machine already busy before the run makes the figures
noisy, and the command says so), and
every run's full figures, each with ``platform_cores``: the cores each platform role
(gateway, write_nodes, read_nodes, redis, supervisor) kept busy during that run, when
the platform runs on this machine (the one near 1.0, single-threaded, is the limit).

Exit status: 2 when there is no platform to measure; 1 when a run failed its checks
(produce errors; lost messages; lost, reordered or unexpected messages or an
unfinished drain); else 0.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Optional

import typer

from vpq.cli.progress import Stages
from vpq.common import event_loop
from vpq.load.cpu_probe import PROBE_S, machine_line, probe_cpu
from vpq.load.platform_bench.drain import DrainConfig, run_drain
from vpq.load.platform_bench.latency import LatencyConfig, run_latency
from vpq.load.platform_bench.measure import median_of_runs
from vpq.load.platform_bench.proc_cpu import cpu_by_role, cpu_shares
from vpq.load.platform_bench.produce import ProduceConfig, run_produce
from vpq.load.platform_bench.target import PlatformTarget, TargetUnavailable
from vpq.sdk.client import AsyncClient
from vpq.sdk.errors import VpqClientError

# a benchmark run: (client, echo, CPU seconds per platform role sampler or None) -> figures
Runner = Callable[
    [AsyncClient, Callable[[str], None], Optional[Callable[[], dict[str, float]]]], Awaitable[dict[str, Any]]
]

# headline figures: the median over the runs; counts of failures: the worst run's
PRODUCE_FIELDS = ("messages_per_s", "mb_per_s", "request_p50_ms", "request_p99_ms", "client_cpu_share")
PRODUCE_COUNTS = ("errors",)
LATENCY_FIELDS = ("e2e_p50_ms", "e2e_p99_ms", "e2e_p999_ms", "e2e_max_ms", "produce_ack_p50_ms", "produce_ack_p99_ms")
LATENCY_COUNTS = ("lost", "duplicates", "send_errors")
DRAIN_FIELDS = ("rate_one_per_s", "rate_many_per_s", "speedup", "efficiency", "rate_many_whole_drain_per_s",
                "efficiency_whole_drain", "drain_s")
DRAIN_COUNTS = ("lost", "duplicates", "reordered", "unexpected")

# the load average (before the bench's own processes start) above which the machine is called busy
BUSY_LOAD_PER_CPU = 0.5

URL_HELP = "measure the platform at this gateway URL; without it the bench starts its own `vpq up`"
PP_HELP = "physical partitions of the platform the bench starts"
DATA_HELP = "where the bench's own platform keeps its (temporary) data; default: the system temp dir"


async def _measure(
    url: Optional[str], physical_partitions: int, data_dir: Optional[Path], runs: int, runner: Runner,
    stages: Stages,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    stages.stage(f"reaching the platform at {url}" if url else "starting a platform (vpq up)")
    async with PlatformTarget(url, physical_partitions=physical_partitions, data_root=data_dir) as target:
        stages.end()
        platform = target.describe()
        who = "started by the bench" if target.owned else "already running"
        stages.echo(
            f"platform {platform['url']} ({who}): {platform['write_nodes']} write node(s), "
            f"{platform['read_nodes']} read node(s), {platform['physical_partitions']} physical partition(s)"
        )
        results: list[dict[str, Any]] = []
        root = target.root_pid()
        sampler = (lambda: cpu_by_role(root)) if root is not None else None
        async with AsyncClient(target.url, timeout=60.0, max_connections=512) as client:
            for i in range(runs):
                if runs > 1:
                    stages.echo(f"run {i + 1}/{runs}")
                stages.stage(f"run {i + 1}/{runs}")
                cpu_before, started = (sampler() if sampler else {}), time.monotonic()
                result = await runner(client, stages.follow, sampler)
                cpu_after = sampler() if sampler else {}
                result["platform_cores"] = cpu_shares(cpu_before, cpu_after, time.monotonic() - started)
                results.append(result)
            if target.owned:
                stages.stage("stopping the platform")
        return platform, results


def execute(
    name: str, url: Optional[str], physical_partitions: int, data_dir: Optional[Path], runs: int,
    runner: Runner, fields: Sequence[str], counts: Sequence[str], show: Callable[[dict[str, Any]], list[str]],
    failed: Callable[[dict[str, Any]], bool],
) -> None:
    if runs < 1:
        raise typer.BadParameter("--runs must be >= 1")
    host: dict[str, Any] = {
        "cpus": os.cpu_count(), "load_1m_before": round(os.getloadavg()[0], 2), "cpu_probe": probe_cpu(PROBE_S),
    }
    try:
        with Stages() as stages:  # progress on stderr; figures and the JSON line on stdout
            platform, results = event_loop.run(_measure(url, physical_partitions, data_dir, runs, runner, stages))
    except TargetUnavailable as exc:
        typer.echo(f"error: {exc}", err=True)
        typer.echo(json.dumps({"bench": name, "error": str(exc)}))
        raise typer.Exit(2)
    except VpqClientError as exc:
        typer.echo(f"error: the platform failed the benchmark: {exc}", err=True)
        typer.echo(json.dumps({"bench": name, "error": str(exc)}))
        raise typer.Exit(1)
    host["load_1m_after"] = round(os.getloadavg()[0], 2)
    host["cpu_probe_after"] = probe_cpu(PROBE_S)
    headline = dict(results[-1])
    if runs > 1:
        headline.update(median_of_runs(results, fields))
        headline.update({c: max(r[c] for r in results) for c in counts})
    typer.echo(f"vpq bench {name}" + (f" (median of {runs} runs; failure counts of the worst run)" if runs > 1 else ""))
    for line in show(headline):
        typer.echo(f"  {line}")
    cores = headline.get("platform_cores") or {}
    if cores:
        typer.echo("  platform CPU, cores busy over the run: " + ", ".join(f"{k} {v:.2f}" for k, v in cores.items()))
    typer.echo("  machine: " + machine_line(host["cpu_probe"], host["cpu_probe_after"]))
    if host["cpus"] and host["load_1m_before"] > BUSY_LOAD_PER_CPU * host["cpus"]:
        typer.echo(f"  note: load average {host['load_1m_before']} on {host['cpus']} CPU(s) before the run: "
                   "other work shared the machine; the figures are noisy")
    summary = {"bench": name, **{f: headline.get(f) for f in (*fields, *counts)}, "runs": len(results),
               "platform": platform, "host": host, "results": results}
    typer.echo(json.dumps(summary))
    if any(failed(r) for r in results):
        raise typer.Exit(1)


def fmt_ms(value: Any) -> str:
    return f"{value:,.1f} ms" if isinstance(value, (int, float)) else "-"


# --------------------------------------------------------------------------- produce
def _show_produce(r: dict[str, Any]) -> list[str]:
    cpu = r.get("client_cpu_share")
    return [
        f"messages/s          {r['messages_per_s']:,.0f}",
        f"MB/s                {r['mb_per_s']:,.2f}   (10^6 bytes of message value)",
        f"request p50 / p99   {fmt_ms(r['request_p50_ms'])} / {fmt_ms(r['request_p99_ms'])}",
        f"errors              {r['errors']}",
        f"client CPU          {cpu * 100:.0f} % of one core" if isinstance(cpu, (int, float)) else "client CPU  -",
    ]


def bench_produce(
    url: Optional[str] = typer.Option(None, "--url", help=URL_HELP),
    seconds: float = typer.Option(10.0, help="measured seconds"),
    warmup: float = typer.Option(3.0, help="warm-up seconds before measuring"),
    batch: int = typer.Option(100, help="messages per produce request"),
    in_flight: int = typer.Option(8, help="produce requests in flight"),
    message_bytes: int = typer.Option(1024, help="bytes of message value"),
    keys: int = typer.Option(1024, help="distinct keys"),
    virtual_partitions: int = typer.Option(16, help="virtual partitions of the benchmark queue"),
    physical_partitions: int = typer.Option(4, help=PP_HELP),
    runs: int = typer.Option(1, help="repeat the measurement; headline figures are medians"),
    data_dir: Optional[Path] = typer.Option(None, help=DATA_HELP),
) -> None:
    """Produce throughput through the gateway (acknowledged after fsync): msg/s, MB/s, p50/p99."""
    try:
        cfg = ProduceConfig(seconds=seconds, warmup_s=warmup, batch=batch, in_flight=in_flight,
                            message_bytes=message_bytes, keys=keys, virtual_partitions=virtual_partitions)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None

    async def runner(client: AsyncClient, echo: Callable[[str], None], _cpu: Any) -> dict[str, Any]:
        return await run_produce(client, cfg, echo)

    execute("produce", url, physical_partitions, data_dir, runs, runner, PRODUCE_FIELDS, PRODUCE_COUNTS, _show_produce,
             lambda r: r["errors"] > 0 or r["messages"] == 0)


# --------------------------------------------------------------------------- latency
def _show_latency(r: dict[str, Any]) -> list[str]:
    return [
        f"end-to-end p50 / p99 / p99.9   {fmt_ms(r['e2e_p50_ms'])} / {fmt_ms(r['e2e_p99_ms'])} / {fmt_ms(r['e2e_p999_ms'])}",
        f"end-to-end max                 {fmt_ms(r['e2e_max_ms'])}",
        f"produce ack p50 / p99          {fmt_ms(r['produce_ack_p50_ms'])} / {fmt_ms(r['produce_ack_p99_ms'])}",
        f"measured messages              {r['measured_messages']:,} of {r['scheduled_measured_messages']:,} scheduled",
        f"lost / duplicates / errors     {r['lost']} / {r['duplicates']} / {r['send_errors']}",
    ]


def bench_latency(
    url: Optional[str] = typer.Option(None, "--url", help=URL_HELP),
    rate: float = typer.Option(1000.0, help="offered messages per second (open loop)"),
    seconds: float = typer.Option(10.0, help="measured seconds"),
    warmup: float = typer.Option(2.0, help="warm-up seconds at the same rate, not measured"),
    batch: int = typer.Option(5, help="messages per scheduled produce request"),
    consumers: int = typer.Option(1, help="consumers in the group"),
    message_bytes: int = typer.Option(1024, help="bytes of message value"),
    keys: int = typer.Option(256, help="distinct keys"),
    wait_ms: int = typer.Option(1000, help="consumers' long-poll wait"),
    settle: float = typer.Option(10.0, help="seconds to wait for the last deliveries"),
    physical_partitions: int = typer.Option(4, help=PP_HELP),
    runs: int = typer.Option(1, help="repeat the measurement; headline figures are medians"),
    data_dir: Optional[Path] = typer.Option(None, help=DATA_HELP),
) -> None:
    """End-to-end latency (scheduled send -> consumer receives) at a fixed rate, open loop."""
    try:
        cfg = LatencyConfig(rate=rate, seconds=seconds, warmup_s=warmup, batch=batch, consumers=consumers,
                            message_bytes=message_bytes, keys=keys, wait_ms=wait_ms, settle_s=settle)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None

    async def runner(client: AsyncClient, echo: Callable[[str], None], _cpu: Any) -> dict[str, Any]:
        return await run_latency(client, cfg, echo)

    execute("latency", url, physical_partitions, data_dir, runs, runner, LATENCY_FIELDS, LATENCY_COUNTS, _show_latency,
             lambda r: r["lost"] > 0 or r["measured_messages"] == 0)


# ----------------------------------------------------------------------------- drain
def _show_drain(r: dict[str, Any]) -> list[str]:
    n = r["consumers"]
    one = f"{'1 consumer':<27}{r['rate_one_per_s']:,.1f} msg/s"
    if r.get("ideal_per_consumer_per_s"):
        one += f"  ({r['single_consumer_share_of_ideal']} of the {r['ideal_per_consumer_per_s']:g} msg/s ideal)"
    counts = f"{r['lost']} / {r['duplicates']} / {r['reordered']} / {r['unexpected']}"
    lines = [
        one,
        f"{f'{n} consumers':<27}{r['rate_many_per_s']:,.1f} msg/s (steady), "
        f"{r['rate_many_whole_drain_per_s']:,.1f} msg/s over the whole drain ({r['drain_s']} s)",
        f"{'speed-up':<27}{r['speedup']:.2f}x",
        f"{'efficiency':<27}{r['efficiency']:.3f}  (speed-up / {n}; whole drain {r['efficiency_whole_drain']:.3f})",
        f"{'lost / dup / reord / unexp':<27}{counts}",
        f"{'messages per consumer':<27}{r['messages_per_consumer']}",
        f"{'client CPU in the drain':<27}{r['client_cores_during_drain'] * 100:.0f} % of one core",
    ]
    cores = r.get("platform_cores_during_drain") or {}
    if cores:
        lines.append(f"{'platform in the drain':<27}" + ", ".join(f"{k} {v:.2f}" for k, v in cores.items()) + " cores")
    return lines


def bench_drain(
    url: Optional[str] = typer.Option(None, "--url", help=URL_HELP),
    consumers: int = typer.Option(64, help="consumers of the scaled group"),
    backlog: int = typer.Option(40_000, help="messages produced before the drain"),
    work_ms: float = typer.Option(10.0, help="work per message (asyncio.sleep), handled sequentially"),
    single_seconds: float = typer.Option(8.0, help="how long the 1-consumer baseline runs"),
    virtual_partitions: int = typer.Option(
        256, help="virtual partitions of the benchmark queue (256: 4 per consumer, so uneven key hashing evens out)"
    ),
    keys: int = typer.Option(8192, help="distinct keys"),
    message_bytes: int = typer.Option(256, help="bytes of message value"),
    max_messages: int = typer.Option(20, help="messages per poll"),
    timeout: float = typer.Option(30.0, help="bound on the drain, seconds"),
    physical_partitions: int = typer.Option(4, help=PP_HELP),
    runs: int = typer.Option(1, help="repeat the measurement; headline figures are medians"),
    data_dir: Optional[Path] = typer.Option(None, help=DATA_HELP),
) -> None:
    """Drain rate of N consumers against 1 (10 ms of work per message); order and loss checked."""
    try:
        cfg = DrainConfig(backlog=backlog, consumers=consumers, work_ms=work_ms, single_s=single_seconds,
                          virtual_partitions=virtual_partitions, keys=keys, message_bytes=message_bytes,
                          max_messages=max_messages, timeout_s=timeout)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None

    async def runner(client: AsyncClient, echo: Callable[[str], None], cpu: Any) -> dict[str, Any]:
        return await run_drain(client, cfg, echo, cpu)

    execute("drain", url, physical_partitions, data_dir, runs, runner, DRAIN_FIELDS, DRAIN_COUNTS, _show_drain,
             lambda r: not r["order_and_loss_ok"] or r["timed_out"])
