"""Lifecycle helpers: stopping several components in order without letting one failure
skip the rest, and the background loop of a component that works in rounds."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable


async def close_all(
    closers: Iterable[Callable[[], Awaitable[object]] | None], log: logging.Logger, what: str
) -> None:
    """Await each closer in order (``None`` entries are skipped); an exception is logged
    with ``what`` and the remaining closers still run."""
    for closer in closers:
        if closer is None:
            continue
        try:
            await closer()
        except Exception:  # keep closing the rest
            log.exception("error while stopping %s", what)


async def run_rounds(
    interval_s: float,
    tick: Callable[[], Awaitable[object]],
    log: logging.Logger,
    what: str,
    expected: tuple[type[BaseException], ...] = (OSError,),
) -> None:
    """Forever: sleep ``interval_s``, then ``await tick()``. A failure of a round is
    logged (``expected`` ones as a warning, others with their traceback) and the next
    round runs; only cancellation ends the loop."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await tick()
        except asyncio.CancelledError:
            raise
        except expected as exc:
            log.warning("%s round failed: %s", what, exc)
        except Exception:
            log.exception("%s round failed", what)
