"""``vpq bench powerloss``: acknowledged messages across simulated power losses.

Runs ``load.powerloss.PowerLossCampaign``: a real write node whose partition files
live on a simulated disk (``write_nodes.sim_disk``), ``--producers`` HTTP producers,
and ``--crash-points`` power failures at random points (inside group commits, right
after segment rolls, during checkpoints, at random times; half of them keeping a
random part of the unsynced writes, as LazyFS does), each followed by a reboot that
recovers the log and a read-back of the whole partition. Starts its own
redis-server unless ``--redis-url`` is given.

Prints one line per ``--every`` rounds, the figures, and last one JSON line. Exits 1
when an acknowledged message was lost, moved, reordered or duplicated.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Optional

import orjson
import typer

from vpq.cli.progress import Stages
from vpq.common import event_loop
from vpq.common.redis_server import RedisServer
from vpq.load.powerloss import RoundResult, run_campaign


def bench_powerloss(
    crash_points: int = typer.Option(200, help="power losses (rounds of produce, crash, reboot, check)"),
    producers: int = typer.Option(8, help="concurrent HTTP producers (one key each)"),
    seed: int = typer.Option(0, help="seed of the crash points and of what a lazy crash keeps"),
    redis_url: Optional[str] = typer.Option(None, help="use this Redis instead of starting one"),
    data_dir: Optional[Path] = typer.Option(None, help="parent of the temporary directory (lock files, Redis)"),
    every: int = typer.Option(20, help="print a progress line every this many rounds"),
    verbose: bool = typer.Option(False, help="show the write node's log lines"),
) -> None:
    """Simulated power losses under produce load; every acknowledged message must survive."""
    if not verbose:  # each crash makes the node log an offline partition: expected here
        logging.getLogger().addHandler(logging.NullHandler())
        logging.getLogger("write_nodes").setLevel(logging.CRITICAL)
    parent = data_dir if data_dir is not None else Path(tempfile.gettempdir())
    parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="vpq-powerloss-", dir=parent))
    server: RedisServer | None = None
    with Stages() as stages:  # progress on stderr: a live line with the round; figures on stdout
        try:
            if redis_url is None:
                stages.stage("starting Redis")
                server = RedisServer(data_dir=work / "redis", appendonly=False)
                server.start()
                redis_url = server.url
            stages.stage(f"{crash_points} power losses under produce load")

            done = [0]

            def progress(rnd: RoundResult) -> None:
                done[0] += 1
                n = done[0]
                stages.detail(f"round {n}/{crash_points}, {rnd.check.acked} acked, lost {rnd.check.lost}")
                if n % max(1, every) == 0 or not rnd.check.ok:
                    c = rnd.check
                    stages.echo(
                        f"round {n:4d}: {c.acked} acked so far, {c.found} in the log, lost {c.lost}, moved {c.moved},"
                        f" reordered {c.reordered}, duplicated {c.duplicated} (last crash: {rnd.point.kind}"
                        f" n={rnd.point.n} {rnd.point.mode})"
                    )

            result = event_loop.run(
                run_campaign(
                    work / "data", redis_url, crash_points, seed=seed, producers=producers,
                    key_prefix=f"vpq-powerloss-{uuid.uuid4().hex[:8]}", on_round=progress,
                ),
                use_uvloop=False,
            )
        finally:
            if server is not None:
                server.stop()
            shutil.rmtree(work, ignore_errors=True)
    summary = result.summary()
    typer.echo(
        f"crash points {summary['crash_points']} ({summary['lazy']} lazy; by kind {summary['crash_kinds']};"
        f" {summary['not_fired']} cut by the round timeout)"
    )
    typer.echo(
        f"acknowledged {summary['acked']}, in the log {summary['in_log']}, lost {summary['lost']},"
        f" moved {summary['moved']}, reordered {summary['reordered']}, duplicated {summary['duplicated']},"
        f" failed rounds {summary['failed_rounds']} in {summary['seconds']} s"
    )
    typer.echo(orjson.dumps(summary).decode())
    if summary["failed_rounds"]:
        raise typer.Exit(1)

