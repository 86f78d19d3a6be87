"""``vpq serve write-node|read-node|gateway``: one role of a cluster, in the foreground.

Each role runs on its own (one process, any host) against a shared Redis
(``--redis-url``); nodes reach each other only at the addresses they register
(``--advertise``, default the bound ``--bind`` address). ``vpq up`` is the same roles
composed on one host: its children run the same role entry code (``<role>/main.py``
``serve``).

- ``write-node``: the first one started creates the cluster with ``--physical-partitions
  K --replication-factor R --write-nodes N`` (stored in Redis); a later one asking
  explicitly for other values is refused (exit 2, both values named), one without them
  adopts the stored shape. Its index (home partitions, replica placement) is ``--index``
  or the slot its node id holds in Redis (same id, same index on restart). Write nodes
  started this way never take over a dead sibling's partitions: the sibling's log is in
  the sibling's data directory, and opening an empty one would restart its offsets at 0.
  With R >= 2 a partition fails over to an in-sync replica instead.
- ``read-node`` and ``gateway`` wait for the cluster to exist and adopt its shape. Any
  number of gateways may serve a cluster at once (they keep no state).

Settings as for ``vpq up`` (``--config``, ``VPQ_`` variables, ``--set``, flags highest;
exit 2 naming a bad key or value). SIGINT/SIGTERM stop the role cleanly. Needs the
server extra, imported when the command runs.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape

from vpq.cli.extras import require_extra

console = Console(stderr=True, highlight=False)
serve_app = typer.Typer(
    help="Run one role of a cluster in the foreground (several hosts: one role per process).",
    no_args_is_help=True,
)

REDIS_URL = typer.Option(..., "--redis-url", envvar="VPQ_REDIS_URL", help="the cluster's Redis (shared by every role)")
DATA_DIR = typer.Option(None, "--data-dir", help="this node's data directory (default ./.vpq)")
BIND = typer.Option(None, "--bind", metavar="HOST[:PORT]", help="listen address (nodes: 127.0.0.1:0)")
ADVERTISE = typer.Option(
    None, "--advertise", metavar="HOST:PORT", help="address the other nodes dial (default: the bound address)"
)
NODE_ID = typer.Option(None, "--node-id", help="this node's id (default <role>-<hostname>; unique per node)")
SECRET_FILE = typer.Option(None, "--cluster-secret-file", help="file holding the cluster's shared secret")
CONFIG = typer.Option(None, "--config", help="TOML settings file")
ASSIGNMENTS = typer.Option(
    None, "--set", metavar="KEY=VALUE", help="set any setting by its dotted key (repeatable; the flags beat it)"
)
LOG_LEVEL = typer.Option("INFO", "--log-level", help="log level of the role (stderr)")


def _fail(exc: Exception, code: int = 2) -> typer.Exit:
    console.print(f"[red]error:[/red] {escape(str(exc))}")
    return typer.Exit(getattr(exc, "code", code))


def _common(data_dir: Optional[Path], redis_url: str, secret_file: Optional[Path]) -> dict:
    return {
        "data_dir": data_dir,
        "redis.url": redis_url,
        "cluster.secret_file": secret_file.resolve() if secret_file is not None else None,
    }


def _secret(settings) -> Optional[str]:
    """The cluster secret the settings name (None: none); a file it cannot use exits 2."""
    from vpq.common.process_main import cluster_secret_or_exit

    return cluster_secret_or_exit(settings.cluster.secret_file)


def _settled(config, assignments, common: dict, redis_url: str, place):
    """Settings of a read node or gateway: built from the flags, ``place(settings)``
    (its addresses, which may raise ``ServeError``), then the cluster's shape read
    from Redis (waiting for the first write node); a ``ServeError`` exits with its
    code, Ctrl-C while waiting exits 0."""
    from vpq.cli.serve_setup import ServeError, build_settings, settle_reader

    try:
        settings, _ = build_settings(config, assignments, common)
        settings = place(settings)
        return asyncio.run(settle_reader(settings, redis_url, lambda m: console.print(f"[dim]vpq:[/dim] {m}")))
    except ServeError as exc:
        raise _fail(exc)
    except KeyboardInterrupt:
        raise typer.Exit(0)


def _node_id(given: Optional[str], role: str) -> str:
    return given or f"{role}-{socket.gethostname().split('.')[0]}"


def _run(coro_factory, role: str, log_level: str) -> None:
    from vpq.common.process_main import run, setup_logging

    setup_logging(role, log_level)
    try:
        run(coro_factory)
    except KeyboardInterrupt:
        pass
    except OSError as exc:  # e.g. the bind address is taken or not on this host
        raise _fail(exc, code=1)


@serve_app.command("write-node")
def write_node(
    redis_url: str = REDIS_URL,
    data_dir: Optional[Path] = DATA_DIR,
    bind: Optional[str] = BIND,
    advertise: Optional[str] = ADVERTISE,
    node_id: Optional[str] = NODE_ID,
    cluster_secret_file: Optional[Path] = SECRET_FILE,
    physical_partitions: Optional[int] = typer.Option(
        None, "--physical-partitions", min=1, help="physical partitions of a new cluster (default 4)"
    ),
    replication_factor: Optional[int] = typer.Option(
        None, "--replication-factor", min=1, help="copies of each partition, for a new cluster (default 1)"
    ),
    write_nodes: Optional[int] = typer.Option(
        None, "--write-nodes", min=1, help="write nodes of a new cluster (default 1)"
    ),
    min_insync: Optional[int] = typer.Option(
        None, "--min-insync", min=0, help="produce answers 503 while fewer replicas are in sync (default R)"
    ),
    index: Optional[int] = typer.Option(None, "--index", min=0, help="this node's index (default: from Redis)"),
    config: Optional[Path] = CONFIG,
    assignments: Optional[list[str]] = ASSIGNMENTS,
    log_level: str = LOG_LEVEL,
) -> None:
    """Run a write node (the first one creates the cluster)."""
    require_extra("vpq serve", "server")
    from vpq.cli.serve_setup import (
        SHAPE_KEYS,
        ServeError,
        advertised,
        build_settings,
        explicit_shape,
        parse_bind,
        settle_write_node,
    )
    from vpq.write_nodes.main import serve

    node = _node_id(node_id, "write")
    try:
        settings, held = build_settings(
            config, assignments, {**_common(data_dir, redis_url, cluster_secret_file), "cluster.min_insync": min_insync},
            SHAPE_KEYS,
        )
        host, port = parse_bind(bind or "127.0.0.1:0", 0)
        address = advertised(host, advertise)
        flags = {
            "physical_partitions": physical_partitions, "replication_factor": replication_factor,
            "write_nodes": write_nodes,
        }  # fmt: skip
        explicit = explicit_shape(settings, held, flags)
        settings, node_index, created = asyncio.run(settle_write_node(settings, redis_url, node, explicit, index))
    except ServeError as exc:
        raise _fail(exc)
    c = settings.cluster
    verb = "created" if created else "joined"
    console.print(
        f"[dim]vpq:[/dim] write node {node} (index {node_index}) {verb} the cluster: {c.physical_partitions} "
        f"physical partitions, replication factor {c.replication_factor}, {c.write_nodes} write nodes"
    )
    secret = _secret(settings)
    _run(lambda: serve(settings, node, node_index, redis_url, host, port, advertise=address, takeover=False,
                       cluster_secret=secret), f"write[{node}]", log_level)  # fmt: skip


@serve_app.command("read-node")
def read_node(
    redis_url: str = REDIS_URL,
    data_dir: Optional[Path] = DATA_DIR,
    bind: Optional[str] = BIND,
    advertise: Optional[str] = ADVERTISE,
    node_id: Optional[str] = NODE_ID,
    cluster_secret_file: Optional[Path] = SECRET_FILE,
    config: Optional[Path] = CONFIG,
    assignments: Optional[list[str]] = ASSIGNMENTS,
    log_level: str = LOG_LEVEL,
) -> None:
    """Run a read node (waits for the cluster to exist)."""
    require_extra("vpq serve", "server")
    from vpq.cli.serve_setup import advertised, parse_bind
    from vpq.read_nodes.main import serve

    node = _node_id(node_id, "read")
    host, port, address = "", 0, None

    def place(settings):
        nonlocal host, port, address
        host, port = parse_bind(bind or "127.0.0.1:0", 0)
        address = advertised(host, advertise)
        return settings

    settings = _settled(config, assignments, _common(data_dir, redis_url, cluster_secret_file), redis_url, place)
    secret = _secret(settings)
    _run(lambda: serve(settings, node, redis_url, host, port, advertise=address, cluster_secret=secret),
         f"read-node {node}", log_level)  # fmt: skip


@serve_app.command("gateway")
def gateway(
    redis_url: str = REDIS_URL,
    data_dir: Optional[Path] = DATA_DIR,
    bind: Optional[str] = typer.Option(
        None, "--bind", metavar="HOST[:PORT]", help="listen address (default gateway.host:gateway.port, 127.0.0.1:8080)"
    ),
    advertise: Optional[str] = ADVERTISE,
    node_id: Optional[str] = NODE_ID,
    cluster_secret_file: Optional[Path] = SECRET_FILE,
    config: Optional[Path] = CONFIG,
    assignments: Optional[list[str]] = ASSIGNMENTS,
    log_level: str = LOG_LEVEL,
) -> None:
    """Run a gateway (stateless: any number may serve one cluster)."""
    require_extra("vpq serve", "server")
    from vpq.cli.serve_setup import advertised, parse_bind
    from vpq.gateway.main import serve

    address = ""

    def place(settings):
        nonlocal address
        gw = settings.gateway
        host, port = parse_bind(bind or f"{gw.host}:{gw.port}", gw.port)
        address = advertised(host, advertise) or f"{host}:{port}"
        return settings.model_copy(update={"gateway": gw.model_copy(update={"host": host, "port": port})})

    settings = _settled(config, assignments, _common(data_dir, redis_url, cluster_secret_file), redis_url, place)
    console.print(f"[dim]vpq:[/dim] gateway {_node_id(node_id, 'gateway')} serving at http://{address}")
    if settings.gateway.workers > 1:
        console.print(
            "[yellow]vpq:[/yellow] vpq serve gateway runs one process; gateway.workers applies to vpq up "
            "(run more gateways with more vpq serve gateway commands)"
        )
        settings = settings.model_copy(update={"gateway": settings.gateway.model_copy(update={"workers": 1})})
    secret = _secret(settings)
    _run(lambda: serve(settings, redis_url, cluster_secret=secret), "gateway", log_level)
