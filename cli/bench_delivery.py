"""``vpq bench hotkey|catchup|envflood|delayed``: the delivery engine measured through the gateway.

Like ``vpq bench produce|latency|drain`` (:mod:`cli.bench_platform`): each measures
the platform at ``--url`` or starts its own ``vpq up`` on a fresh temporary data
directory, prints readable figures and, as the LAST line, one JSON object. ``--quick``
runs a small form in seconds (options given explicitly still win). The logic lives in
:mod:`load.platform_bench.hotkey`, :mod:`~load.platform_bench.catchup` and
:mod:`~load.platform_bench.envflood` and :mod:`~load.platform_bench.delayed`; these benchmarks repeat themselves internally
(``--rounds``, alternating what goes first) and report medians and ratios.

Exit status: 2 when there is no platform to measure; 1 when the run found lost,
duplicated-and-lost, reordered, unexpected or env-crossing messages, or did not
finish in time; else 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, Optional, TypeVar
from urllib.parse import urlparse

import typer

from vpq.cli.bench_platform import DATA_HELP, PP_HELP, URL_HELP, execute, fmt_ms
from vpq.load.platform_bench.catchup import CatchupConfig, run_catchup
from vpq.load.platform_bench.delayed import DelayedConfig, run_delayed
from vpq.load.platform_bench.envflood import EnvfloodConfig, run_envflood
from vpq.load.platform_bench.hotkey import HotkeyConfig, run_hotkey
from vpq.load.platform_bench.proc_cpu import platform_root, rss_by_role
from vpq.sdk.client import AsyncClient

C = TypeVar("C")
Echo = Callable[[str], None]

_QUICK_HELP = "a small form that runs in seconds (explicit options still win)"
_ROUNDS_HELP = "rounds, alternating which side goes first; figures are medians"
_CHECK_COUNTS = ("lost", "duplicates", "reordered", "unexpected")


def build_config(cls: type[C], quick: bool, **given: Any) -> C:
    """``cls()`` or ``cls.quick()``, with every option that was given (not ``None``) on top.
    ``typer.BadParameter`` when the configuration is invalid."""
    chosen = {k: v for k, v in given.items() if v is not None}
    unknown = set(chosen) - {f.name for f in fields(cls)}  # type: ignore[arg-type]
    if unknown:
        raise ValueError(f"unknown fields {sorted(unknown)}")
    try:
        base = cls.quick() if quick else cls()  # type: ignore[attr-defined]
        return replace(base, **chosen)  # type: ignore[type-var]
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def _counts(r: dict[str, Any]) -> str:
    return " / ".join(str(r.get(c, 0)) for c in _CHECK_COUNTS)


def _failed(r: dict[str, Any]) -> bool:
    return bool(r.get("timed_out")) or any(r.get(c, 0) for c in ("lost", "reordered", "unexpected", "crossed"))


# ----------------------------------------------------------------------------- hotkey
def _show_hotkey(r: dict[str, Any]) -> list[str]:
    cfg = r["config"]
    return [
        f"one hot key              {r['hot_per_s']:,.1f} msg/s",
        f"{cfg['spread_keys']:,} keys".ljust(25) + f"{r['spread_per_s']:,.1f} msg/s",
        f"ratio hot / spread       {r['ratio']:.4f}   (goal >= 0.5; per round {r['ratio_per_round']})",
        f"messages per poll        hot {r['messages_per_poll']['hot']}, spread {r['messages_per_poll']['spread']}",
        f"lost / dup / reord / unexp  {_counts(r)}",
    ]


def bench_hotkey(
    url: Optional[str] = typer.Option(None, "--url", help=URL_HELP),
    quick: bool = typer.Option(False, "--quick", help=_QUICK_HELP),
    backlog: Optional[int] = typer.Option(None, help="messages of each backlog [5000; quick 1000]"),
    spread_keys: Optional[int] = typer.Option(None, help="keys of the spread backlog [1000; quick 200]"),
    max_messages: Optional[int] = typer.Option(None, help="messages per poll [500]"),
    message_bytes: Optional[int] = typer.Option(None, help="bytes of message value [256]"),
    rounds: Optional[int] = typer.Option(None, help=_ROUNDS_HELP + " [4; quick 1]"),
    timeout: Optional[float] = typer.Option(None, help="bound on one drain, seconds [120]"),
    physical_partitions: int = typer.Option(4, help=PP_HELP),
    data_dir: Optional[Path] = typer.Option(None, help=DATA_HELP),
) -> None:
    """One consumer drains a backlog on ONE key vs the same backlog over many keys: msg/s and ratio."""
    cfg = build_config(HotkeyConfig, quick, backlog=backlog, spread_keys=spread_keys, max_messages=max_messages,
                       message_bytes=message_bytes, rounds=rounds, timeout_s=timeout)

    async def runner(client: AsyncClient, echo: Echo, _cpu: Any) -> dict[str, Any]:
        return await run_hotkey(client, cfg, echo)

    execute("hotkey", url, physical_partitions, data_dir, 1, runner,
            ("hot_per_s", "spread_per_s", "ratio", "ratio_per_round", "messages_per_poll"), _CHECK_COUNTS, _show_hotkey, _failed)


# ---------------------------------------------------------------------------- catchup
def _show_catchup(r: dict[str, Any]) -> list[str]:
    cpu = r["cpu_us_per_message"]
    return [
        f"vpq (SDK consumer)       {r['vpq_per_s']:,.1f} msg/s",
        f"Redis XREADGROUP+XACK    {r['redis_per_s']:,.1f} msg/s",
        f"ratio vpq / redis        {r['ratio']:.4f}   (goal >= 1.0; per round {r['ratio_per_round']})",
        f"vpq messages per poll    {r['vpq_messages_per_poll']}",
        "CPU us per message, vpq  " + ", ".join(f"{k} {v:g}" for k, v in cpu.get("vpq", {}).items()),
        "CPU us per message, redis " + ", ".join(f"{k} {v:g}" for k, v in cpu.get("redis", {}).items()),
        f"lost / dup / reord / unexp  {_counts(r)}",
    ]


def bench_catchup(
    url: Optional[str] = typer.Option(None, "--url", help=URL_HELP),
    quick: bool = typer.Option(False, "--quick", help=_QUICK_HELP),
    backlog: Optional[int] = typer.Option(None, help="messages to catch up on [50000; quick 5000]"),
    keys: Optional[int] = typer.Option(None, help="distinct keys [100]"),
    message_bytes: Optional[int] = typer.Option(None, help="bytes of each message [1024]"),
    batch: Optional[int] = typer.Option(None, help="messages per poll / XREADGROUP COUNT [500]"),
    rounds: Optional[int] = typer.Option(None, help=_ROUNDS_HELP + " [3; quick 1]"),
    timeout: Optional[float] = typer.Option(None, help="bound on one catch-up, seconds [120]"),
    physical_partitions: int = typer.Option(4, help=PP_HELP),
    data_dir: Optional[Path] = typer.Option(None, help=DATA_HELP + " (and the bench's Redis)"),
) -> None:
    """One consumer catches up on a backlog: vpq's SDK against Redis Streams XREADGROUP + XACK."""
    cfg = build_config(CatchupConfig, quick, backlog=backlog, keys=keys, message_bytes=message_bytes, batch=batch,
                       rounds=rounds, timeout_s=timeout)

    async def runner(client: AsyncClient, echo: Echo, cpu: Any) -> dict[str, Any]:
        return await run_catchup(client.base_url, cfg, echo, cpu, data_root=data_dir)

    execute("catchup", url, physical_partitions, data_dir, 1, runner,
            ("vpq_per_s", "redis_per_s", "ratio", "ratio_per_round", "vpq_messages_per_poll", "cpu_us_per_message"),
            _CHECK_COUNTS,
            _show_catchup, _failed)


