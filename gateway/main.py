"""``python -m gateway.main``: one gateway process of a ``vpq up`` cluster."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from vpq.common.process_main import cluster_secret_or_exit, run, run_until_signalled, setup_logging
from vpq.common.runfiles import read_settings
from vpq.gateway.app import create_app
from vpq.gateway.cluster_backend import ClusterBackend
from vpq.gateway.server import GatewayServer


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m gateway.main", description="vpq gateway process")
    p.add_argument("--settings", required=True, type=Path, help="settings.json written by vpq up")
    p.add_argument("--redis-url", required=True)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    setup_logging("gateway")
    settings = read_settings(args.settings)
    secret = cluster_secret_or_exit(settings.cluster.secret_file)

    async def amain() -> None:
        backend = ClusterBackend(settings, args.redis_url, cluster_secret=secret)
        app = create_app(settings.gateway, backend, queue_defaults=settings.queues)
        server = GatewayServer(app, settings.gateway)

        def started() -> None:
            logging.getLogger("vpq.gateway").info("listening on %s", server.url)

        await run_until_signalled([server], on_started=started)

    run(amain)


if __name__ == "__main__":
    main()
