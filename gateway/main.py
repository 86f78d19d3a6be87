"""One gateway process: ``serve`` (what ``vpq serve gateway`` runs) and
``python -m gateway.main`` (a child of ``vpq up``, which runs the same ``serve``).

A gateway keeps no state of its own (everything is in Redis and on the nodes), so any
number may serve one cluster at once. ``serve`` listens on ``settings.gateway.host`` /
``port`` until SIGTERM/SIGINT. ``vpq up`` with ``gateway.workers`` = N starts N of these
processes with ``--worker 0..N-1``: they share the port and, through
``gateway.worker_peers``, answer ``/metrics`` and queue traffic for the whole gateway.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from vpq.common.process_main import cluster_secret_or_exit, run, run_until_signalled, setup_logging
from vpq.common.runfiles import gateway_workers_dir, read_settings
from vpq.config.settings import Settings
from vpq.gateway.app import create_app
from vpq.gateway.cluster_backend import ClusterBackend
from vpq.gateway.keys import METRICS_KEY, WORKER_PEERS_KEY
from vpq.gateway.server import GatewayServer
from vpq.gateway.worker_peers import WorkerPeers


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m gateway.main", description="vpq gateway process")
    p.add_argument("--settings", required=True, type=Path, help="settings.json written by vpq up")
    p.add_argument("--redis-url", required=True)
    p.add_argument("--worker", type=int, default=None, help="this worker's index, when the gateway has several")
    return p.parse_args(argv)


async def serve(
    settings: Settings, redis_url: str, *, cluster_secret: str | None = None, worker: int | None = None
) -> None:
    """Run one gateway until SIGTERM/SIGINT; its calls to nodes carry ``cluster_secret``.
    ``worker``: this process's index among the gateway's ``settings.gateway.workers``."""
    workers = worker is not None and settings.gateway.workers > 1
    backend = ClusterBackend(
        settings, redis_url, cluster_secret=cluster_secret, counters_in_metrics_text=not workers
    )
    app = create_app(settings.gateway, backend, queue_defaults=settings.queues)
    components: list = []
    if workers:
        assert worker is not None
        metrics = app[METRICS_KEY]

        def own_share() -> bytes:  # this worker's series, added up over the workers
            return metrics.render(backend.counters_text())

        peers = WorkerPeers(
            gateway_workers_dir(settings.data_dir), worker, cluster_secret, own_share, backend.traffic.all_figures
        )
        app[WORKER_PEERS_KEY] = peers
        components.append(peers)
    server = GatewayServer(app, settings.gateway)
    components.append(server)

    def started() -> None:
        logging.getLogger("vpq.gateway").info("listening on %s", server.url)

    await run_until_signalled(components, on_started=started)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    setup_logging("gateway")
    settings = read_settings(args.settings)
    secret = cluster_secret_or_exit(settings.cluster.secret_file)
    run(lambda: serve(settings, args.redis_url, cluster_secret=secret, worker=args.worker))


if __name__ == "__main__":
    main()
