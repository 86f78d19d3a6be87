"""Waiting on an ``asyncio.Event`` with a timeout, resumed one loop iteration after ``set()``.

``asyncio.wait_for(event.wait(), t)`` runs the wait as a task of its own: after
``set()`` that task resumes, finishes, and only its done-callback wakes the waiter,
two loop iterations later than a direct ``await event.wait()``. Every task ready
meanwhile runs first, so on a node that is tailing, polling and answering at once a
woken long-poll answers after all of it. ``wait_event`` awaits the event in the
caller's own task under ``asyncio.timeout``.
"""

from __future__ import annotations

import asyncio


async def wait_event(event: asyncio.Event, timeout_s: float | None) -> bool:
    """True once ``event`` is set; False when ``timeout_s`` passed first (None: no
    limit). Cancelling the caller cancels the wait, as with ``asyncio.wait_for``."""
    if event.is_set():
        return True
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        return event.is_set()
    return True
