"""Shared entry-point plumbing for role processes (``python -m <role>.main``):
logging, the cluster secret, the event loop, and running a start()/stop() component until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from vpq.common import gc_policy
from vpq.common.cluster_secret import ClusterSecretError, load_cluster_secret


class Component(Protocol):
    async def start(self) -> Any: ...
    async def stop(self) -> Any: ...


def setup_logging(role: str, level: str = "INFO") -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format=f"%(asctime)s {role} %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


async def run_until_signalled(
    components: list[Component], on_started: Callable[[], Awaitable[None] | None] | None = None
) -> None:
    """Start the components in order, wait for SIGTERM/SIGINT, stop them in reverse order."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    started: list[Component] = []
    try:
        for component in components:
            await component.start()
            started.append(component)
        if on_started is not None:
            result = on_started()
            if asyncio.iscoroutine(result):
                await result
        await stop.wait()
    finally:
        for component in reversed(started):
            try:
                await component.stop()
            except Exception:  # keep stopping the others; the error is logged
                logging.getLogger("vpq").exception("error while stopping %r", component)


def cluster_secret_or_exit(path: Path | None) -> str | None:
    """``load_cluster_secret(path)``; a file it refuses ends the process with status 2 and
    the reason on stderr."""
    try:
        return load_cluster_secret(path)
    except ClusterSecretError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def run(main: Callable[[], Awaitable[None]]) -> None:
    """Run ``main`` on uvloop when available, with the role processes' garbage-collector
    policy (``common.gc_policy``)."""
    gc_policy.apply()
    try:
        import uvloop

        uvloop.run(main())
    except ImportError:
        asyncio.run(main())