# --------------------------------------------------------------------------- envflood
def _show_envflood(r: dict[str, Any]) -> list[str]:
    return [
        f"flood                    {r['flood']:,} messages of env {r['config']['flood_env']} at "
        f"{r['flood_produce_per_s']:,.0f} msg/s",
        f"prod latency p50 / p99   (of the delivered) {fmt_ms(r['prod_p50_ms'])} / {fmt_ms(r['prod_p99_ms'])}  (goal p99 < 1 s; "
        f"max {fmt_ms(r['prod_max_ms'])})",
        f"prod delivered           {r['prod_delivered']:,} of {r['prod_expected']:,}",
        f"read-node RSS            before {r['rss_before_mb']} MB, after {r['rss_after_mb']} MB, peak "
        f"{r['rss_peak_mb']} MB: growth {r['rss_growth_mb']} MB (peak {r['rss_peak_growth_mb']} MB; goal <= 100)",
        f"lost / dup / crossed env  {r['lost']} / {r['duplicates']} / {r['crossed']}",
    ]


def _read_node_rss(url: str) -> Callable[[], Optional[int]]:
    port = urlparse(url).port
    root = platform_root(port) if port is not None else None

    def sample() -> Optional[int]:
        return rss_by_role(root).get("read_nodes") if root is not None else None

    return sample


