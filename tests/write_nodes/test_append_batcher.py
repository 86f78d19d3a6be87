"""``write_nodes.append_batcher``: natural batching of appends per write node (a fake
client that records each request and answers when the test says so)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from common.errors import Unavailable, VpqError
from write_nodes.append_batcher import AppendBatcher
from write_nodes.append_frames import Frame


class GatedClient:
    """Answers a request only when ``release()`` is called; each frame's answer is
    (its request number, its position in the request)."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, list[Frame], int]] = []
        self._gates: list[asyncio.Future[VpqError | None]] = []

    async def append_many(self, address: str, items: Sequence[Frame], map_epoch: int) -> list[tuple[int, int] | VpqError]:
        n = len(self.requests)
        self.requests.append((address, list(items), map_epoch))
        gate: asyncio.Future[VpqError | None] = asyncio.get_running_loop().create_future()
        self._gates.append(gate)
        error = await gate
        if error is not None:
            raise error
        return [(n, i) for i in range(len(items))]

    def release(self, n: int, error: VpqError | None = None) -> None:
        self._gates[n].set_result(error)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def frames(tag: bytes, *pps: int) -> list[Frame]:
    return [Frame(pp, tag + bytes([pp]), continues=i > 0 and pps[i - 1] == pp) for i, pp in enumerate(pps)]


async def test_an_idle_node_gets_the_call_at_once() -> None:
    client = GatedClient()
    batcher = AppendBatcher(client)
    call = asyncio.create_task(batcher.append_many("w0", frames(b"a", 0, 1), 3))
    await settle()
    assert [(a, len(f), e) for a, f, e in client.requests] == [("w0", 2, 3)]
    client.release(0)
    assert await call == [(0, 0), (0, 1)]
    await batcher.stop()


async def test_calls_that_wait_leave_together_and_each_gets_its_own_answers() -> None:
    client = GatedClient()
    batcher = AppendBatcher(client, max_in_flight=1)
    first = asyncio.create_task(batcher.append_many("w0", frames(b"a", 0), 1))
    await settle()
    waiting = [
        asyncio.create_task(batcher.append_many("w0", frames(b"b", 0, 0, 1), 2)),
        asyncio.create_task(batcher.append_many("w0", frames(b"c", 0), 5)),
        asyncio.create_task(batcher.append_many("w0", frames(b"d", 1, 2), 4)),
    ]
    await settle()
    assert len(client.requests) == 1  # they wait for the request in flight
    client.release(0)
    await settle()
    assert await first == [(0, 0)]
    assert len(client.requests) == 2
    _, merged, epoch = client.requests[1]
    assert epoch == 5  # the highest epoch of the merged calls
    # every caller's frames, in order, with the caller's own chain flags
    assert merged == frames(b"b", 0, 0, 1) + frames(b"c", 0) + frames(b"d", 1, 2)
    assert [f.continues for f in merged] == [False, True, False, False, False, False]
    client.release(1)
    assert [await w for w in waiting] == [[(1, 0), (1, 1), (1, 2)], [(1, 3)], [(1, 4), (1, 5)]]
    assert batcher.stats.requests == 2 and batcher.stats.merged_calls == 3
    await batcher.stop()


async def test_a_failed_merged_request_fails_every_caller_in_it() -> None:
    client = GatedClient()
    batcher = AppendBatcher(client, max_in_flight=1)
    first = asyncio.create_task(batcher.append_many("w0", frames(b"a", 0), 1))
    await settle()
    waiting = [asyncio.create_task(batcher.append_many("w0", frames(t, 1), 1)) for t in (b"b", b"c")]
    await settle()
    client.release(0)
    await first
    await settle()
    client.release(1, Unavailable("node_unreachable", "reset"))
    for w in waiting:
        with pytest.raises(Unavailable, match="reset"):
            await w
    # the node is free again: the next call goes at once
    nxt = asyncio.create_task(batcher.append_many("w0", frames(b"e", 0), 1))
    await settle()
    client.release(2)
    assert await nxt == [(2, 0)]
    await batcher.stop()


async def test_a_cancelled_waiter_is_not_sent_and_other_nodes_do_not_wait() -> None:
    client = GatedClient()
    batcher = AppendBatcher(client, max_in_flight=1)
    first = asyncio.create_task(batcher.append_many("w0", frames(b"a", 0), 1))
    await settle()
    gone = asyncio.create_task(batcher.append_many("w0", frames(b"gone", 0), 1))
    stays = asyncio.create_task(batcher.append_many("w0", frames(b"stays", 0), 1))
    other = asyncio.create_task(batcher.append_many("w1", frames(b"x", 3), 1))
    await settle()
    assert [a for a, _, _ in client.requests] == ["w0", "w1"]  # w1 is not behind w0
    gone.cancel()
    await settle()
    client.release(0)
    await first
    await settle()
    assert client.requests[2][1] == frames(b"stays", 0)
    client.release(1)
    client.release(2)
    assert await stays == [(2, 0)] and await other == [(1, 0)]
    await batcher.stop()


async def test_waiting_calls_are_cut_at_the_request_size_limit() -> None:
    client = GatedClient()
    batcher = AppendBatcher(client, max_in_flight=1, max_request_bytes=30)
    first = asyncio.create_task(batcher.append_many("w0", frames(b"a", 0), 1))
    await settle()
    waiting = [asyncio.create_task(batcher.append_many("w0", [Frame(0, b"x" * 10)], 1)) for _ in range(3)]
    await settle()
    client.release(0)
    await first
    await settle()
    assert len(client.requests[1][1]) == 1  # 18 bytes each with the frame header: one fits in 30
    client.release(1)
    await settle()
    client.release(2)
    await settle()
    client.release(3)
    assert [await w for w in waiting] == [[(1, 0)], [(2, 0)], [(3, 0)]]
    await batcher.stop()


async def test_stop_fails_the_waiting_calls_and_leaves_no_task() -> None:
    client = GatedClient()
    batcher = AppendBatcher(client, max_in_flight=1)
    first = asyncio.create_task(batcher.append_many("w0", frames(b"a", 0), 1))
    await settle()
    waiting = asyncio.create_task(batcher.append_many("w0", frames(b"b", 0), 1))
    await settle()
    await batcher.stop()
    with pytest.raises(Unavailable) as info:
        await waiting
    assert info.value.retryable
    client.release(0)
    await first  # the direct call belongs to its caller and completes
    assert len(client.requests) == 1
    with pytest.raises(Unavailable):
        await batcher.append_many("w0", frames(b"c", 0), 1)
