"""LeaderState: high watermark over the in-sync set, follower progress, waits."""

from __future__ import annotations

import asyncio

import pytest

from vpq.common.errors import Unavailable
from vpq.write_nodes.replica_leader import LeaderState


class FakeEnd:
    """The leader log's durable end, moved by the test."""

    def __init__(self) -> None:
        self.end = 0
        self.moved = asyncio.Event()

    def __call__(self) -> int:
        return self.end

    async def wait_for(self, offset: int, timeout_s: float) -> bool:
        try:
            await asyncio.wait_for(self.moved.wait(), timeout_s)
        except asyncio.TimeoutError:
            pass
        self.moved.clear()
        return self.end > offset


def _state(end: FakeEnd, isr=(0, 1, 2), min_insync: int = 2) -> LeaderState:
    return LeaderState(7, 0, 4, (0, 1, 2), isr, end, end.wait_for, 100.0, 1.0, min_insync)


async def test_the_high_watermark_is_the_smallest_durable_end_in_sync() -> None:
    end = FakeEnd()
    s = _state(end)
    end.end = 50
    assert s.high_watermark == 0
    s.fetched(1, 40, 100.1)
    s.fetched(2, 30, 100.1)
    assert s.high_watermark == 30
    s.set_isr({0, 1})
    assert s.high_watermark == 40
    s.set_isr({0})
    assert s.high_watermark == 50


async def test_an_ack_waits_for_every_in_sync_follower() -> None:
    end = FakeEnd()
    end.end = 10
    s = _state(end, isr=(0, 1))
    waiter = asyncio.create_task(s.wait_past(10))
    await asyncio.sleep(0.01)
    assert not waiter.done()
    s.fetched(1, 10, 100.2)
    assert await asyncio.wait_for(waiter, 1.0)


async def test_closing_fails_the_waiters() -> None:
    end = FakeEnd()
    end.end = 10
    s = _state(end)
    waiter = asyncio.create_task(s.wait_past(10))
    await asyncio.sleep(0.01)
    s.close(Unavailable("not_leader", "gone"))
    with pytest.raises(Unavailable):
        await waiter
    with pytest.raises(Unavailable):
        s.check_insync()


async def test_lagging_caught_up_and_lost_data() -> None:
    end = FakeEnd()
    end.end = 100
    s = _state(end)
    assert s.lagging(100.5) == []
    assert s.lagging(101.5) == [1, 2]  # nothing fetched for longer than lag_max
    s.fetched(1, 100, 101.5)  # at the end: caught up now
    assert s.lagging(101.6) == [2]
    s.fetched(2, 60, 101.6)
    s.answered(2, 100, 101.6)
    end.end = 130
    s.fetched(2, 100, 102.0)  # reached what it was sent at 101.6
    assert s.caught_up_at[2] == 101.6
    assert s.fetched(1, 20, 102.0) == "shrink"  # asks for less than it reported: its disk lost data
    s.set_isr({0, 2})
    s.follower_end[1] = 0
    assert s.fetched(1, 130, 102.1) == "expand"


async def test_min_insync() -> None:
    end = FakeEnd()
    s = _state(end, min_insync=2)
    s.check_insync()
    s.set_isr({0})
    with pytest.raises(Unavailable) as exc:
        s.check_insync()
    assert exc.value.code == "not_enough_replicas" and exc.value.status == 503


async def test_alone_in_sync_the_watermark_follows_the_log() -> None:
    end = FakeEnd()
    s = _state(end, isr=(0,))
    waiter = asyncio.create_task(s.wait_past(5, 2.0))
    await asyncio.sleep(0.01)
    end.end = 5
    end.moved.set()
    assert await waiter
