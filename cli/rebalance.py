"""``vpq rebalance``: the command's options; what it runs is ``cli/rebalance_run.py``
(finding the platform, the Spark remap job, the report, the cut-over), imported when the
command runs: it needs the spark extra (``pip install 'vpq[spark]'``, which includes the
server extra), and without it the command prints which extra to install and exits 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from vpq.cli.extras import missing_modules_exit, require_extra


def rebalance(
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="the platform's data directory (default ./.vpq)"),
    redis_url: Optional[str] = typer.Option(
        None, "--redis-url", envvar="VPQ_REDIS_URL", help="the platform's Redis (default: from <data-dir>/run/redis.url)"
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the plan, publish nothing"),
    master: Optional[str] = typer.Option(None, "--master", help="Spark master URL (default rebalance.master: local[*])"),
    every: Optional[float] = typer.Option(None, "--every", min=1.0, help="repeat every SECONDS until Ctrl-C"),
    config: Optional[Path] = typer.Option(None, "--config", help="TOML settings file"),
    assignments: Optional[list[str]] = typer.Option(
        None, "--set", metavar="KEY=VALUE",
        help="set any setting by its dotted key, e.g. --set rebalance.publisher.fence_ttl_ms=30000 (repeatable; "
        "applies over the settings found)",
    ),
) -> None:
    """Run the Spark remap job against the running platform and apply its plan."""
    require_extra("vpq rebalance", "spark")
    with missing_modules_exit("vpq rebalance", "spark"):
        from vpq.cli.rebalance_run import run_command
    run_command(data_dir, redis_url, dry_run, master, every, config, assignments)
