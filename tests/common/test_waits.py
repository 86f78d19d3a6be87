"""``wait_event``: set, timeout, cancellation, and how soon a set wakes the waiter."""

from __future__ import annotations

import asyncio

import pytest

from vpq.common.waits import wait_event


async def test_true_when_set_false_after_the_timeout() -> None:
    ev = asyncio.Event()
    assert await wait_event(ev, 0.01) is False
    ev.set()
    assert await wait_event(ev, 0.01) is True
    ev.clear()
    asyncio.get_running_loop().call_later(0.01, ev.set)
    assert await wait_event(ev, None) is True


async def test_cancelling_the_waiter_cancels_the_wait() -> None:
    ev = asyncio.Event()
    task = asyncio.create_task(wait_event(ev, 10.0))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def _iterations_until_resumed(waiter: object) -> int:
    """Loop iterations (counted by a task that yields once per iteration) between
    ``set()`` and the waiter's resumption."""
    ev = asyncio.Event()
    resumed = asyncio.Event()
    count = 0

    async def wait() -> None:
        await waiter(ev)  # type: ignore[operator]
        resumed.set()

    task = asyncio.create_task(wait())
    await asyncio.sleep(0.01)
    ev.set()
    while not resumed.is_set():
        count += 1
        await asyncio.sleep(0)
    await task
    return count


async def test_the_waiter_resumes_in_the_next_iteration_two_sooner_than_wait_for() -> None:
    direct = await _iterations_until_resumed(lambda ev: wait_event(ev, 10.0))
    through_task = await _iterations_until_resumed(lambda ev: asyncio.wait_for(ev.wait(), 10.0))
    assert direct == 1
    assert through_task == direct + 2
