"""``vpq bench ...``: benchmarks that print figures and, last, one JSON line."""

from __future__ import annotations

import typer

from vpq.cli.bench_assign import bench_assign
from vpq.cli.bench_capacity import bench_capacity
from vpq.cli.bench_ceiling import bench_ceiling
from vpq.cli.bench_compaction import bench_compaction
from vpq.cli.bench_dedup import bench_dedup
from vpq.cli.bench_delivery import bench_catchup, bench_delayed, bench_envflood, bench_hotkey
from vpq.cli.bench_log import bench_log
from vpq.cli.bench_peers import bench_peers
from vpq.cli.bench_platform import bench_drain, bench_latency, bench_produce
from vpq.cli.bench_powerloss import bench_powerloss
from vpq.cli.bench_queues import bench_queues
from vpq.cli.bench_rebalance import bench_rebalance
from vpq.cli.bench_replication import bench_replication, bench_replication_faults

bench_app = typer.Typer(help="Benchmarks: print figures and ratios; the last line is JSON.", no_args_is_help=True)

# registered in this order: ``vpq bench --help`` lists them so
bench_app.command("assign")(bench_assign)
bench_app.command("log")(bench_log)
bench_app.command("peers")(bench_peers)
bench_app.command("rebalance")(bench_rebalance)
bench_app.command("produce")(bench_produce)
bench_app.command("latency")(bench_latency)
bench_app.command("drain")(bench_drain)
bench_app.command("ceiling")(bench_ceiling)
bench_app.command("capacity")(bench_capacity)
bench_app.command("dedup")(bench_dedup)
bench_app.command("hotkey")(bench_hotkey)
bench_app.command("catchup")(bench_catchup)
bench_app.command("envflood")(bench_envflood)
bench_app.command("delayed")(bench_delayed)
bench_app.command("powerloss")(bench_powerloss)
bench_app.command("replication")(bench_replication)
bench_app.command("replication-faults")(bench_replication_faults)
bench_app.command("compaction")(bench_compaction)
bench_app.command("queues")(bench_queues)