def bench_envflood(
    url: Optional[str] = typer.Option(None, "--url", help=URL_HELP),
    quick: bool = typer.Option(False, "--quick", help=_QUICK_HELP),
    flood: Optional[int] = typer.Option(None, help="messages of the env nobody consumes [1000000; quick 50000]"),
    flood_env: Optional[str] = typer.Option(None, help="the flood's env [test]"),
    prod_rate: Optional[float] = typer.Option(None, help="prod messages per second after the flood [200; quick 100]"),
    prod_seconds: Optional[float] = typer.Option(None, help="seconds of prod traffic [10; quick 3]"),
    settle: Optional[float] = typer.Option(None, help="seconds to wait for the last prod deliveries [30; quick 15]"),
    physical_partitions: int = typer.Option(4, help=PP_HELP),
    data_dir: Optional[Path] = typer.Option(None, help=DATA_HELP),
) -> None:
    """A flood of an env no member consumes, then prod traffic: prod latency and read-node RSS."""
    cfg = build_config(EnvfloodConfig, quick, flood=flood, flood_env=flood_env, prod_rate=prod_rate,
                       prod_seconds=prod_seconds, settle_s=settle)

    async def runner(client: AsyncClient, echo: Echo, _cpu: Any) -> dict[str, Any]:
        return await run_envflood(client, cfg, echo, _read_node_rss(client.base_url))

    execute("envflood", url, physical_partitions, data_dir, 1, runner,
            ("prod_p50_ms", "prod_p99_ms", "rss_before_mb", "rss_after_mb", "rss_growth_mb", "rss_peak_growth_mb",
             "flood_produce_per_s"), ("lost", "duplicates", "crossed", "send_errors"), _show_envflood, _failed)


# ---------------------------------------------------------------------------- delayed
def _show_delayed(r: dict[str, Any]) -> list[str]:
    lines = [
        f"delayed messages         {r['produced']:,} at {r['produce_per_s']:,.0f} msg/s, delays "
        f"{r['config']['delay_min_ms']:,}-{r['config']['delay_max_ms']:,} ms",
        f"lateness p50 / p99 / max {fmt_ms(r['lateness_p50_ms'])} / {fmt_ms(r['lateness_p99_ms'])} / "
        f"{fmt_ms(r['lateness_max_ms'])}  (goal p99 < 100 ms)",
        f"lost / dup / early       {r['lost']} / {r['duplicates']} / {r['early']}",
    ]
    if "pending" in r:
        lines += [
            f"pending delayed          {r['pending']:,} (produced at {r['pending_produce_per_s']:,.0f} msg/s)",
            f"read-node RSS            none pending {r['rss_before_mb']} MB, {r['pending']:,} pending "
            f"{r['rss_after_mb']} MB: growth {r['rss_growth_mb']} MB, {r['bytes_per_pending']} bytes each "
            "(goal growth < 150 MB for 1,000,000)",
            f"record cache             {r['cache_before_mb']} MB before, {r['cache_after_mb']} MB after",
        ]
    return lines


def _delayed_failed(r: dict[str, Any]) -> bool:
    return bool(r.get("timed_out")) or any(r.get(c, 0) for c in ("lost", "early"))


def bench_delayed(
    url: Optional[str] = typer.Option(None, "--url", help=URL_HELP),
    quick: bool = typer.Option(False, "--quick", help=_QUICK_HELP),
    rate: Optional[float] = typer.Option(None, help="delayed messages per second [1000; quick 200]"),
    seconds: Optional[float] = typer.Option(None, help="seconds of delayed traffic [20; quick 3]"),
    delay_min_ms: Optional[int] = typer.Option(None, help="shortest delay [1000; quick 300]"),
    delay_max_ms: Optional[int] = typer.Option(None, help="longest delay [5000; quick 1000]"),
    pending: Optional[int] = typer.Option(None, help="pending delayed messages for the RSS figure, 0: skip "
                                          "[1000000; quick 20000]"),
    warmup: Optional[int] = typer.Option(None, help="immediate messages consumed before the RSS baseline "
                                         "[300000; quick 5000]"),
    physical_partitions: int = typer.Option(4, help=PP_HELP),
    data_dir: Optional[Path] = typer.Option(None, help=DATA_HELP),
) -> None:
    """Delayed messages: lateness at a steady rate, and read-node RSS with many pending."""
    cfg = build_config(DelayedConfig, quick, rate=rate, seconds=seconds, delay_min_ms=delay_min_ms,
                       delay_max_ms=delay_max_ms, pending=pending, warmup=warmup)

    async def runner(client: AsyncClient, echo: Echo, _cpu: Any) -> dict[str, Any]:
        return await run_delayed(client, cfg, echo, _read_node_rss(client.base_url))

    execute("delayed", url, physical_partitions, data_dir, 1, runner,
            ("lateness_p50_ms", "lateness_p99_ms", "lateness_max_ms", "rss_before_mb", "rss_after_mb",
             "rss_growth_mb", "bytes_per_pending"), ("lost", "duplicates", "early"), _show_delayed, _delayed_failed)
