"""``vpq bench peers``: vpq against Redis Streams, NATS JetStream and RabbitMQ in one run.

Runs :func:`load.harness.run_harness`: prints progress, then per scenario each
system's headline figures, its loss/duplicate/order check totals and the vpq/peer
ratios; writes the JSON results and a PNG chart under ``--data-dir``; the last line is
a JSON summary. Exit status 1 when a check found lost, duplicated, unexpected or
(where order was required) reordered messages, else 0.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from vpq.cli.progress import Stages
from vpq.common import event_loop

SYSTEMS_DEFAULT = "vpq,redis,nats,rabbitmq"


def bench_peers(
    quick: bool = typer.Option(False, "--quick", help="small sizes, fewer steps: about 2 minutes in all"),
    systems: str = typer.Option(SYSTEMS_DEFAULT, help="comma-separated: vpq,redis,nats,rabbitmq"),
    scenarios: str = typer.Option("1,2,3,4,5", help="comma-separated scenario numbers 1-5"),
    vpq_url: str = typer.Option("http://127.0.0.1:8080", help="the vpq gateway to measure"),
    start_vpq: bool = typer.Option(
        True, "--start-vpq/--no-start-vpq", help="start `vpq up` on a free port when --vpq-url does not answer"
    ),
    gateway_workers: int = typer.Option(
        1, min=1, max=64, help="gateway processes of the `vpq up` the benchmark starts (vpq up --gateway-workers)"
    ),
    data_dir: Path = typer.Option(Path(".vpq/bench"), help="where results, the chart and owned servers' data go"),
) -> None:
    """Benchmark vpq against its peers, side by side; print figures and ratios."""
    # imported here: the drivers and matplotlib are heavy and only this command needs them
    from vpq.load.harness import HarnessConfig, parse_scenarios, run_harness, summary
    from vpq.load.peers.registry import parse_systems

    try:
        chosen = parse_systems(systems)
        numbers = parse_scenarios(scenarios)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    cfg = HarnessConfig(
        systems=chosen, scenarios=numbers, quick=quick, data_dir=data_dir, vpq_url=vpq_url, start_vpq=start_vpq,
        vpq_gateway_workers=gateway_workers,
    )  # fmt: skip
    with Stages() as stages:  # the live line shows the scenario running now, on stderr
        stages.stage(f"peers: {len(chosen)} system(s), scenario(s) {','.join(map(str, numbers))}")
        results = event_loop.run(run_harness(cfg, echo=stages.follow))
    typer.echo(json.dumps(summary(results)))
    if results["checks"]["failed"]:
        raise typer.Exit(1)
