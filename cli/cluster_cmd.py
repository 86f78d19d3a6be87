"""``vpq cluster`` (the cluster view) and ``vpq cluster elect PP NODE [--unclean] [--yes]``
(an operator's leader election of a replicated partition whose leader failed:
``POST /v1/cluster/partitions/{pp}/leader``)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from vpq.cli.commands import DEFAULT_URL, JsonOpt, TokenOpt, UrlOpt, _print_json, _run, cluster

cluster_app = typer.Typer(help="Show the cluster; elect a partition leader.", no_args_is_help=False)
cluster_app.callback(invoke_without_command=True)(cluster)


@cluster_app.command("elect")
def elect(
    partition: Annotated[int, typer.Argument(help="physical partition id", min=0)],
    node: Annotated[str, typer.Argument(help="id of the write node to elect, e.g. w1")],
    unclean: Annotated[
        bool, typer.Option("--unclean", help="elect it even out of sync: acknowledged messages it lacks are lost")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")] = False,
    url: UrlOpt = DEFAULT_URL,
    token: TokenOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Make NODE the leader of PARTITION, whose leader failed (with --unclean even out of sync)."""
    if unclean and not yes and not typer.confirm(
        f"unclean election of {node} for partition {partition}: acknowledged messages it lacks are lost. Go on?"
    ):
        raise typer.Exit(1)
    answer: dict[str, Any] = _run(url, token, lambda c: c.elect_leader(partition, node, unclean=unclean))
    if json_out:
        _print_json(answer)
        return
    typer.echo(f"partition {answer['id']}: leader {answer['leader']}, epoch {answer['leader_epoch']}, "
               f"in sync {', '.join(answer['in_sync_replicas'])}")
    event = answer.get("truncation")
    if event:
        typer.echo(f"unclean election: up to {event['lost_offsets']} acknowledged offsets may be lost "
                   f"(last high watermark {event['high_watermark']}, new leader's end {event['new_leader_end']})")
