"""The ``vpq`` command line: one typer app, sub-commands registered from small modules.

Importing this module loads the client only (the SDK, typer, rich): ``vpq up``,
``vpq serve``, ``vpq rebalance`` and ``vpq bench`` import what they need (the server, spark and bench
extras) when they run (``cli/extras.py``; tests/test_packaging.py checks it)."""

from __future__ import annotations

import typer

from vpq.cli.bench_lazy import bench_app
from vpq.cli.cluster_cmd import cluster_app
from vpq.cli.commands import register_commands
from vpq.cli.rebalance import rebalance
from vpq.cli.serve import serve_app
from vpq.cli.up import up

app = typer.Typer(
    name="vpq",
    help="vpq: virtual-partition, read/write-separated message queue platform.",
    no_args_is_help=True,
    add_completion=False,
)
app.command("up")(up)
app.command("rebalance")(rebalance)
app.add_typer(serve_app, name="serve")
app.add_typer(bench_app, name="bench")
register_commands(app)
app.add_typer(cluster_app, name="cluster")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
