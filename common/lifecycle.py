"""Stopping several components in order without letting one failure skip the rest."""

from __future__ import annotations

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
