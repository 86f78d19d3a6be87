"""``python -m write_nodes.main``: one write-node process of a ``vpq up`` cluster.

Builds a :class:`~write_nodes.service.WriteNodeService` from the settings file the
supervisor wrote (``common.runfiles.read_settings``), runs it until SIGTERM/SIGINT
(graceful stop: in-flight appends finish, logs are checkpointed, leases released) on
uvloop when available, logging to stderr with timestamps.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from vpq.common.process_main import cluster_secret_or_exit, run, run_until_signalled, setup_logging
from vpq.common.runfiles import read_settings
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


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    setup_logging(f"write[{args.node_id}]", args.log_level)
    settings = read_settings(args.settings)
    secret = cluster_secret_or_exit(settings.cluster.secret_file)

    async def amain() -> None:
        service = WriteNodeService(
            settings, args.node_id, args.index, args.redis_url, args.host, args.port, cluster_secret=secret
        )

        def started() -> None:
            logging.getLogger("vpq.write").info("write node %s listening on %s", args.node_id, service.address)

        await run_until_signalled([service], on_started=started)

    run(amain)


if __name__ == "__main__":
    main()
