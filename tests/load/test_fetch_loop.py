"""The peers' shared consume loop and inbox, with fake fetch/ack functions."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from vpq.load.peers.fetch_loop import Delivery, FetchLoop, Inbox


async def test_handles_in_order_acks_each_batch_and_survives_fetch_errors() -> None:
    batches: list[list[Delivery] | Exception] = [
        [Delivery("a", b"1", 1), Delivery("a", b"2", 2)],
        RuntimeError("connection reset"),
        [Delivery("b", b"3", 3)],
    ]
    handled: list[tuple[str, bytes]] = []
    acked: list[list[int]] = []
    closed = asyncio.Event()

    async def fetch(max_n: int, wait_s: float) -> list[Delivery]:
        assert max_n == 10
        if not batches:
            await asyncio.sleep(0.01)
            return []
        item = batches.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    async def ack(deliveries: Sequence[Delivery]) -> None:
        acked.append([d.token for d in deliveries])

    async def handler(key: str, payload: bytes) -> None:
        handled.append((key, payload))

    async def close() -> None:
        closed.set()

    loop = FetchLoop(fetch, ack, handler, 10, close=close)
    loop.start()
    for _ in range(500):
        if len(acked) == 2:
            break
        await asyncio.sleep(0.01)
    await loop.stop()
    assert handled == [("a", b"1"), ("a", b"2"), ("b", b"3")]
    assert acked == [[1, 2], [3]]
    assert loop.errors == 1 and loop.handled == 3
    assert closed.is_set()


async def test_inbox_batches_in_arrival_order_and_times_out_empty() -> None:
    inbox = Inbox()
    assert await inbox.fetch(5, 0.01) == []
    for i in range(7):
        inbox.put(Delivery("k", bytes([i]), i))
    assert len(inbox) == 7
    first = await inbox.fetch(5, 0.01)
    rest = await inbox.fetch(5, 0.01)
    assert [d.token for d in first] == [0, 1, 2, 3, 4]
    assert [d.token for d in rest] == [5, 6]


async def test_inbox_wakes_a_waiting_fetch() -> None:
    inbox = Inbox()
    waiter = asyncio.create_task(inbox.fetch(3, 5.0))
    await asyncio.sleep(0.01)
    inbox.put(Delivery("k", b"x", 1))
    got = await asyncio.wait_for(waiter, 2.0)
    assert [d.token for d in got] == [1]
