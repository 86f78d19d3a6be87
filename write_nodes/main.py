"""One write-node process: ``serve`` (what ``vpq serve write-node`` runs once it has
settled the cluster's shape and this node's index) and ``python -m write_nodes.main``
(a child of ``vpq up``, which runs the same ``serve``).

``serve`` builds a :class:`~write_nodes.service.WriteNodeService` and runs it until
SIGTERM/SIGINT (graceful stop: in-flight appends finish, logs are checkpointed, leases
released). The child form reads the settings file the supervisor wrote
(``common.runfiles.read_settings``), runs on uvloop when available and logs to stderr
with timestamps; its write nodes share one data directory, so a live one may take over
a dead sibling's partitions (``takeover``).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from vpq.common.process_main import cluster_secret_or_exit, run, run_until_signalled, setup_logging
from vpq.common.runfiles import read_settings
from vpq.config.settings import Settings
from vpq.write_nodes.service import WriteNodeService


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m write_nodes.main", description="vpq write node process")
    p.add_argument("--settings", required=True, type=Path, help="settings.json written by vpq up")
    p.add_argument("--node-id", required=True, help="this node's id in the registry (e.g. w0)")
    p.add_argument("--index", required=True, type=int, help="home partitions: pp %% write_nodes == index")
    p.add_argument("--redis-url", required=True)
    p.add_argument("--host", default="127.0.0.1", help="address of the internal API (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="port of the internal API (default 0: a free port)")
    p.add_argument("--log-level", default="INFO")
    return p.parse_args(argv)


async def serve(
    settings: Settings,
    node_id: str,
    index: int,
    redis_url: str,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    advertise: str | None = None,
    takeover: bool = True,
    cluster_secret: str | None = None,
) -> None:
    """Run one write node until SIGTERM/SIGINT (see ``WriteNodeService`` for the arguments)."""
    service = WriteNodeService(
        settings, node_id, index, redis_url, host, port, takeover=takeover, advertise=advertise,
        cluster_secret=cluster_secret,
    )

    def started() -> None:
        logging.getLogger("vpq.write").info("write node %s (index %d) listening on %s", node_id, index, service.address)

    await run_until_signalled([service], on_started=started)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    setup_logging(f"write[{args.node_id}]", args.log_level)
    settings = read_settings(args.settings)
    secret = cluster_secret_or_exit(settings.cluster.secret_file)
    run(lambda: serve(settings, args.node_id, args.index, args.redis_url, args.host, args.port, cluster_secret=secret))


if __name__ == "__main__":
    main()
