"""One gateway process: ``serve`` (what ``vpq serve gateway`` runs) and
``python -m gateway.main`` (a child of ``vpq up``, which runs the same ``serve``).

A gateway keeps no state of its own (everything is in Redis and on the nodes), so any
number may serve one cluster at once. ``serve`` listens on ``settings.gateway.host`` /
``port`` until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from vpq.common.process_main import cluster_secret_or_exit, run, run_until_signalled, setup_logging
from vpq.common.runfiles import read_settings
from vpq.config.settings import Settings
from vpq.gateway.app import create_app
from vpq.gateway.cluster_backend import ClusterBackend
from vpq.gateway.server import GatewayServer


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m gateway.main", description="vpq gateway process")
    p.add_argument("--settings", required=True, type=Path, help="settings.json written by vpq up")
    p.add_argument("--redis-url", required=True)
    return p.parse_args(argv)


async def serve(settings: Settings, redis_url: str, *, cluster_secret: str | None = None) -> None:
    """Run one gateway until SIGTERM/SIGINT; its calls to nodes carry ``cluster_secret``."""
    backend = ClusterBackend(settings, redis_url, cluster_secret=cluster_secret)
    app = create_app(settings.gateway, backend, queue_defaults=settings.queues)
    server = GatewayServer(app, settings.gateway)

    def started() -> None:
        logging.getLogger("vpq.gateway").info("listening on %s", server.url)

    await run_until_signalled([server], on_started=started)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    setup_logging("gateway")
    settings = read_settings(args.settings)
    secret = cluster_secret_or_exit(settings.cluster.secret_file)
    run(lambda: serve(settings, args.redis_url, cluster_secret=secret))


if __name__ == "__main__":
    main()
