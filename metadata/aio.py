"""Stopping background tasks reliably.

On Python 3.11, ``asyncio.wait_for`` swallows a cancellation that arrives just as
the awaited operation completes (fixed in 3.12), and redis-py wraps every
command send in ``wait_for`` when a socket timeout is set. A single
``task.cancel()`` of a task that talks to Redis is therefore sometimes lost, and
``await task`` then hangs until the task's next long wait ends. ``cancel_and_wait``
keeps cancelling until the task has really finished.
"""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger(__name__)


async def cancel_and_wait(task: asyncio.Task[object], retry_every_s: float = 0.05) -> None:
    """Cancel ``task`` (again and again if a cancellation gets lost) until it is done.
    An exception the task died with is logged, not raised."""
    while not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=retry_every_s)
    if not task.cancelled() and task.exception() is not None:
        log.error("background task %s failed", task.get_name(), exc_info=task.exception())
