"""``vpq bench ...``: benchmarks that print figures and, last, one JSON line."""

from __future__ import annotations

import typer

bench_app = typer.Typer(help="Benchmarks: print figures and ratios; the last line is JSON.", no_args_is_help=True)

from vpq.cli.bench_assign import bench_assign  # noqa: E402  (registered after bench_app exists)

bench_app.command("assign")(bench_assign)
import vpq.cli.bench_log  # noqa: E402,F401  (registers "vpq bench log")

from vpq.cli.bench_peers import bench_peers  # noqa: E402

bench_app.command("peers")(bench_peers)

from vpq.cli.bench_rebalance import bench_rebalance  # noqa: E402

bench_app.command("rebalance")(bench_rebalance)

from vpq.cli.bench_platform import bench_drain, bench_latency, bench_produce  # noqa: E402

bench_app.command("produce")(bench_produce)
bench_app.command("latency")(bench_latency)
bench_app.command("drain")(bench_drain)

from vpq.cli.bench_ceiling import bench_ceiling  # noqa: E402

bench_app.command("ceiling")(bench_ceiling)

from vpq.cli.bench_delivery import bench_catchup, bench_envflood, bench_hotkey  # noqa: E402

bench_app.command("hotkey")(bench_hotkey)
bench_app.command("catchup")(bench_catchup)
bench_app.command("envflood")(bench_envflood)

import vpq.cli.bench_powerloss  # noqa: E402,F401  (registers "vpq bench powerloss")
