from __future__ import annotations

import asyncio

from vpq.metadata.aio import cancel_and_wait


async def test_cancel_and_wait_survives_a_lost_cancellation() -> None:
    swallowed = 0

    async def stubborn() -> None:
        nonlocal swallowed
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if swallowed:
                    raise
                swallowed += 1  # what asyncio.wait_for on Python 3.11 sometimes does
                asyncio.current_task().uncancel()

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    async with asyncio.timeout(5):
        await cancel_and_wait(task, retry_every_s=0.01)
    assert task.cancelled() and swallowed == 1


async def test_cancel_and_wait_on_a_finished_task() -> None:
    async def boom() -> None:
        raise RuntimeError("x")

    task = asyncio.create_task(boom())
    await asyncio.sleep(0)
    await cancel_and_wait(task)  # logs, does not raise
    assert isinstance(task.exception(), RuntimeError)
