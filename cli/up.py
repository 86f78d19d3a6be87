"""``vpq up``: run the whole platform in the foreground.

Starts the embedded Redis (when no URL is given), N write-node and M read-node
processes and the gateway (``--gateway-workers`` processes sharing its port), each its
own OS process under a supervisor that restarts crashed children; ``--single-process`` runs every vpq role in this process instead.
SIGINT/SIGTERM stop everything; restarting on the same data directory resumes.

The settings are built once here (``--config`` TOML, ``VPQ_`` variables, ``--set
KEY=VALUE`` and the specific flags; a bad key or value exits with status 2 and a
message naming it) and handed to every child as ``<data-dir>/run/settings.json``;
each role builds its tuning (``ReadNodeOptions``, ``AppendPolicy``, ...) from them.

The nodes always check a cluster secret (``node_rpc.cluster_auth``): the file named by
``cluster.secret_file``, else ``<data-dir>/run/cluster.secret``, created once (32 random
bytes as hex, mode 0600) and kept across restarts. A secret file the loader refuses
(``common.cluster_secret``) exits with status 1 and the reason.

It needs the server extra (``pip install 'vpq[server]'``): the settings, the run files
and the roles are imported when the command runs, so that the client CLI loads without
them; without the extra it prints which one to install and exits with status 1.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import shutil
import signal
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import aiohttp
import typer
from rich.console import Console
from rich.markup import escape

from vpq.cli.extras import require_extra
from vpq.common.redis_server import RedisServer, RedisServerError
from vpq.common.supervisor import ChildSpec, Supervisor

if TYPE_CHECKING:  # the server extra: imported by the command, not with the CLI
    from vpq.config.settings import Settings

console = Console(stderr=True, highlight=False)


def up(
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="data directory (default ./.vpq)"),
    host: Optional[str] = typer.Option(None, "--host", help="gateway host (default 127.0.0.1)"),
    port: Optional[int] = typer.Option(None, "--port", help="gateway port (default 8080)"),
    write_nodes: Optional[int] = typer.Option(None, "--write-nodes", help="write-node processes (default 1)"),
    read_nodes: Optional[int] = typer.Option(None, "--read-nodes", help="read-node processes (default 1)"),
    gateway_workers: Optional[int] = typer.Option(
        None, "--gateway-workers", help="gateway processes sharing its host and port (default 1)"
    ),
    physical_partitions: Optional[int] = typer.Option(
        None, "--physical-partitions", help="physical partitions when the cluster is new (default 4)"
    ),
    replication_factor: Optional[int] = typer.Option(
        None, "--replication-factor", help="copies of each physical partition on distinct write nodes (default 1)"
    ),
    min_insync: Optional[int] = typer.Option(
        None, "--min-insync", help="produce answers 503 while fewer replicas are in sync (default: the replication factor)"
    ),
    redis_url: Optional[str] = typer.Option(
        None, "--redis-url", envvar="VPQ_REDIS_URL", help="use this Redis; without it vpq starts its own"
    ),
    config: Optional[Path] = typer.Option(None, "--config", help="TOML settings file"),
    single_process: bool = typer.Option(False, "--single-process", help="run every role in this process"),
    assignments: Optional[list[str]] = typer.Option(
        None, "--set", metavar="KEY=VALUE",
        help="set any setting by its dotted key, e.g. --set read_nodes.max_unacked=5000 (repeatable; "
        "beats VPQ_ variables and the TOML file; the specific flags above beat it)",
    ),
) -> None:
    """Start the platform in the foreground (Ctrl-C stops it)."""
    require_extra("vpq up", "server")
    from vpq.config.overrides import describe_error, parse_assignments
    from vpq.config.settings import load_settings

    flags = {
        "data_dir": data_dir,
        "gateway.host": host,
        "gateway.port": port,
        "cluster.write_nodes": write_nodes,
        "cluster.read_nodes": read_nodes,
        "gateway.workers": gateway_workers,
        "cluster.physical_partitions": physical_partitions,
        "cluster.replication_factor": replication_factor,
        "cluster.min_insync": min_insync,
        "redis.url": redis_url,
        "cluster.single_process": single_process or None,
    }
    try:
        overrides = parse_assignments(assignments or ())
        overrides.update((k, v) for k, v in flags.items() if v is not None)
        settings = load_settings(config, overrides)
    except (FileNotFoundError, ValueError) as exc:
        console.print(f"[red]error:[/red] {escape(describe_error(exc))}")
        raise typer.Exit(2)
    settings = settings.model_copy(update={"data_dir": settings.data_dir.resolve()})
    try:
        code = asyncio.run(_up(settings))
    except KeyboardInterrupt:
        code = 0
    raise typer.Exit(code)


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _lock_data_dir(data_dir: Path) -> int:
    from vpq.common.runfiles import run_dir

    run_dir(data_dir).mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir(data_dir) / "up.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RuntimeError(f"another vpq up is running on {data_dir}")
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


async def _wait_ready(url: str, timeout_s: float, alive) -> bool:
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
        while time.monotonic() < deadline and alive():
            try:
                async with session.get(url + "/readyz") as resp:
                    if resp.status == 200:
                        return True
            except (aiohttp.ClientError, asyncio.TimeoutError):
                pass
            await asyncio.sleep(0.2)
    return False


async def _wait_redis(server: RedisServer, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.ping():
            return
        await asyncio.sleep(0.05)
    raise RedisServerError(f"embedded redis-server did not answer on port {server.port}")


def _with_cluster_secret(settings: Settings) -> tuple[Settings, str]:
    """The settings naming the cluster secret file (created when none is configured) and
    the secret; ``ClusterSecretError`` when the file cannot be used."""
    from vpq.common.cluster_secret import create_cluster_secret, load_cluster_secret
    from vpq.common.runfiles import cluster_secret_path

    path = settings.cluster.secret_file
    if path is None:
        path = cluster_secret_path(settings.data_dir)
        if create_cluster_secret(path):
            console.print(f"[dim]vpq:[/dim] created the cluster secret {path}")
    path = path.resolve()
    secret = load_cluster_secret(path)
    assert secret is not None
    cluster = settings.cluster.model_copy(update={"secret_file": path})
    return settings.model_copy(update={"cluster": cluster}), secret


async def _up(settings: Settings) -> int:
    from vpq.cli.serve_setup import record_composed_cluster
    from vpq.common.cluster_secret import ClusterSecretError
    from vpq.common.runfiles import write_redis_url, write_settings

    data_dir = settings.data_dir
    try:
        lock_fd = _lock_data_dir(data_dir)
    except RuntimeError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 1
    try:
        settings, secret = _with_cluster_secret(settings)
    except ClusterSecretError as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}")
        os.close(lock_fd)
        return 1
    gw = settings.gateway
    if gw.port != 0 and not _port_free(gw.host, gw.port):
        console.print(f"[red]error:[/red] {gw.host}:{gw.port} is already in use (choose another with --port)")
        os.close(lock_fd)
        return 1
    if gw.workers > 1 and settings.cluster.single_process:
        console.print("[yellow]vpq:[/yellow] --single-process runs one gateway; gateway.workers is ignored")
    elif gw.workers > 1 and gw.port == 0:  # every worker must listen on the same port
        gw = gw.model_copy(update={"port": _free_port(gw.host)})
        settings = settings.model_copy(update={"gateway": gw})

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    supervisor = Supervisor(data_dir / "logs", on_event=lambda m: console.print(f"[dim]vpq:[/dim] {m}"))
    in_process: list = []
    try:
        redis_url = settings.redis.url
        if redis_url is None:
            server = RedisServer(data_dir / "redis", appendonly=True, appendfsync="always")
            try:
                await supervisor.start_child(ChildSpec("redis", server.command()))
                await _wait_redis(server)
            except RedisServerError as exc:
                console.print(f"[red]error:[/red] {exc}")
                return 1
            redis_url = server.url
            console.print(f"[dim]vpq:[/dim] embedded Redis at {redis_url} (data in {data_dir / 'redis'})")
        settings = settings.model_copy(
            update={"redis": settings.redis.model_copy(update={"url": redis_url})}
        )
        settings_file = write_settings(settings)
        write_redis_url(data_dir, redis_url)
        note = await record_composed_cluster(settings, redis_url)
        if note:
            console.print(f"[yellow]vpq:[/yellow] {escape(note)}")

        if settings.cluster.single_process:
            in_process = await _start_in_process(settings, redis_url, secret)
        else:
            await _start_children(supervisor, settings, settings_file, redis_url)

        url = f"http://{gw.host}:{gw.port}"
        ready = await _wait_ready(url, 120.0, lambda: not stop.is_set())
        if ready:
            c = settings.cluster
            console.print(
                f"[green]vpq is up[/green] at {url}  ({c.write_nodes} write node(s), {c.read_nodes} read node(s), "
                f"data in {data_dir}; Ctrl-C stops)"
            )
        elif not stop.is_set():
            console.print(f"[yellow]vpq:[/yellow] not ready after 120 s; see the logs in {data_dir / 'logs'}")
        await stop.wait()
        console.print("[dim]vpq:[/dim] stopping")
        return 0
    finally:
        for component in reversed(in_process):
            await component.stop()
        await supervisor.stop()
        os.close(lock_fd)


async def _start_children(supervisor: Supervisor, settings: Settings, settings_file: Path, redis_url: str) -> None:
    py = sys.executable
    common = ["--settings", str(settings_file), "--redis-url", redis_url]
    for i in range(settings.cluster.write_nodes):
        await supervisor.start_child(
            ChildSpec(f"write-{i}", [py, "-m", "vpq.write_nodes.main", *common, "--node-id", f"w{i}", "--index", str(i)])
        )
    for j in range(settings.cluster.read_nodes):
        await supervisor.start_child(
            ChildSpec(f"read-{j}", [py, "-m", "vpq.read_nodes.main", *common, "--node-id", f"r{j}"])
        )
    workers = settings.gateway.workers
    if workers == 1:
        await supervisor.start_child(ChildSpec("gateway", [py, "-m", "vpq.gateway.main", *common]))
        return
    from vpq.common.runfiles import gateway_workers_dir

    shutil.rmtree(gateway_workers_dir(settings.data_dir), ignore_errors=True)  # a previous run's addresses
    for k in range(workers):
        await supervisor.start_child(
            ChildSpec(f"gateway-{k}", [py, "-m", "vpq.gateway.main", *common, "--worker", str(k)])
        )


async def _start_in_process(settings: Settings, redis_url: str, secret: str) -> list:
    """Every vpq role in this process (the roles stay separate objects), with ``secret``."""
    from vpq.gateway.app import create_app
    from vpq.gateway.cluster_backend import ClusterBackend
    from vpq.gateway.server import GatewayServer
    from vpq.read_nodes.service import ReadNodeService
    from vpq.write_nodes.service import WriteNodeService

    started: list = []
    try:
        for i in range(settings.cluster.write_nodes):
            node = WriteNodeService(settings, f"w{i}", i, redis_url, cluster_secret=secret)
            await node.start()
            started.append(node)
        for j in range(settings.cluster.read_nodes):
            node = ReadNodeService(settings, f"r{j}", redis_url, cluster_secret=secret)
            await node.start()
            started.append(node)
        backend = ClusterBackend(settings, redis_url, cluster_secret=secret)
        server = GatewayServer(create_app(settings.gateway, backend, queue_defaults=settings.queues), settings.gateway)
        await server.start()
        started.append(server)
    except BaseException:
        for component in reversed(started):
            await component.stop()
        raise
    return started
