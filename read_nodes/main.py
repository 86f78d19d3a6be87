"""One read-node process: ``serve`` (what ``vpq serve read-node`` runs) and
``python -m read_nodes.main`` (a child of ``vpq up``, which runs the same ``serve``).

``python -m read_nodes.main --settings <data-dir>/run/settings.json --node-id r0
--redis-url URL [--host 127.0.0.1] [--port 0]`` runs a ``ReadNodeService`` until
SIGTERM/SIGINT (then stops gracefully: ack states persisted, leases released),
on uvloop when available, logging to stderr with timestamps.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from vpq.common.process_main import cluster_secret_or_exit, run, run_until_signalled, setup_logging
from vpq.common.runfiles import read_settings
from vpq.config.settings import Settings
from vpq.read_nodes.service import ReadNodeService


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m read_nodes.main", description="vpq read node process")
    p.add_argument("--settings", required=True, type=Path, help="settings.json written by vpq up")
    p.add_argument("--node-id", required=True)
    p.add_argument("--redis-url", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0: a free port")
    p.add_argument("--log-level", default="INFO")
    return p.parse_args(argv)


async def serve(
    settings: Settings, node_id: str, redis_url: str, host: str = "127.0.0.1", port: int = 0,
    *, advertise: str | None = None, cluster_secret: str | None = None,
) -> None:  # fmt: skip
    """Run one read node until SIGTERM/SIGINT (see ``ReadNodeService`` for the arguments)."""
    service = ReadNodeService(
        settings, node_id, redis_url, host=host, port=port, advertise=advertise, cluster_secret=cluster_secret
    )

    def started() -> None:
        logging.getLogger("vpq.read_node").info("read node %s ready on %s", node_id, service.address)

    await run_until_signalled([service], on_started=started)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    setup_logging(f"read-node {args.node_id}", args.log_level)
    settings = read_settings(args.settings)
    secret = cluster_secret_or_exit(settings.cluster.secret_file)
    run(lambda: serve(settings, args.node_id, args.redis_url, args.host, args.port, cluster_secret=secret))


if __name__ == "__main__":
    main()
